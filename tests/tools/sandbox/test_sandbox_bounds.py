"""A sandbox is bounded as a whole: its processes' memory together, what
it may write (``/`` and ``/dev`` read-only, ``/dev/shm`` and ``/tmp`` sized,
the workspace's quota), and a workspace is private to the sandbox's user
(``0700``, its host path on no command line)."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import uuid
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from agentrt.tools._tool import ToolContext
from agentrt.tools.builtins._shell import ShellTool
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig, sandbox_host_uid
from agentrt.tools.sandbox._sandbox_watch import workspace_bytes
from agentrt.tools.sandbox._workspaces import Workspaces

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.usefixtures("bwrap")]

CTX = ToolContext(run_id="run", rollout_id="run-0")


async def test_root_and_dev_are_read_only_and_every_tmpfs_is_sized() -> None:
    sandbox = Sandbox(SandboxConfig(timeout_s=20, tmp_mb=4, shm_mb=2, max_file_mb=64))
    script = (
        "for f in /escape /dev/escape /usr/escape; do "
        '  (echo x > $f) 2>/dev/null && echo "wrote $f" || echo "refused $f"; done; '
        "echo x > /dev/null && echo 'null ok'; "
        "head -c 8M /dev/zero > /dev/shm/big 2>/dev/null; echo shm $(stat -c %s /dev/shm/big); "
        "head -c 8M /dev/zero > /tmp/big 2>/dev/null; echo tmp $(stat -c %s /tmp/big)"
    )
    result = await sandbox.run(["bash", "-c", script])
    lines = result.stdout.splitlines()
    assert lines[:3] == ["refused /escape", "refused /dev/escape", "refused /usr/escape"]
    assert "null ok" in lines
    assert f"shm {2 * 1024 * 1024}" in lines  # stopped at 2 MiB, not 8
    assert f"tmp {4 * 1024 * 1024}" in lines


_ALLOCATORS = """
import os, sys, time
count, mib, hold = map(int, sys.argv[1:])
for _ in range(count):
    if os.fork() == 0:
        block = bytearray(mib * 1024 * 1024)
        block[::4096] = b"\\x01" * (len(block) // 4096)  # every page touched: resident
        print("held", flush=True)
        time.sleep(hold)
        os._exit(0)
for _ in range(count):
    os.wait()
print("all done", flush=True)
"""


def _allocating_shell(total_mb: int, max_processes: int, spaces: Workspaces) -> ShellTool:
    config = SandboxConfig(
        timeout_s=60, memory_mb=1024, total_memory_mb=total_mb, max_processes=max_processes
    )
    return ShellTool(spaces, config)


async def test_many_allocating_processes_share_the_sandbox_total(open_dir: Path) -> None:
    """``total_memory_mb`` bounds the sandbox's processes together, not each:
    under 512 MiB for 8 processes each gets 64 MiB of address space, so 5
    processes asking for 300 MiB each are refused, and the model reads the
    per-process limit."""
    script = f"cat > a.py <<'EOF'\n{_ALLOCATORS}EOF\npython3 a.py 5 300 1"
    async with Workspaces(open_dir / "ws") as spaces:
        out = await _allocating_shell(512, 8, spaces).call({"command": script}, CTX)
    assert "MemoryError" in out.text, out.text
    assert "memory limit is 64 MB per process" in out.text
    assert "held" not in out.text


async def test_the_sandbox_says_which_memory_bound_is_in_force() -> None:
    sandbox = Sandbox(SandboxConfig(total_memory_mb=512, max_processes=8))
    assert sandbox.memory_bound.startswith("not known yet")
    await sandbox.check()
    assert sandbox.memory_bound.startswith(
        "8 processes x 64 MiB of address space (RLIMIT_NPROC per sandbox x RLIMIT_AS) = 512 MiB"
    ), sandbox.memory_bound
    unified = await anyio.Path("/sys/fs/cgroup/cgroup.controllers").exists()
    if not unified:  # cgroup v1 (this machine): the product alone
        assert sandbox.memory_bound.endswith(
            "no delegated cgroup v2 with the memory controller here"
        )
    unbounded = Sandbox(SandboxConfig(total_memory_mb=None)).memory_bound
    assert unbounded.startswith("none beyond memory_mb per process")


def test_a_total_too_small_for_its_processes_is_refused() -> None:
    with pytest.raises(ValueError, match=r"total_memory_mb / max_processes is 16 MiB per process"):
        SandboxConfig(total_memory_mb=256, max_processes=16)
    assert SandboxConfig(total_memory_mb=4096, max_processes=16).process_memory_mb == 256
    assert SandboxConfig(memory_mb=128, total_memory_mb=4096).process_memory_mb == 128


async def test_processes_within_the_sandbox_total_run_to_the_end(open_dir: Path) -> None:
    """The counterpart: 300 MiB in one process of a 2048 MiB sandbox of 4
    processes (512 MiB each) is held to the end."""
    script = f"cat > a.py <<'EOF'\n{_ALLOCATORS}EOF\npython3 a.py 1 300 1"
    async with Workspaces(open_dir / "ws") as spaces:
        out = await _allocating_shell(2048, 4, spaces).call({"command": script}, CTX)
    assert not out.is_error, out.text
    assert out.text.endswith("held\nall done"), out.text


async def test_a_workspace_is_readable_by_its_sandbox_user_only(open_dir: Path) -> None:
    async with Workspaces(open_dir / "ws") as spaces:
        space = await spaces.get("run", "run-0")
        assert stat.S_IMODE(space.path.stat().st_mode) == 0o700
        result = await Sandbox(SandboxConfig(timeout_s=10)).run(
            ["bash", "-c", "echo hi > f && cat f"], workspace=space.path
        )
        assert result.stdout == "hi\n"


async def test_the_workspace_path_is_not_on_any_command_line(open_dir: Path) -> None:
    """``ps`` shows no host workspace path while a sandbox runs in it: bwrap
    reads its options from a memory file, the command sees ``/workspace``."""
    if shutil.which("ps") is None:
        pytest.skip("needs ps")
    async with Workspaces(open_dir / "ws") as spaces:
        space = await spaces.get("run", "run-0")
        sandbox = Sandbox(SandboxConfig(timeout_s=60))
        ready = space.path / "ready"
        os.mkfifo(ready)
        os.chown(ready, sandbox_host_uid(), sandbox_host_uid())
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                functools.partial(
                    sandbox.run,
                    ["bash", "-c", "echo > ready && exec sleep 60"],
                    workspace=space.path,
                )
            )
            with anyio.fail_after(30):  # a FIFO: until the command writes to it
                await anyio.to_thread.run_sync(ready.read_bytes, abandon_on_cancel=True)
            shown = (await anyio.run_process(["ps", "-ww", "-eo", "args"])).stdout.decode()
            tg.cancel_scope.cancel()
    assert str(open_dir) not in shown
    assert "bwrap --args" in shown
    assert "sleep 60" in shown


async def test_a_gigabyte_into_dev_shm_root_or_the_workspace_is_refused(open_dir: Path) -> None:
    """1 GiB written to ``/dev/shm`` stops at its size, to ``/`` is refused,
    and the workspace stops at its quota: each with a message the model
    reads, and nothing lands on the host."""
    name = f"agentrt-escape-{uuid.uuid4().hex}"
    config = SandboxConfig(timeout_s=60, shm_mb=64, workspace_mb=100, max_file_mb=2048)
    async with Workspaces(open_dir / "ws") as spaces:
        shell = ShellTool(spaces, config)
        shm = await shell.call(
            {"command": f"head -c 1G /dev/zero > /dev/shm/{name}; stat -c %s /dev/shm/{name}"},
            CTX,
        )
        root = await shell.call({"command": f"head -c 1G /dev/zero > /{name}"}, CTX)
        fill = "for i in $(seq 64); do head -c 16M /dev/zero > f$i || exit 1; done; echo finished"
        disk = await shell.call({"command": fill}, CTX)
        left = workspace_bytes(spaces.path_of("run", "run-0"))
    assert "No space left on device" in shm.text, shm.text
    assert f"\n{64 * 1024 * 1024}\n" in shm.text
    assert "Read-only file system" in root.text, root.text
    assert disk.is_error
    assert disk.text.startswith("Over quota: the workspace grew past its disk quota of 100 MiB")
    assert "finished" not in disk.text
    assert left < 1024 * 1024 * 1024
    assert not await anyio.Path("/dev/shm", name).exists()
    assert not await anyio.Path("/", name).exists()
    assert not await anyio.Path(open_dir / "ws" / "run").exists()  # released with its workspaces


async def test_a_workspace_over_its_quota_may_shrink_but_not_grow(open_dir: Path) -> None:
    async with Workspaces(open_dir / "ws") as spaces:
        shell = ShellTool(spaces, SandboxConfig(timeout_s=30, workspace_mb=1))
        ws = spaces.path_of("run", "run-0")
        await spaces.get("run", "run-0")
        (ws / "seeded").write_bytes(b"x" * 2 * 1024 * 1024)  # the seed was bigger than the quota
        grow = await shell.call({"command": "head -c 64K /dev/zero > more"}, CTX)
        shrink = await shell.call({"command": "rm seeded more && echo gone"}, CTX)
    assert grow.text.startswith("Over quota: the workspace grew past its disk quota of 2 MiB")
    assert shrink.text == "Exit code 0.\n--- stdout ---\ngone", shrink.text


_FORKER = """
import os, time
kids = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(600)  # holds its place until the test cancels
            os._exit(0)
        kids += 1
except OSError:
    pass
with open("counts", "w") as out:
    out.write(f"{kids}\\n")
os.wait()
"""


async def test_the_process_cap_counts_each_sandbox_apart(open_dir: Path) -> None:
    """Two sandboxes of one host user, each forking until refused, at the
    same time: each gets its own ``max_processes`` (its user namespace is
    counted apart), not a share of one count for the user."""
    async with Workspaces(open_dir / "ws") as spaces:
        space = await spaces.get("run", "run-0")
        os.mkfifo(space.path / "counts")
        os.chown(space.path / "counts", sandbox_host_uid(), sandbox_host_uid())
        sandbox = Sandbox(SandboxConfig(timeout_s=60, max_processes=8, total_memory_mb=512))
        run = functools.partial(sandbox.run, ["python3", "-c", _FORKER], workspace=space.path)
        counts: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            tg.start_soon(run)
            with anyio.fail_after(50):  # both hold their children until released
                while len(counts) < 2:
                    read = await anyio.to_thread.run_sync((space.path / "counts").read_text)
                    counts += map(int, read.split())
            tg.cancel_scope.cancel()  # every process of both sandboxes is killed
    # 8 each: bubblewrap's init, the parent and 6 children, in both at once
    assert counts == [6, 6], counts
