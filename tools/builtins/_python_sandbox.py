"""The ``python`` tool: ``PythonSandbox`` runs a model-written Python
program in the sandbox (``agentrt.tools.sandbox._bwrap``), and its
``PythonSandboxConfig``.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Final, final

import msgspec
from pydantic import Field

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._function import FunctionTool
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig, SandboxResult, render_result
from agentrt.tools.sandbox._workspaces import Workspaces

__all__ = ["PythonSandbox", "PythonSandboxConfig"]

_SCRIPT: Final = "main.py"

# The interpreter's first code: read the program from stdin, then run it as
# ``main.py`` with stdin emptied and the bootstrap's frame out of tracebacks.
_BOOTSTRAP: Final = r"""
import sys
_source = sys.stdin.buffer.read()
sys.stdin.close()
sys.stdin = open("/dev/null")
sys.argv[:] = [sys.argv[1]]
try:
    _code = compile(_source, sys.argv[0], "exec")
except SyntaxError as _exc:
    import traceback
    traceback.print_exception(type(_exc), _exc, None)
    sys.exit(1)
del _source
try:
    exec(_code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as _exc:
    import traceback
    traceback.print_exception(type(_exc), _exc, _exc.__traceback__.tb_next)
    sys.exit(1)
"""


class PythonSandboxConfig(SandboxConfig):
    """The sandbox's limits (``SandboxConfig``, with a 10 s / 512 MB
    default) plus what the ``python`` tool adds."""

    timeout_s: float = Field(10.0, gt=0, le=3600)
    """Wall-clock limit per run; every process of the run is killed past it."""
    memory_mb: int = Field(512, ge=64)
    """Address space per process (``RLIMIT_AS``), in MiB."""
    max_code_chars: int = Field(100_000, ge=1)
    """Longest program accepted."""
    python: str = "python3"
    """The interpreter, as found on the sandbox's ``PATH`` (the system's
    Python; add a virtual environment with ``read_only_paths`` and name its
    interpreter here)."""
    site_packages: bool = False
    """Let the program import the interpreter's installed packages (drops ``-S``)."""


@final
class PythonSandbox:
    """The ``python`` tool: ``{"code": "print(2 + 2)"}`` -> exit code,
    stdout and stderr.  Also usable directly: ``await sandbox.run(code)``.

    Each call is ``python -I -B -u -X utf8 [-S]`` in a fresh sandbox (see
    ``Sandbox``: read-only system, no network unless configured, a PID
    namespace that dies with the call, limits, an empty environment),
    reading the program from stdin and running it as ``main.py``.  With
    ``workspaces`` the program runs in the calling rollout's workspace
    (shared with the ``shell`` and ``editor`` tools); without, in an empty
    directory gone after the call.  Bubblewrap missing: ``SandboxUnavailable``."""

    __slots__ = ("_config", "_sandbox", "_tool", "_workspaces")

    def __init__(
        self,
        config: PythonSandboxConfig | None = None,
        *,
        workspaces: Workspaces | None = None,
        name: str = "python",
    ) -> None:
        c = config or PythonSandboxConfig()
        if workspaces is not None and c.workspace_mount != workspaces.mount:
            c = c.model_copy(update={"workspace_mount": workspaces.mount})
        self._config = c
        self._sandbox = Sandbox(c)
        self._workspaces = workspaces
        imports = "Installed packages" if c.site_packages else "Standard library only"
        files = (
            f"Files persist in the task's workspace ({c.workspace_mount}, the working directory)."
            if workspaces is not None
            else "Files it writes go to a temporary directory deleted afterwards."
        )
        network = "network access" if c.network else "no network"
        self._tool = FunctionTool.from_callable(
            self._call,
            name=name,
            description=(
                "Run a Python 3 program in a sandbox and get its exit code, stdout and "
                "stderr. Print what you want to see. Each call is a fresh process: no state "
                f"is kept between calls. {imports}, {network}, no input; limits: "
                f"{c.timeout_s:g} s, {c.process_memory_mb} MB of memory. {files}"
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
        self,
        code: Annotated[str, Field(description="The complete Python program to run.")],
        context: ToolContext,
    ) -> ToolOutput:
        result = await self.run(code, context=context)
        c = self._config
        text = render_result(
            result,
            timeout_s=c.timeout_s,
            memory_mb=c.process_memory_mb,
            cpu_s=c.cpu_s or math.ceil(c.timeout_s),
        )
        if not result.stdout and not result.stderr:
            text += "; print() what you want to see"
        return ToolOutput(
            content=[ToolContent(text=text)],
            is_error=not result.ok,
            structured=msgspec.to_builtins(result),
        )

    async def run(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        context: ToolContext | None = None,
    ) -> SandboxResult:
        """Run ``code`` under the configured limits (``timeout_s`` may only
        shorten the configured timeout), in ``context``'s rollout workspace
        when this sandbox has ``workspaces``.  Raises ``ToolError`` for a
        program that is too long or a call outside a rollout (with
        workspaces), ``SandboxUnavailable`` without bubblewrap."""
        c = self._config
        if len(code) > c.max_code_chars:
            raise ToolError(
                f"the program is {len(code)} characters; the limit is {c.max_code_chars}"
            )
        workspace = environment = None
        if self._workspaces is not None:
            space = await self._workspaces.for_call(context or ToolContext())
            workspace, environment = space.path, space.environment
        flags = ["-I", "-B", "-u", "-X", "utf8"] + ([] if c.site_packages else ["-S"])
        return await self._sandbox.run(
            [c.python, *flags, "-c", _BOOTSTRAP, _SCRIPT],
            workspace=workspace,
            stdin=code.encode("utf-8", errors="surrogatepass"),
            timeout_s=timeout_s,
            environment=environment,
        )
