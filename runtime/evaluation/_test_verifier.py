"""Verifiers of coding tasks: ``TestVerifierConfig`` (a test command, its
timeout and what its sandbox may read) and ``TestVerifier``, which runs
the command in a rollout's workspace, in the sandbox, and returns a
``Verification`` (pass/fail, exit code, output).

Must not know about agents, aggregators or where the command comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import final

import anyio
from pydantic import BaseModel, ConfigDict, Field

from agentrt.protocols._trajectory import Verification
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig

__all__ = ["TestVerifier", "TestVerifierConfig"]


class TestVerifierConfig(BaseModel):
    """How a task's tests run on a rollout's workspace."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    command: str = Field(min_length=1)
    """A bash command run in the workspace; exit 0 is a pass."""
    timeout_s: float = Field(300.0, gt=0, le=3600)
    """Past this the command is killed and the rollout fails verification."""
    read_only_paths: tuple[str, ...] = ()
    """Host directories the tests need (a virtualenv, a toolchain), shown read-only."""
    env: dict[str, str] = {}
    """Variables set for the command (``PYTHONPATH``...)."""
    memory_mb: int = Field(2048, ge=64)
    """Address space per process of the tests."""
    max_output_bytes: int = Field(32_768, ge=256)
    """Output kept (head and tail)."""
    workspace_mount: str = "/workspace"
    """Where the workspace appears (the agent's tools see it there too)."""


@final
class TestVerifier:
    """Runs ``config.command`` on a workspace::

        verification = await TestVerifier(config).verify(space.path)

    Never raises for a failing, hanging or unrunnable command: the result
    says what happened (``error`` when it could not run at all)."""

    __test__ = False
    __slots__ = ("_sandbox", "config")

    def __init__(self, config: TestVerifierConfig) -> None:
        self.config = config
        self._sandbox = Sandbox(
            SandboxConfig(
                timeout_s=config.timeout_s,
                memory_mb=config.memory_mb,
                max_output_bytes=config.max_output_bytes,
                read_only_paths=config.read_only_paths,
                env=config.env,
                workspace_mount=config.workspace_mount,
                max_processes=256,
            )
        )

    async def verify(self, workspace: Path) -> Verification:
        c = self.config
        if not await anyio.Path(workspace).is_dir():
            return Verification(
                passed=False, command=c.command, error=f"no workspace at {str(workspace)!r}"
            )
        try:
            result = await self._sandbox.run(["bash", "-c", c.command], workspace=workspace)
        except ToolError as exc:  # no sandbox here: say so, never run unsandboxed
            return Verification(passed=False, command=c.command, error=str(exc))
        output = result.stdout
        if result.stderr:
            output += ("\n" if output else "") + result.stderr
        return Verification(
            passed=result.ok,
            command=c.command,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            output=output,
            error=f"timed out after {c.timeout_s:g} s" if result.timed_out else "",
        )
