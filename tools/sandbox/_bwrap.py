"""The sandbox every code-running tool runs in: ``Sandbox`` (one bubblewrap
process per command), its ``SandboxConfig``, ``SandboxResult`` and
``SandboxUnavailable``.

Owns what a sandboxed command can see and do: a read-only view of the system
(``/usr``, the ``/lib*`` and ``/bin`` links, a short allow-list of ``/etc``),
one writable workspace, a private ``/tmp``, no network unless configured, a
fresh PID namespace that dies with the call, resource limits, a clean
environment.  Must not know about tools, rollouts or where workspaces come
from (``agentrt.tools.sandbox._workspaces``).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Self, final

import anyio
import anyio.abc
import msgspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools.sandbox._cgroup import SandboxCgroups, memory_bound_in_force
from agentrt.tools.sandbox._sandbox_watch import SandboxWatch
from agentrt.tools.sandbox._seccomp import memory_filter

__all__ = [
    "SANDBOX_HOST_UID",
    "Sandbox",
    "SandboxConfig",
    "SandboxEnvironment",
    "SandboxResult",
    "SandboxUnavailable",
    "render_result",
    "sandbox_host_uid",
]

_log = get_logger(__name__)

#: The host user a sandbox runs as when agentrt runs as root: root's
#: processes escape ``RLIMIT_NPROC`` and own every system file, so a root
#: daemon hands commands to ``nobody`` instead (workspaces are chowned to it).
SANDBOX_HOST_UID: Final = 65534
#: The user and group a command sees itself as, inside.
_INNER_ID: Final = "1000"
#: After the sandbox is killed, how long to keep reading its pipes.
_DRAIN_GRACE_S: Final = 1.0
_PROBE_TIMEOUT_S: Final = 10.0
#: The smallest address space a process of a sandbox may get: bash, git
#: and a bare ``python3`` start in 32 MiB (pytest with plugins needs ~190).
_MIN_PROCESS_MB: Final = 32
#: The sandbox's private tmpfs (not the host's /tmp), also its HOME.
_TMP: Final = "/tmp"  # noqa: S108
#: The sandbox's private, sized ``/dev/shm``.
_SHM: Final = "/dev/shm"  # noqa: S108
_PATH: Final = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
#: What of ``/etc`` a command sees: what programs need to start, resolve
#: users and find certificates; never ``shadow``, ``ssh`` host keys,
#: ``ssl/private`` or anything else kept there.
_ETC: Final = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates.conf",
    "debian_version",
    "gitconfig",
    "group",
    "host.conf",
    "hostname",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
)
#: Refuses the calls that hold memory outside any address space.
_MEMORY_FILTER: Final = memory_filter()
#: Only with the network: name resolution.
_ETC_NETWORK: Final = ("hosts", "resolv.conf", "gai.conf")


def sandbox_host_uid() -> int:
    """The host uid sandboxed commands run as: this process's own, or
    ``SANDBOX_HOST_UID`` when this process is root."""
    uid = os.geteuid()
    return SANDBOX_HOST_UID if uid == 0 else uid


class SandboxUnavailable(ToolError):
    """The sandbox cannot run here (bubblewrap is missing or cannot create
    its namespaces).  Nothing runs unsandboxed instead."""


class SandboxConfig(BaseModel):
    """Limits and isolation of one sandboxed command."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    timeout_s: float = Field(30.0, gt=0, le=3600)
    """Wall-clock limit per command; the whole sandbox is killed past it."""
    cpu_s: int | None = Field(None, ge=1)
    """CPU seconds per process (``RLIMIT_CPU``); by default ``timeout_s`` rounded up."""
    memory_mb: int = Field(1024, ge=64)
    """Address space per process (``RLIMIT_AS``), in MiB: at most; with
    ``total_memory_mb`` set, each process gets ``process_memory_mb``."""
    max_processes: int = Field(16, ge=4, le=4096)
    """Processes and threads the sandbox may have at once, bubblewrap's
    init among them (``RLIMIT_NPROC``, counted per sandbox: each has its
    own user namespace, and Linux counts a namespace's processes apart
    since 5.14)."""
    total_memory_mb: int | None = Field(4096, ge=64)
    """The whole sandbox's memory, in MiB, a hard bound (``None``: only
    ``memory_mb`` per process): each process's address space is
    ``total_memory_mb / max_processes`` (``process_memory_mb``, at most
    ``memory_mb``), so ``max_processes`` of them hold at most the total;
    SysV shared memory and memory files, which no address space counts,
    are refused.  Where a delegated cgroup v2 exists, its ``memory.max``
    is the total too (``Sandbox.memory_bound``).  The private ``/tmp`` and
    ``/dev/shm`` come on top (``tmp_mb``, ``shm_mb``)."""
    max_output_bytes: int = Field(16_384, ge=256)
    """Per stream: longer output keeps its first and last halves and says so."""
    max_file_mb: int = Field(64, ge=1)
    """Largest file a command may write (``RLIMIT_FSIZE``), in MiB."""
    max_open_files: int = Field(256, ge=16)
    """Open files per process (``RLIMIT_NOFILE``)."""
    workspace_mb: int | None = Field(2048, ge=1)
    """The workspace's disk quota, in MiB (``None``: none): its files'
    blocks, measured before the command, while it runs (every 0.1 s, less
    often for a workspace whose walk takes long: at most 2% of a core) and
    when it ends; past it, every
    process is killed and the result says so.  A workspace already over it
    may not grow.  A command may overshoot by what it writes within one
    measure (each file stops at ``max_file_mb``)."""
    tmp_mb: int = Field(256, ge=1)
    """Size of the private ``/tmp`` (and of the workspace when none is given), in MiB."""
    shm_mb: int = Field(64, ge=1)
    """Size of the private ``/dev/shm``, in MiB.  ``/`` and ``/dev`` are
    read-only: ``/tmp``, ``/dev/shm`` and the workspace are all a command
    can write."""
    network: bool = False
    """Share the host's network (and its name resolution files).  Off: only
    an isolated loopback, and no host Unix sockets, abstract ones included."""
    workspace_mount: str = Field("/workspace", pattern=r"^/[A-Za-z0-9._/-]+$")
    """Where the workspace appears inside (``/testbed`` for SWE-bench-style tasks)."""
    read_only_paths: tuple[str, ...] = ()
    """More host directories to show read-only at the same path (a virtual
    environment, a toolchain).  Never the daemon's store or a home directory."""
    env: dict[str, str] = {}
    """Variables set inside, beyond ``PATH``, ``HOME`` (``/tmp``), ``LANG``
    and ``TMPDIR``; nothing of the daemon's environment gets in."""

    @property
    def process_memory_mb(self) -> int:
        """The address space each process gets (``RLIMIT_AS``), in MiB."""
        if self.total_memory_mb is None:
            return self.memory_mb
        return min(self.memory_mb, self.total_memory_mb // self.max_processes)

    @model_validator(mode="after")
    def _room_per_process(self) -> Self:
        if self.process_memory_mb < _MIN_PROCESS_MB:
            raise ValueError(
                f"total_memory_mb / max_processes is {self.process_memory_mb} MiB per process "
                f"({self.total_memory_mb} / {self.max_processes}); at least {_MIN_PROCESS_MB} "
                "are needed to start a program: raise total_memory_mb or lower max_processes"
            )
        return self

    @field_validator("read_only_paths")
    @classmethod
    def _absolute(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        for path in paths:
            if not os.path.isabs(path) or "\x00" in path:
                raise ValueError(f"read_only_paths: {path!r} is not an absolute path")
        return paths


class SandboxEnvironment(msgspec.Struct, frozen=True, kw_only=True):
    """What one task's commands need beyond the sandbox's configuration:
    its repository's prepared environment (a virtualenv built at setup),
    given per run rather than per tool.  Added to the config's own."""

    read_only_paths: tuple[str, ...] = ()
    """Host directories shown read-only at the same path."""
    env: dict[str, str] = {}
    """Variables set inside (``PATH`` with the virtualenv's ``bin`` first...)."""

    def problem(self) -> str:
        """Why a sandbox cannot use it (empty: it can)."""
        for path in self.read_only_paths:
            if not os.path.isabs(path) or "\x00" in path:
                return f"read_only_paths: {path!r} is not an absolute path"
            if not os.path.exists(path):
                return f"read_only_paths: {path!r} does not exist"
        return ""


class SandboxResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one sandboxed command did.  ``exit_code`` is ``128 + N`` when
    signal N ended the command (``signal`` names it); ``None`` when the
    sandbox was killed at the deadline (``timed_out``)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: str = ""
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    over_limit: str = ""
    """Set when the workspace's quota, or a cgroup's memory bound, was
    crossed: a sentence saying which, by how much, and what was done."""

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.over_limit and self.exit_code == 0


@final
class _CappedBuffer:
    """Keeps the first and the last half of a stream, counting the rest."""

    __slots__ = ("_head", "_head_cap", "_tail", "_tail_cap", "total")

    def __init__(self, limit: int) -> None:
        self._head_cap = limit // 2
        self._tail_cap = limit - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        take = min(len(chunk), self._head_cap - len(self._head))
        if take > 0:
            self._head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self._head_cap + self._tail_cap

    def text(self) -> str:
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        omitted = self.total - len(self._head) - len(self._tail)
        return (
            f"{head}\n[... {omitted} bytes omitted: the output was {self.total} bytes, "
            f"only the first and last {self._head_cap + self._tail_cap} are kept; "
            f"redirect long output to a file and read parts of it ...]\n{tail}"
        )


async def _drain(stream: anyio.abc.ByteReceiveStream | None, into: _CappedBuffer) -> None:
    if stream is None:
        return
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        async for chunk in stream:
            into.add(chunk)


async def _feed(stream: anyio.abc.ByteSendStream | None, data: bytes) -> None:
    if stream is None:
        return
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        if data:
            await stream.send(data)
        await stream.aclose()


def _kill_group(pgid: int) -> None:
    # bwrap leads its own session, so its pid is its process group id; the
    # sandbox's PID 1 (bwrap's child) is in that group too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _pidfds_of_children(pid: int) -> list[int]:
    # /proc is not a disk: reading it does not block
    fds: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for child in children:
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(int(child)))
    return fds


async def _kill_sandbox(pid: int) -> None:
    """Kill bwrap and wait until its sandbox is empty.  The sandbox's PID 1
    is bwrap's child, not ours: it is watched through a pidfd, and it is
    gone only once the kernel has killed and reaped every process of its
    namespace."""
    watched = _pidfds_of_children(pid)
    _kill_group(pid)
    try:
        with anyio.move_on_after(_DRAIN_GRACE_S * 5):
            for fd in watched:
                await anyio.wait_readable(fd)
    finally:
        for fd in watched:
            os.close(fd)


def _signal_name(code: int | None) -> str:
    if code is None or code <= 128 or code > 128 + 64:
        return ""
    with contextlib.suppress(ValueError):
        return signal.Signals(code - 128).name
    return f"signal {code - 128}"


def _system_view() -> list[str]:
    """Read-only binds of the system directories programs need."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


@final
class Sandbox:
    """Runs commands under bubblewrap.

    ::

        sandbox = Sandbox(SandboxConfig(timeout_s=5))
        result = await sandbox.run(["bash", "-c", "ls"], workspace=Path("ws"))

    Each ``run`` is one ``bwrap`` process: new user, PID, network, IPC, UTS
    and cgroup namespaces, ``--die-with-parent``, ``--new-session``, no
    nested user namespaces; the command runs as an unprivileged user with
    an empty environment plus what the config sets, under ``prlimit``.  The
    first ``run`` checks that bubblewrap works here and raises
    ``SandboxUnavailable`` (naming it) when it does not.
    """

    __slots__ = ("_cgroups", "_checked", "_config", "_lock")

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self._config = config or SandboxConfig()
        self._checked: str | None = None  # None: not yet; "": works; else why not
        self._cgroups: SandboxCgroups | None = None  # found by the probe
        self._lock = anyio.Lock()

    @property
    def config(self) -> SandboxConfig:
        return self._config

    @property
    def memory_bound(self) -> str:
        """Which bounds keep ``total_memory_mb`` here, in a sentence: the
        address spaces of the process cap, and a cgroup v2 per sandbox
        where a delegated one with the memory controller can be made
        (known after ``check``)."""
        c = self._config
        if c.total_memory_mb is None:
            return "none beyond memory_mb per process (total_memory_mb is not set)"
        if self._cgroups is None:
            return "not known yet: the sandbox has not been checked"
        return memory_bound_in_force(
            self._cgroups,
            process_mb=c.process_memory_mb,
            processes=c.max_processes,
            filtered=_MEMORY_FILTER is not None,
        )

    async def check(self) -> None:
        """Raise ``SandboxUnavailable`` unless bubblewrap runs here (probed once)."""
        if self._checked is None:
            async with self._lock:
                if self._checked is None:
                    self._checked = await self._probe()
        if self._checked:
            raise SandboxUnavailable(self._checked)

    async def _probe(self) -> str:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            return (
                "the sandbox needs bubblewrap (the `bwrap` command), which is not installed; "
                "install it (Debian/Ubuntu: apt-get install -y bubblewrap). "
                "Commands never run unsandboxed."
            )
        try:
            with anyio.fail_after(_PROBE_TIMEOUT_S):
                probe = await _open_sandbox(self.argv(["true"], workspace=None), None, self._config)
                failure = _CappedBuffer(4096)
                async with probe:
                    await _feed(probe.stdin, b"")
                    await _drain(probe.stderr, failure)
                    returncode = await probe.wait()
        except (OSError, TimeoutError) as exc:
            return f"bubblewrap ({bwrap}) could not start a sandbox: {exc}"
        if returncode != 0:
            why = failure.text().strip() or f"exit {returncode}"
            return (
                f"bubblewrap ({bwrap}) could not start a sandbox: {why} "
                "(are unprivileged user namespaces enabled?). Commands never run unsandboxed."
            )
        self._cgroups = await anyio.to_thread.run_sync(SandboxCgroups)
        _log.info("sandbox.memory_bound", bound=self.memory_bound)
        return ""

    def argv(
        self,
        command: Sequence[str],
        *,
        workspace: Path | None,
        timeout_s: float | None = None,
        environment: SandboxEnvironment | None = None,
    ) -> list[str]:
        """The full ``bwrap`` command line for ``command`` (for tests and the curious)."""
        c = self._config
        extra = environment or SandboxEnvironment()
        timeout = c.timeout_s if timeout_s is None else timeout_s
        cpu_s = c.cpu_s or max(1, math.ceil(timeout))
        mount = c.workspace_mount
        tmp_bytes = str(c.tmp_mb * 1024 * 1024)
        args = [
            *_as_sandbox_user(),
            "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--uid",
            _INNER_ID,
            "--gid",
            _INNER_ID,
            "--hostname",
            "sandbox",
        ]
        if c.network:
            args.append("--share-net")
        args += _system_view()
        for name in (*_ETC, *(_ETC_NETWORK if c.network else ())):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        shm = str(c.shm_mb * 1024 * 1024)
        args += ["--perms", "1777", "--size", shm, "--tmpfs", _SHM]
        args += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", _TMP]
        for path in (*c.read_only_paths, *extra.read_only_paths):
            args += ["--ro-bind", path, path]
        if workspace is None:
            args += ["--perms", "0755", "--size", tmp_bytes, "--tmpfs", mount]
        else:
            args += ["--bind", str(workspace), mount]
        # bwrap's root and /dev are unsized tmpfs mounts: nothing may be written there
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        args += ["--chdir", mount, "--clearenv"]
        env = {
            "PATH": _PATH,
            "HOME": _TMP,
            "TMPDIR": _TMP,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra.env,
            **c.env,
        }
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += [
            "--",
            "prlimit",
            f"--as={c.process_memory_mb * 1024 * 1024}",
            f"--cpu={cpu_s}:{cpu_s + 1}",
            f"--nproc={c.max_processes}",
            f"--fsize={c.max_file_mb * 1024 * 1024}",
            f"--nofile={c.max_open_files}",
            "--core=0",
            "--",
            *command,
        ]
        return args

    async def run(
        self,
        command: Sequence[str],
        *,
        workspace: Path | None = None,
        stdin: bytes = b"",
        timeout_s: float | None = None,
        environment: SandboxEnvironment | None = None,
    ) -> SandboxResult:
        """Run ``command`` (an argv) in a fresh sandbox and wait for it.

        ``workspace``: the host directory shown writable at
        ``config.workspace_mount`` (it must exist and be writable by
        ``sandbox_host_uid()``); ``None``: an empty private one, gone after
        the call.  ``stdin``: what the command reads.  ``timeout_s`` may
        only shorten the configured limit.  ``environment``: more read-only
        paths and variables for this command (a task's).  Every process of the sandbox is
        gone when this returns, also when it is cancelled.  Raises
        ``SandboxUnavailable`` when bubblewrap cannot run here."""
        await self.check()
        c = self._config
        limit = c.timeout_s if timeout_s is None else min(timeout_s, c.timeout_s)
        argv = self.argv(command, workspace=workspace, timeout_s=limit, environment=environment)
        out = _CappedBuffer(c.max_output_bytes)
        err = _CappedBuffer(c.max_output_bytes)
        pid = 0

        async def kill() -> None:
            await _kill_sandbox(pid)

        cgroup = await self._cgroup()
        watch = SandboxWatch(
            workspace=workspace,
            workspace_mb=c.workspace_mb,
            kill=kill,
        )
        await watch.prepare()
        started = time.monotonic()
        with anyio.CancelScope(shield=True):  # a started process always gets its cleanup
            process = await _open_sandbox(argv, cgroup, c)
        pid = process.pid
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_feed, process.stdin, stdin)
                tg.start_soon(_drain, process.stdout, out)
                tg.start_soon(_drain, process.stderr, err)
                async with anyio.create_task_group() as watching:
                    if watch.active:
                        watching.start_soon(watch.run)
                    with anyio.move_on_after(limit) as deadline:
                        await process.wait()
                    watching.cancel_scope.cancel()
                if deadline.cancelled_caught:
                    await _kill_sandbox(pid)
                tg.cancel_scope.deadline = anyio.current_time() + _DRAIN_GRACE_S
        finally:
            with anyio.CancelScope(shield=True):
                await _kill_sandbox(pid)
                await process.aclose()
                if cgroup is not None:
                    watch.over = await anyio.to_thread.run_sync(_end_cgroup, cgroup, c)
        timed_out = deadline.cancelled_caught
        await watch.check_disk_after()
        code = None if timed_out else process.returncode
        if timed_out:
            _log.info("sandbox.timeout", timeout_s=limit)
        if watch.over:
            _log.info("sandbox.over_limit", why=watch.over)
        return SandboxResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            signal=_signal_name(code),
            duration_s=round(time.monotonic() - started, 4),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            over_limit=watch.over,
        )

    async def _cgroup(self) -> Path | None:
        """This command's cgroup, when the total memory is set and a
        delegated cgroup v2 is available (else the watcher keeps it)."""
        c = self._config
        cgroups = self._cgroups
        if c.total_memory_mb is None or cgroups is None or not cgroups.available:
            return None
        try:
            return await anyio.to_thread.run_sync(cgroups.make, c.total_memory_mb, c.max_processes)
        except OSError as exc:
            _log.warning("sandbox.cgroup_failed", error=str(exc))
            return None


def _end_cgroup(cgroup: Path, config: SandboxConfig) -> str:
    """Remove a command's cgroup; what to tell the model if it ran out of memory."""
    killed = SandboxCgroups.oom_killed(cgroup)
    SandboxCgroups.remove(cgroup)
    if not killed:
        return ""
    return (
        f"Killed: the command's processes together needed more than the sandbox's "
        f"{config.total_memory_mb} MiB (its cgroup's memory.max). Use less memory at "
        "once (fewer parallel processes, smaller inputs)."
    )


async def _open_sandbox(
    argv: list[str], cgroup: Path | None, config: SandboxConfig
) -> anyio.abc.Process:
    """Start ``argv`` (``[*prefix, "bwrap", *options, "--", *command]``)
    under the memory filter (``--seccomp``, see ``_seccomp``), with
    bubblewrap's options read from a memory file (``--args``), not its
    command line: the workspace's host path is not for ``ps`` to show other
    users.  (The command stays on it: bubblewrap takes it from there only,
    and it names paths as the sandbox sees them.)  In ``cgroup``, joined
    before bubblewrap starts, so every process of the sandbox is in it."""
    at = argv.index("bwrap") + 1
    end = argv.index("--", at)
    fds: list[int] = []
    try:
        options = argv[at:end]
        if _MEMORY_FILTER is not None:
            fds.append(_memory_file("bwrap-seccomp", _MEMORY_FILTER))
            options += ["--seccomp", str(fds[-1])]
        fds.append(_memory_file("bwrap-args", b"".join(a.encode() + b"\0" for a in options)))
        launch = [*argv[:at], "--args", str(fds[-1]), *argv[end:]]
        if cgroup is not None:
            launch = ["sh", "-c", 'echo 0 > "$0" && exec "$@"', f"{cgroup}/cgroup.procs", *launch]
        return await anyio.open_process(
            launch, env={"PATH": _PATH}, start_new_session=True, pass_fds=fds
        )
    except BaseException:
        if cgroup is not None:
            _end_cgroup(cgroup, config)
        raise
    finally:
        for fd in fds:
            os.close(fd)


def _memory_file(name: str, data: bytes) -> int:
    """A memory file holding ``data``, read from its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _as_sandbox_user() -> list[str]:
    """The prefix that starts bwrap as ``sandbox_host_uid()``: ``setpriv``
    when this process is root (not ``open_process(user=...)``: uvloop's
    subprocesses do not take it), else nothing."""
    if os.geteuid() != 0:
        return []
    uid = str(SANDBOX_HOST_UID)
    return ["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--"]


def render_result(result: SandboxResult, *, timeout_s: float, memory_mb: int, cpu_s: float) -> str:
    """``result`` as the model reads it: how it ended, then stdout and stderr."""
    if result.over_limit:
        lines = [result.over_limit]
    elif result.timed_out:
        lines = [f"Timed out after {timeout_s:g} s; every process of the command was killed."]
    elif result.signal == "SIGXCPU":
        lines = [f"Killed: CPU time limit exceeded (SIGXCPU, {cpu_s:g} s)."]
    elif result.signal:
        lines = [f"Exit code {result.exit_code}: killed by {result.signal}."]
    else:
        lines = [f"Exit code {result.exit_code}."]
    if "MemoryError" in result.stderr or "Cannot allocate memory" in result.stderr:
        lines.append(f"Note: the sandbox's memory limit is {memory_mb} MB per process.")
    if result.stdout:
        lines += ["--- stdout ---", result.stdout.rstrip("\n")]
    if result.stderr:
        lines += ["--- stderr ---", result.stderr.rstrip("\n")]
    if not result.stdout and not result.stderr:
        lines.append("(no output)")
    return "\n".join(lines)
