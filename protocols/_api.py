"""The daemon's HTTP API records: what ``agentrt serve`` returns about runs,
rollouts and agents (the request body is ``RunRequest``).

Pure data, shared by the daemon, its MCP tools and any client.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agentrt.protocols._events import McpAuthorizationRequired
from agentrt.protocols._run import RunRequest, RunResult, RunStatus
from agentrt.protocols._usage import BudgetCut, Cost

TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
"""Run statuses after which nothing changes."""


class ElicitationAnswer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The answer to a run's ``ElicitationRequested`` question (``POST
    /v1/runs/{run_id}/elicitations/{question_id}``): ``accept`` (with the
    form's fields in ``content``), ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class RunInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One run, as listed: identity, status and totals so far."""

    run_id: str
    status: RunStatus
    agent: str
    task: str
    created_at: float
    updated_at: float
    rollouts: int = 1
    aggregate: str = "majority"
    answer: str | None = None
    error: str | None = None
    cost: Cost = Cost()
    resumed: int = 0
    """How many times the daemon resumed this run after a restart."""
    metadata: dict[str, str] = {}
    owner: str | None = None
    """The name of the API key that created the run (``None``: the shared
    token, or a daemon without keys)."""
    stopped: BudgetCut | None = None
    """Set when a budget cap cut the finished run short, as on its
    ``RunResult``; ``None`` while it runs or when every rollout ran its course."""


class RolloutInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One rollout of a run: its status and how far it got."""

    rollout_id: str
    status: str
    """``queued`` while it waits for a backend slot, ``running`` until its
    ``RolloutFinished`` event, then that status."""
    steps: int = 0
    answer: str | None = None
    cost: Cost = Cost()
    error: str | None = None
    """Why a rollout that did not finish with an answer ended (its stop
    reason: ``model call failed: BackendUnavailable: ... cannot connect``,
    a budget, a crash...); ``None`` while running or when it answered."""


class RunDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One run in full: the request, its rollouts and (when done) the result."""

    run: RunInfo
    request: RunRequest
    rollouts: list[RolloutInfo] = []
    result: RunResult | None = None


class RunPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of runs, newest first; pass ``next_cursor`` as ``cursor`` for more."""

    runs: list[RunInfo]
    next_cursor: str | None = None


class ThreadCreate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/threads``: a new thread, with labels of the caller's."""

    metadata: dict[str, str] = {}


class ThreadInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation held by the daemon: its runs, oldest first.  Each run
    of a thread gets the thread's earlier turns (the task and answer of each
    run that succeeded) as native messages before its own task."""

    thread_id: str
    created_at: float
    metadata: dict[str, str] = {}
    runs: list[RunInfo] = []
    owner: str | None = None
    """The name of the API key that created the thread (``None``: the shared token)."""


class ThreadPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/threads``: threads, newest first (their runs left out)."""

    threads: list[ThreadInfo]


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An agent the daemon can run; ``model`` is its OpenAI-compatible name."""

    name: str
    model: str
    kind: Literal["agent", "spec"] = "agent"
    description: str = ""
    default: bool = False


class AgentList(msgspec.Struct, frozen=True, kw_only=True):
    agents: list[AgentInfo]


class McpAuthorizationList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/mcp/authorizations``: the MCP servers waiting for a person
    to approve agentrt's access (OAuth authorization code), oldest first;
    each names the URL to open.  An approval ends the wait (the entry goes);
    so does its expiry."""

    pending: list[McpAuthorizationRequired]


class ApiError(msgspec.Struct, frozen=True, kw_only=True):
    """Every 4xx/5xx body: what went wrong and where (a field, a header, a path)."""

    error: str
    """A short machine-readable kind: ``invalid_request``, ``not_found``..."""
    message: str
    where: str | None = None
    status: int = 400


__all__ = [
    "TERMINAL_STATUSES",
    "AgentInfo",
    "AgentList",
    "ApiError",
    "ElicitationAnswer",
    "McpAuthorizationList",
    "RolloutInfo",
    "RunDetail",
    "RunInfo",
    "RunPage",
    "ThreadCreate",
    "ThreadInfo",
    "ThreadPage",
]
