"""Run model-written Python in a child process with limits: ``PythonSandbox``
(the ``python`` tool), its configuration and ``SandboxResult``.

Contains accidents and limits resources; it is not a jail for hostile code
(use a container or VM for that).  Imports the runtime floor and the tools
layer; never agents or aggregators.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from functools import partial
from typing import Annotated, Any, Final, Literal, final

import anyio
import anyio.abc
import anyio.to_thread
import msgspec
from pydantic import BaseModel, ConfigDict, Field

from agentrt.protocols import ToolSpec
from agentrt.runtime.errors import ToolError
from agentrt.runtime.log import get_logger
from agentrt.tools.base import ToolContent, ToolContext, ToolOutput
from agentrt.tools.function import FunctionTool

__all__ = ["PythonSandbox", "PythonSandboxConfig", "SandboxResult"]

_log = get_logger(__name__)

#: After the process group is killed, how long to keep reading its pipes (a
#: descendant that left the group could hold them open forever).
_DRAIN_GRACE_S: Final = 1.0
#: Deadline of the one-off ``unshare`` probe.
_PROBE_TIMEOUT_S: Final = 5.0
_SCRIPT: Final = "main.py"

# The child's first code: limits, the audit hook, then the program.  It runs
# under -I -S, so it uses only builtin modules until the program starts.
_BOOTSTRAP: Final = r"""
import sys

def _sandbox():
    import resource
    from _socket import AF_UNIX
    memory, cpu, fsize, nofile, no_network_namespace = (int(a) for a in sys.argv[1:6])
    path = sys.argv[6]
    for res, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, fsize, fsize),
        (resource.RLIMIT_NOFILE, nofile, nofile),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        current = resource.getrlimit(res)[1]
        if current != resource.RLIM_INFINITY:
            hard = min(hard, current)
        resource.setrlimit(res, (min(soft, hard), hard))
    network = frozenset((
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
        "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
        "socket.getnameinfo",
    ))
    programs = frozenset((
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
        "pty.spawn", "ctypes.dlopen", "ctypes.dlsym",
    )) if no_network_namespace else frozenset()

    def hook(event, args):
        if event == "socket.__new__":
            if args[1] != AF_UNIX:
                raise PermissionError("network access is disabled in this sandbox")
        elif event in network:
            raise PermissionError("network access is disabled in this sandbox")
        elif event in programs:
            raise PermissionError(f"{event} is disabled in this sandbox")

    sys.addaudithook(hook)
    with open(path, "rb") as f:
        source = f.read()
    sys.argv[:] = [path]
    return compile(source, path, "exec")

try:
    _code = _sandbox()
except SyntaxError as _exc:
    import traceback
    traceback.print_exception(type(_exc), _exc, None)
    sys.exit(1)
del _sandbox
try:
    exec(_code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as _exc:
    import traceback
    traceback.print_exception(type(_exc), _exc, _exc.__traceback__.tb_next)
    sys.exit(1)
"""


class PythonSandboxConfig(BaseModel):
    """Limits and isolation of the ``python`` tool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(10.0, gt=0, le=3600)
    """Wall-clock limit per run; the process group is killed past it."""
    memory_mb: int = Field(512, ge=64)
    """Address-space limit (``RLIMIT_AS``) of the child, in MiB."""
    cpu_s: int | None = Field(None, ge=1)
    """CPU-time limit (``RLIMIT_CPU``); by default ``timeout_s`` rounded up."""
    max_output_bytes: int = Field(16_384, ge=256)
    """Per stream: longer output keeps its first and last halves."""
    max_code_chars: int = Field(100_000, ge=1)
    """Longest program accepted."""
    max_file_mb: int = Field(16, ge=1)
    """Largest file the program may write (``RLIMIT_FSIZE``), in MiB."""
    max_open_files: int = Field(256, ge=16)
    """``RLIMIT_NOFILE`` of the child."""
    python: str | None = None
    """Interpreter to run; by default the one running agentrt."""
    site_packages: bool = False
    """Let the program import installed packages (drops ``-S``)."""
    network_isolation: Literal["auto", "namespace", "audit-hook"] = "auto"
    """``namespace`` requires a network namespace (``unshare``); ``audit-hook``
    uses only the in-process hook; ``auto`` uses the namespace when it works."""


class SandboxResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one run did.  ``exit_code`` is negative when a signal ended the
    process (``signal`` names it)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: str = ""
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: str = ""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.exit_code == 0


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
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail}"


