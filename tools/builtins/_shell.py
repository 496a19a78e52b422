"""The ``shell`` tool: one bash command per call, in the calling rollout's
workspace, inside the sandbox.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, final

import msgspec

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig, render_result
from agentrt.tools.sandbox._workspaces import Workspaces

__all__ = ["ShellTool"]

#: Longest command accepted, in characters.
_MAX_COMMAND: Final = 100_000


@final
class ShellTool:
    """``shell``: ``{"command": "pytest -x tests/", "timeout_s": 60}`` runs
    ``bash -c COMMAND`` in a fresh sandbox whose writable directory is the
    calling rollout's workspace (``workspaces.for_call``), and returns the
    exit code, stdout and stderr (each truncated head-and-tail past
    ``config.max_output_bytes``, with a note).  Nothing survives a call
    but the workspace's files: no shell state, no background processes.
    A failed command is an error output; bubblewrap missing is a
    ``SandboxUnavailable``."""

    __slots__ = ("_sandbox", "_spec", "_workspaces")

    def __init__(
        self,
        workspaces: Workspaces,
        config: SandboxConfig | None = None,
        *,
        name: str = "shell",
    ) -> None:
        config = config or SandboxConfig()
        if config.workspace_mount != workspaces.mount:
            config = config.model_copy(update={"workspace_mount": workspaces.mount})
        self._sandbox = Sandbox(config)
        self._workspaces = workspaces
        network = "with network access" if config.network else "no network"
        total = f", {config.total_memory_mb} MB in all" if config.total_memory_mb else ""
        disk = f", {config.workspace_mb} MB of workspace" if config.workspace_mb else ""
        self._spec = ToolSpec(
            name=name,
            description=(
                f"Run one bash command in the task's workspace ({config.workspace_mount}, "
                "the working directory) and get its exit code, stdout and stderr. Each call "
                "is a fresh sandboxed shell: files in the workspace persist, nothing else "
                "does (no cd, variables or background processes carry over). "
                f"{network.capitalize()}; limits: {config.timeout_s:g} s per command, "
                f"{config.process_memory_mb} MB per process, {config.max_processes} processes"
                f"{total}{disk}. "
                "Long output keeps its beginning and end."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command to run."},
                    "timeout_s": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "description": (
                            f"Stop the command after this many seconds (at most "
                            f"{config.timeout_s:g}, the default)."
                        ),
                    },
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("`command` must be a non-empty string")
        if len(command) > _MAX_COMMAND:
            raise ToolError(
                f"the command is {len(command)} characters; the limit is {_MAX_COMMAND}"
            )
        c = self._sandbox.config
        timeout = arguments.get("timeout_s")
        limit = c.timeout_s if not isinstance(timeout, int | float) else min(timeout, c.timeout_s)
        workspace = await self._workspaces.for_call(context)
        result = await self._sandbox.run(
            ["bash", "-c", command],
            workspace=workspace.path,
            timeout_s=limit,
            environment=workspace.environment,
        )
        text = render_result(
            result,
            timeout_s=limit,
            memory_mb=c.process_memory_mb,
            cpu_s=c.cpu_s or math.ceil(limit),
        )
        return ToolOutput(
            content=[ToolContent(text=text)],
            is_error=not result.ok,
            structured=msgspec.to_builtins(result),
        )
