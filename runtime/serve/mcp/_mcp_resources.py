"""The daemon's runs, trajectories and summaries as MCP resources (JSON):
``run_resources``.  Definitions only: ``mcp_server`` hosts them.

The roof: may import every layer; only the daemon's modules import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from agentrt.protocols._api import AgentList
from agentrt.protocols._run import RunStatus
from agentrt.runtime.serve._api_problem import ApiProblem
from agentrt.runtime.serve._bridge import RunService
from agentrt.tools.hosting._hosted_catalog import ListedResource, ResourceTemplate, StaticResource
from agentrt.tools.hosting._tool_server import RESOURCE_NOT_FOUND

_STATUSES: Final[tuple[RunStatus, ...]] = (
    "pending",
    "running",
    "waiting",
    "succeeded",
    "failed",
    "cancelled",
)
_JSON: Final = "application/json"
#: Runs the listing shows when the URI names no limit.
DEFAULT_LIMIT: Final = 20
#: The newest runs ``resources/list`` shows (older ones: ``agentrt://runs``).
LISTED_RUNS: Final = 20


def _preview(task: str, chars: int = 80) -> str:
    line = " ".join(task.split())
    return line if len(line) <= chars else line[: chars - 3] + "..."


def run_uri(run_id: str) -> str:
    """The resource holding ``run_id`` in full."""
    return f"agentrt://runs/{run_id}"


def run_resources(manager: RunService) -> tuple[list[StaticResource], list[ResourceTemplate]]:
    """The fixed resources and the templates over ``manager``:
    ``agentrt://agents``, ``agentrt://runs{?status,limit}`` (newest first),
    ``agentrt://runs/{run_id}`` (the newest are also listed),
    ``agentrt://runs/{run_id}/summaries`` and
    ``agentrt://runs/{run_id}/rollouts/{rollout_id}``.  An unknown run or
    rollout is "resource not found" (-32002); a bad query invalid params."""

    def encode(value: Any) -> str:
        return msgspec.json.encode(value).decode()

    def missing(what: str, uri: str) -> MCPError:
        return MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {what}", data={"uri": uri})

    def bad(message: str) -> MCPError:
        return MCPError(INVALID_PARAMS, message)

    async def runs(variables: Mapping[str, str]) -> str:
        status_text = variables.get("status") or None
        status = next((s for s in _STATUSES if s == status_text), None)
        if status_text is not None and status is None:
            raise bad(f"status must be one of {', '.join(_STATUSES)}, got {status_text!r}")
        limit_text = variables.get("limit") or str(DEFAULT_LIMIT)
        try:
            limit = int(limit_text)
        except ValueError:
            raise bad(f"limit must be a whole number, got {limit_text!r}") from None
        try:
            return encode(await manager.list(status=status, limit=limit))
        except ApiProblem as problem:
            raise bad(str(problem)) from None

    async def run(variables: Mapping[str, str]) -> str:
        run_id = variables["run_id"]
        detail = await manager.detail(run_id)
        if detail is None:
            raise missing(f"no run {run_id!r}", run_uri(run_id))
        return encode(detail)

    async def summaries(variables: Mapping[str, str]) -> str:
        run_id = variables["run_id"]
        if await manager.get(run_id) is None:
            raise missing(f"no run {run_id!r}", f"{run_uri(run_id)}/summaries")
        return encode(await manager.summaries(run_id))

    async def newest_runs() -> list[ListedResource]:
        page = await manager.list(limit=LISTED_RUNS)
        return [
            ListedResource(
                uri=run_uri(info.run_id),
                name=f"run {info.run_id}",
                description=f"{info.status}, agent {info.agent}: {_preview(info.task)}",
            )
            for info in page.runs
        ]

    async def trajectory(variables: Mapping[str, str]) -> str:
        run_id, rollout_id = variables["run_id"], variables["rollout_id"]
        found = await manager.trajectory(run_id, rollout_id)
        if found is None:
            uri = f"{run_uri(run_id)}/rollouts/{rollout_id}"
            raise missing(f"no rollout {rollout_id!r} in run {run_id!r}", uri)
        return encode(found)

    agents = StaticResource(
        uri="agentrt://agents",
        name="agents",
        description="The agents this daemon runs (AgentList JSON).",
        mime_type=_JSON,
        text=encode(AgentList(agents=manager.agents())),
    )
    templates = [
        ResourceTemplate(
            uri_template="agentrt://runs{?status,limit}",
            name="runs",
            description="The newest runs (RunPage JSON); filter by status, up to limit (20).",
            mime_type=_JSON,
            read=runs,
            choices={"status": _STATUSES},
        ),
        ResourceTemplate(
            uri_template="agentrt://runs/{run_id}",
            name="run",
            description="One run in full (RunDetail JSON): request, rollouts, result.",
            mime_type=_JSON,
            read=run,
            listing=newest_runs,
        ),
        ResourceTemplate(
            uri_template="agentrt://runs/{run_id}/summaries",
            name="summaries",
            description="The structured summaries of a run's finished rollouts (JSON list).",
            mime_type=_JSON,
            read=summaries,
        ),
        ResourceTemplate(
            uri_template="agentrt://runs/{run_id}/rollouts/{rollout_id}",
            name="trajectory",
            description="One rollout's trajectory: every step, its cost and answer (JSON).",
            mime_type=_JSON,
            read=trajectory,
        ),
    ]
    return [agents], templates


__all__ = ["DEFAULT_LIMIT", "LISTED_RUNS", "run_resources", "run_uri"]