async def _drain(stream: anyio.abc.ByteReceiveStream | None, into: _CappedBuffer) -> None:
    if stream is None:
        return
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        async for chunk in stream:
            into.add(chunk)


def _kill_group(pgid: int) -> None:
    # The child leads its own session, so its pid is its process group id;
    # a pgid is not reused while any member of the group is alive.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _prepare_workdir(code: str) -> str:
    workdir = tempfile.mkdtemp(prefix="agentrt-sandbox-")
    with open(os.path.join(workdir, _SCRIPT), "w", encoding="utf-8") as f:
        f.write(code)
    return workdir


async def _probe_namespace() -> tuple[list[str], str]:
    """The ``unshare`` prefix if it works here, else ``[]`` and why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return [], "the unshare command is not installed"
    prefix = [unshare, "--user", "--map-root-user", "--net", "--"]
    try:
        with anyio.fail_after(_PROBE_TIMEOUT_S):
            done = await anyio.run_process([*prefix, "true"], check=False)
    except (OSError, TimeoutError) as exc:
        return [], f"unshare failed: {exc}"
    if done.returncode != 0:
        return [], f"unshare failed: {done.stderr.decode(errors='replace').strip()}"
    return prefix, ""


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return ""
    with contextlib.suppress(ValueError):
        return signal.Signals(-code).name
    return f"signal {-code}"


@final
class PythonSandbox:
    """The ``python`` tool: ``{"code": "print(2 + 2)"}`` -> exit code,
    stdout and stderr of a fresh, limited process.  Also usable directly:
    ``await sandbox.run(code)``.

    Each call runs ``python -I -S -B -u -X utf8`` in a fresh temporary
    directory, in its own session, with an empty environment and no stdin;
    the limits of ``PythonSandboxConfig`` apply before the program starts.
    No network: a network namespace when ``unshare`` works, and always an
    audit hook refusing sockets and name resolution (without the namespace
    it also refuses subprocesses and ``ctypes``); the hook is best-effort,
    not a security boundary.  Cancelling a call kills the child's process
    group and waits for it."""

    __slots__ = ("_config", "_isolation", "_tool")

    def __init__(self, config: PythonSandboxConfig | None = None, *, name: str = "python") -> None:
        self._config = config or PythonSandboxConfig()
        self._isolation: tuple[list[str], str] | None = None
        c = self._config
        imports = "Installed packages" if c.site_packages else "Standard library only"
        self._tool = FunctionTool.from_callable(
            self._call,
            name=name,
            description=(
                "Run a Python 3 program in a sandbox and get its exit code, stdout and "
                "stderr. Print what you want to see. Each call is a fresh process: no state "
                f"is kept between calls. {imports}, no network, no input; limits: "
                f"{c.timeout_s:g} s, {c.memory_mb} MB of memory. Files it writes go to a "
                "temporary directory deleted afterwards."
            ),
        )

    @property
    def config(self) -> PythonSandboxConfig:
        return self._config

    @property
    def spec(self) -> ToolSpec:
        """Name, description and JSON schema offered to the model."""
        return self._tool.spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Run ``arguments["code"]``; a failed or killed run is an error output."""
        return await self._tool.call(arguments, context)

    async def _call(
        self, code: Annotated[str, Field(description="The complete Python program to run.")]
    ) -> ToolOutput:
        result = await self.run(code)
        return ToolOutput(
            content=[ToolContent(text=self._render(result))],
            is_error=not result.ok,
            structured=msgspec.to_builtins(result),
        )

    async def isolation(self) -> str:
        """``"namespace"`` or ``"audit-hook"``: how this sandbox blocks the
        network (probed on first use).  ``ToolError`` if ``namespace`` is
        required and unavailable."""
        if self._isolation is None:
            mode = self._config.network_isolation
            prefix, why = ([], "configured") if mode == "audit-hook" else await _probe_namespace()
            if not prefix:
                if mode == "namespace":
                    raise ToolError(f"python sandbox: a network namespace is required but {why}")
                _log.info("sandbox.network_isolation", mode="audit-hook", reason=why)
            self._isolation = (prefix, "namespace" if prefix else "audit-hook")
        return self._isolation[1]

    async def run(self, code: str, *, timeout_s: float | None = None) -> SandboxResult:
        """Run ``code`` under the configured limits (``timeout_s`` may only
        shorten the configured timeout).  Raises ``ToolError`` only for a
        program that is too long or an isolation that cannot be had."""
        c = self._config
        if len(code) > c.max_code_chars:
            raise ToolError(
                f"the program is {len(code)} characters; the limit is {c.max_code_chars}"
            )
        mode = await self.isolation()
        assert self._isolation is not None
        prefix = self._isolation[0]
        timeout = c.timeout_s if timeout_s is None else min(timeout_s, c.timeout_s)
        cpu_s = c.cpu_s or max(1, math.ceil(timeout))
        flags = ["-I", "-B", "-u", "-X", "utf8"] + ([] if c.site_packages else ["-S"])
        limits = [
            c.memory_mb * 1024 * 1024,
            cpu_s,
            c.max_file_mb * 1024 * 1024,
            c.max_open_files,
            int(mode != "namespace"),
        ]
        argv = [*prefix, c.python or sys.executable, *flags, "-c", _BOOTSTRAP]
        argv += [str(v) for v in limits] + [_SCRIPT]
        workdir = await anyio.to_thread.run_sync(_prepare_workdir, code)
        try:
            return await self._execute(argv, workdir, timeout, mode)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(partial(shutil.rmtree, workdir, ignore_errors=True))

    async def _execute(
        self, argv: list[str], workdir: str, limit_s: float, mode: str
    ) -> SandboxResult:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "NO_PROXY": "*",
            "no_proxy": "*",
        }
        out = _CappedBuffer(self._config.max_output_bytes)
        err = _CappedBuffer(self._config.max_output_bytes)
        started = time.monotonic()
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_drain, process.stdout, out)
                tg.start_soon(_drain, process.stderr, err)
                with anyio.move_on_after(limit_s) as deadline:
                    await process.wait()
                _kill_group(process.pid)  # also whatever the program left running
                tg.cancel_scope.deadline = anyio.current_time() + _DRAIN_GRACE_S
        finally:
            with anyio.CancelScope(shield=True):
                _kill_group(process.pid)
                await process.aclose()
        timed_out = deadline.cancelled_caught
        code = process.returncode
        if timed_out:
            _log.info("sandbox.timeout", timeout_s=limit_s, pid=process.pid)
        return SandboxResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            signal="" if timed_out else _signal_name(code),
            duration_s=round(time.monotonic() - started, 4),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            isolation=mode,
        )

    def _render(self, result: SandboxResult) -> str:
        c = self._config
        if result.timed_out:
            lines = [f"Timed out after {c.timeout_s:g} s; the process was killed."]
        elif result.signal == "SIGXCPU":
            lines = [f"Killed: CPU time limit exceeded (SIGXCPU, {c.cpu_s or c.timeout_s:g} s)."]
        elif result.signal:
            lines = [f"Killed by {result.signal} (a resource limit was probably exceeded)."]
        else:
            lines = [f"Exit code {result.exit_code}."]
        if "MemoryError" in result.stderr:
            lines.append(f"Note: the sandbox's memory limit is {c.memory_mb} MB.")
        if result.stdout:
            lines += ["--- stdout ---", result.stdout.rstrip("\n")]
        if result.stderr:
            lines += ["--- stderr ---", result.stderr.rstrip("\n")]
        if not result.stdout and not result.stderr:
            lines.append("(no output; print() what you want to see)")
        return "\n".join(lines)
