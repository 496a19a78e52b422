"""Escapes that must fail, each tried from the ``shell`` tool and from the
``python`` tool: reading secrets (a home's ``~/.ssh``, ``/etc/shadow``, the
daemon's store, its environment), writing outside the workspace, reaching
the network or a host Unix socket, leaving a process behind, a fork bomb,
allocating past the memory limit, many processes allocating past the
sandbox's total (host memory is the judge), memory no address space counts."""

from __future__ import annotations

import functools
import os
import random
import socket
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import psutil
import pytest

from agentrt.tools import (
    PythonSandbox,
    PythonSandboxConfig,
    SandboxConfig,
    ShellTool,
    ToolContext,
    ToolOutput,
    Workspaces,
)
from agentrt.tools.sandbox._bwrap import sandbox_host_uid

pytestmark = pytest.mark.process

CTX = ToolContext(run_id="run", rollout_id="run-0")
LIMITS = {"timeout_s": 8.0, "memory_mb": 256, "max_processes": 32, "total_memory_mb": 8192}


@dataclass(frozen=True)
class Secrets:
    home: Path
    ssh_key: Path
    store: Path
    outside: Path
    values: tuple[str, ...]


@pytest.fixture
def secrets(open_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Secrets:
    """A home with an SSH key and a daemon store with a run in it, all
    world-readable (so only what the sandbox shows protects them), and a
    secret in this process's environment."""
    mark = uuid.uuid4().hex
    home = open_dir / "home"
    (home / ".ssh").mkdir(parents=True)
    ssh_key = home / ".ssh" / "id_ed25519"
    ssh_key.write_text(f"SSH-KEY-{mark}\n")
    store = open_dir / "store" / "runs.sqlite3"
    store.parent.mkdir()
    store.write_text(f"STORE-{mark}\n")
    for path in (home, home / ".ssh", store.parent):
        path.chmod(0o755)
    for path in (ssh_key, store):
        path.chmod(0o644)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGENTRT_TEST_SECRET", f"ENV-{mark}")
    shadow = Path("/etc/shadow")
    values = [f"SSH-KEY-{mark}", f"STORE-{mark}", f"ENV-{mark}"]
    if os.access(shadow, os.R_OK):
        values += [line for line in shadow.read_text().splitlines() if line.strip()][:3]
    return Secrets(home, ssh_key, store, open_dir / "outside.txt", tuple(values))


@pytest.fixture
async def workspaces(open_dir: Path) -> AsyncIterator[Workspaces]:
    async with Workspaces(open_dir / "workspaces") as spaces:
        yield spaces


@dataclass(frozen=True)
class Attacker:
    """Runs an attack through one tool: ``bash`` for the shell, ``python``
    for the Python sandbox."""

    kind: str
    shell: ShellTool
    python: PythonSandbox

    async def attempt(self, bash: str, python: str) -> ToolOutput:
        if self.kind == "shell":
            return await self.shell.call({"command": bash}, CTX)
        return await self.python.call({"code": textwrap.dedent(python)}, CTX)


@pytest.fixture(params=["shell", "python"])
def attacker(request: pytest.FixtureRequest, bwrap: str, workspaces: Workspaces) -> Attacker:
    return Attacker(
        kind=request.param,
        shell=ShellTool(workspaces, SandboxConfig.model_validate(LIMITS)),
        python=PythonSandbox(PythonSandboxConfig.model_validate(LIMITS), workspaces=workspaces),
    )


def _leaks(out: ToolOutput, secrets: Secrets) -> list[str]:
    return [v for v in secrets.values if v in out.text]


def _marked(mark: str) -> list[psutil.Process]:
    """Live processes anywhere on the host whose command line has ``mark``
    (orphans reparented to init included)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and mark in " ".join(p.info["cmdline"]):
                found.append(p)
        except (psutil.Error, TypeError):
            continue
    return found


def _mark() -> str:
    """A ``sleep`` duration no other process uses."""
    return f"{random.randint(10_000, 99_999)}.{random.randint(100, 999)}"


@pytest.mark.anyio
async def test_cannot_read_home_shadow_or_store(attacker: Attacker, secrets: Secrets) -> None:
    paths = [str(secrets.ssh_key), "/root/.ssh/id_rsa", "/etc/shadow", str(secrets.store)]
    out = await attacker.attempt(
        "cat ~/.ssh/* " + " ".join(paths) + "; ls -a / /etc; echo DONE",
        f"""
        import os
        for path in {paths!r} + [os.path.expanduser("~/.ssh/id_ed25519")]:
            try:
                print(open(path).read())
            except OSError as exc:
                print(path, type(exc).__name__)
        print(sorted(os.listdir("/")), sorted(os.listdir("/etc")))
        print("DONE")
        """,
    )
    assert "DONE" in out.text  # the attack ran
    assert _leaks(out, secrets) == []
    for hidden in ("root", "home", "work", "shadow", "gshadow", "ssh"):
        assert f"'{hidden}'" not in out.text
        assert f"\n{hidden}\n" not in out.text


@pytest.mark.anyio
async def test_cannot_read_the_daemons_environment(attacker: Attacker, secrets: Secrets) -> None:
    out = await attacker.attempt(
        "env; cat /proc/*/environ | tr '\\0' '\\n'; ls /proc; echo DONE",
        """
        import os, glob
        print(dict(os.environ))
        for path in glob.glob("/proc/*/environ"):
            try:
                print(open(path, "rb").read())
            except OSError as exc:
                print(path, exc)
        print("DONE")
        """,
    )
    assert "DONE" in out.text
    assert _leaks(out, secrets) == []
    assert "AGENTRT_TEST_SECRET" not in out.text


@pytest.mark.anyio
async def test_cannot_write_outside_the_workspace(
    attacker: Attacker, secrets: Secrets, workspaces: Workspaces
) -> None:
    targets = [str(secrets.outside), str(secrets.store), "/usr/pwned", "/etc/pwned", "/pwned"]
    out = await attacker.attempt(
        " ; ".join(f"echo pwned > {t}" for t in targets) + "; echo inside > inside.txt; echo DONE",
        f"""
        for path in {targets!r}:
            try:
                with open(path, "w") as f:
                    f.write("pwned")
            except OSError as exc:
                print(path, type(exc).__name__)
        open("inside.txt", "w").write("inside")
        print("DONE")
        """,
    )
    assert "DONE" in out.text
    assert not secrets.outside.exists()
    assert "pwned" not in secrets.store.read_text()
    for path in ("/usr/pwned", "/etc/pwned", "/pwned"):
        assert not await anyio.Path(path).exists()
    inside = workspaces.path_of(CTX.run_id, CTX.rollout_id) / "inside.txt"
    assert inside.read_text().strip() == "inside"  # the workspace is writable


@pytest.mark.anyio
async def test_cannot_reach_the_network(attacker: Attacker) -> None:
    connected: list[bool] = []

    async def handle(stream: anyio.abc.SocketStream) -> None:
        connected.append(True)
        await stream.aclose()

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)
            async with await anyio.connect_tcp("127.0.0.1", port):
                pass  # reachable from here
            with anyio.fail_after(5):
                while not connected:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            connected.clear()
            out = await attacker.attempt(
                f"(exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED); "
                "getent hosts pypi.org && echo RESOLVED; echo DONE",
                f"""
                import socket
                for address in [("127.0.0.1", {port}), ("pypi.org", 443), ("1.1.1.1", 53)]:
                    try:
                        socket.create_connection(address, timeout=2)
                        print("CONNECTED", address)
                    except OSError as exc:
                        print(address, type(exc).__name__)
                print("DONE")
                """,
            )
            await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    assert "DONE" in out.text
    assert "CONNECTED" not in out.text
    assert "RESOLVED" not in out.text
    assert connected == []


@pytest.mark.anyio
async def test_network_is_an_opt_in(bwrap: str, workspaces: Workspaces) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        shell = ShellTool(workspaces, SandboxConfig(network=True))
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, _close)
            out = await shell.call(
                {"command": f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"}, CTX
            )
            tg.cancel_scope.cancel()
    assert "CONNECTED" in out.text, out.text


async def _close(stream: anyio.abc.SocketStream) -> None:
    await stream.aclose()


@pytest.fixture
def unix_listeners(open_dir: Path) -> Iterator[tuple[str, str]]:
    """A Unix socket at a path anyone may reach and an abstract one, both listening."""
    path = str(open_dir / "daemon.sock")
    abstract = f"agentrt-test-{uuid.uuid4().hex}"
    sockets = []
    for address in (path, "\0" + abstract):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        s.listen()
        sockets.append(s)
    os.chmod(path, 0o777)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.connect(path)  # reachable from here
    probe.close()
    try:
        yield path, abstract
    finally:
        for s in sockets:
            s.close()


@pytest.mark.anyio
async def test_cannot_reach_a_host_unix_socket(
    attacker: Attacker, unix_listeners: tuple[str, str]
) -> None:
    path, abstract = unix_listeners
    program = f"""
        import socket
        for address in [{path!r}, "\\0" + {abstract!r}]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(address)
                print("CONNECTED", repr(address))
            except OSError as exc:
                print(repr(address), type(exc).__name__)
        print("DONE")
        """
    out = await attacker.attempt(
        f"python3 -c {_quote(textwrap.dedent(program))}; echo > {path} && echo WROTE", program
    )
    assert "DONE" in out.text
    assert "CONNECTED" not in out.text
    assert "WROTE" not in out.text


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.mark.anyio
async def test_no_process_outlives_the_call(attacker: Attacker) -> None:
    mark = _mark()
    out = await attacker.attempt(
        f"(setsid sleep {mark} &); nohup sleep {mark} >/dev/null 2>&1 & disown; "
        f"sleep {mark} </dev/null >/dev/null 2>&1 & sleep 0.2; echo STARTED",
        f"""
        import os, subprocess, time
        subprocess.Popen(["sleep", "{mark}"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.fork() == 0:          # a daemon: double fork, new session
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "{mark}"])
            os._exit(0)
        time.sleep(0.2)
        print("STARTED")
        """,
    )
    assert "STARTED" in out.text
    assert not out.is_error, out.text
    with anyio.fail_after(5):
        while leftovers := _marked(mark):  # noqa: ASYNC110 (polling the host's processes)
            await anyio.sleep(0.05)
    assert leftovers == []


@pytest.mark.anyio
async def test_a_fork_bomb_is_contained(attacker: Attacker) -> None:
    mark = _mark()
    peak = 0
    done = anyio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(_marked(mark)))
            await anyio.sleep(0.05)

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        out = await attacker.attempt(
            f"bomb() {{ sleep {mark} & bomb | bomb & }}; bomb; sleep {mark}",
            f"""
            import os, time
            children = 0
            try:
                while True:
                    if os.fork() == 0:
                        os.execvp("sleep", ["sleep", "{mark}"])
                    children += 1
            except OSError as exc:
                print("STOPPED after", children, type(exc).__name__, flush=True)
            time.sleep(1.5)  # the children live on until the call ends: let the watch see them
            """,
        )
        done.set()
    assert anyio.current_time() - started < LIMITS["timeout_s"] + 5
    # the limit, plus the two bwrap processes whose command lines carry the mark
    assert 0 < peak <= LIMITS["max_processes"] + 2, peak
    if attacker.kind == "python":
        assert "STOPPED after" in out.text
        assert "BlockingIOError" in out.text
    with anyio.fail_after(5):
        while _marked(mark):  # noqa: ASYNC110 (polling the host's processes)
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_cannot_allocate_past_the_memory_limit(attacker: Attacker) -> None:
    out = await attacker.attempt(
        "python3 -c 'data = bytearray(1024 ** 3); print(\"ALLOCATED\")'",
        "data = bytearray(1024 ** 3)\nprint('ALLOCATED')",
    )
    assert out.is_error
    assert "ALLOCATED" not in out.text
    assert "MemoryError" in out.text
    assert "memory limit is 256 MB" in out.text


@pytest.mark.anyio
async def test_cannot_create_a_user_namespace(attacker: Attacker) -> None:
    out = await attacker.attempt(
        "unshare --user --map-root-user id && echo ESCALATED; echo DONE",
        """
        import subprocess
        done = subprocess.run(["unshare", "--user", "--map-root-user", "id"])
        print("ESCALATED" if done.returncode == 0 else "refused")
        print("DONE")
        """,
    )
    assert "DONE" in out.text
    assert "ESCALATED" not in out.text


#: Children that each take up to ``ATTEMPT_MIB`` in 1 MiB blocks (every page
#: touched), report what they hold, and hold it until the test has measured
#: the host: ``ready`` and ``release`` are FIFOs in the workspace.
_HOGS = """
import os, sys
ATTEMPT_MIB = 1024
kids, reports = [], []
for _ in range(16):
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        break  # the process cap
    if pid == 0:
        held = []
        try:
            for _ in range(ATTEMPT_MIB):
                block = bytearray(1 << 20)
                block[::4096] = b"\\x01" * 256
                held.append(block)
        except MemoryError:
            pass
        os.write(w, str(len(held)).encode())
        os.close(w)
        open("release").read()
        os._exit(0)
    os.close(w)
    kids.append(pid)
    reports.append(r)
total = sum(int(os.read(r, 64) or b"0") for r in reports)
print("PROCESSES", len(kids), "HELD_MIB", total, flush=True)
with open("ready", "w") as f:
    f.write("ready")
for pid in kids:
    os.waitpid(pid, 0)
"""


def _available_kib() -> int:
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise AssertionError("no MemAvailable in /proc/meminfo")


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["shell", "python"])
async def test_many_processes_allocating_hold_no_more_than_the_total(
    kind: str, bwrap: str, workspaces: Workspaces
) -> None:
    """Processes forked up to the cap, each allocating up to 1 GiB: the
    host's available memory drops by no more than the sandbox's 512 MiB
    (8 processes x 64 MiB of address space), while without the bound it
    would drop by 1 GiB a process.  Other work on the host moves
    ``MemAvailable`` too, so a drop past the bound is measured again (up to
    3 times); without the bound every try is far past it."""
    total_mib = 512
    limits = {"timeout_s": 120.0, "max_processes": 8, "total_memory_mb": total_mib}
    shell = ShellTool(workspaces, SandboxConfig.model_validate(limits))
    python = PythonSandbox(PythonSandboxConfig.model_validate(limits), workspaces=workspaces)
    space = await workspaces.get(CTX.run_id, CTX.rollout_id)
    for fifo in ("ready", "release"):
        os.mkfifo(space.path / fifo)
        os.chown(space.path / fifo, sandbox_host_uid(), sandbox_host_uid())
    if kind == "shell":
        call = functools.partial(shell.call, {"command": f"python3 - <<'EOF'\n{_HOGS}EOF"}, CTX)
    else:
        call = functools.partial(python.call, {"code": _HOGS}, CTX)
    drops: list[float] = []
    for _ in range(3):
        outputs: list[ToolOutput] = []

        async def attack() -> None:
            outputs.append(await call())  # noqa: B023 (awaited within the iteration)

        before = sorted(_available_kib() for _ in range(3))[1]
        async with anyio.create_task_group() as tg:
            tg.start_soon(attack)
            with anyio.fail_after(100):  # a FIFO: until every child holds its memory
                await anyio.to_thread.run_sync((space.path / "ready").read_bytes)
            holding = []
            for _ in range(3):
                holding.append(_available_kib())
                await anyio.sleep(0.1)
            await anyio.to_thread.run_sync((space.path / "release").write_bytes, b"go")
        out = outputs[0]
        assert "PROCESSES" in out.text, out.text
        held = int(out.text.split("HELD_MIB")[1].split()[0])
        assert held >= total_mib // 4, out.text  # they did allocate
        assert held <= total_mib, out.text
        drops.append((before - max(holding)) / 1024)
        if drops[-1] <= total_mib:
            break
    assert min(drops) <= total_mib, (drops, out.text)


@pytest.mark.anyio
async def test_memory_no_address_space_counts_is_refused(attacker: Attacker) -> None:
    """SysV shared memory (kept after ``shmdt``) and memory files (grown
    by ``write``) would hold memory past the address-space bound: both
    are refused."""
    probe = """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(0, 1 << 20, 0o1600)
    print("shmget", "refused" if segment < 0 else "ALLOWED", os.strerror(ctypes.get_errno()))
    try:
        os.memfd_create("hold")
        print("memfd ALLOWED")
    except OSError as exc:
        print("memfd refused", exc.strerror)
    """
    out = await attacker.attempt(
        f"python3 - <<'EOF'\n{textwrap.dedent(probe)}EOF", textwrap.dedent(probe)
    )
    assert "shmget refused Function not implemented" in out.text, out.text
    assert "memfd refused Function not implemented" in out.text, out.text
    assert "ALLOWED" not in out.text
