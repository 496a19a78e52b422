"""Events: what happened during a run, as a tagged union on ``type``.

Events stream to every interface (SSE, MCP progress, the terminal) and are
persisted, so each carries the run id, a per-run sequence number assigned
by the emitter, and a wall-clock timestamp.
"""

from __future__ import annotations

import msgspec

from agentrt.protocols.trajectory import SCHEMA_VERSION, Step, TrajectorySummary
from agentrt.protocols.usage import Cost


class _EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    run_id: str
    seq: int = 0
    ts: float = 0.0
    schema_version: int = SCHEMA_VERSION


class RunStarted(_EventBase, frozen=True, tag="run_started"):
    agent: str
    task: str
    rollouts: int = 1


class RunFinished(_EventBase, frozen=True, tag="run_finished"):
    status: str
    answer: str | None = None
    cost: Cost = Cost()


class RolloutStarted(_EventBase, frozen=True, tag="rollout_started"):
    rollout_id: str
    parent_rollout_id: str | None = None
    agent: str | None = None
    """The agent (or pipeline) the rollout runs."""
    task: str | None = None
    """Its task, when it is not the run's (a sub-agent call)."""


class RolloutQueued(_EventBase, frozen=True, tag="rollout_queued"):
    """A rollout waits for a slot on its backend (which takes ``limit`` at once)."""

    rollout_id: str
    backend: str
    limit: int


class RolloutRestarted(_EventBase, frozen=True, tag="rollout_restarted"):
    """A rollout's actor crashed (a bug) and was restarted by its supervisor;
    the new incarnation goes on from the rollout's committed steps."""

    rollout_id: str
    incarnation: int
    error: str
    resumed_steps: int = 0


class RolloutFinished(_EventBase, frozen=True, tag="rollout_finished"):
    rollout_id: str
    status: str
    answer: str | None = None
    cost: Cost = Cost()
    stop_reason: str | None = None
    """Why it ended (``final answer``, ``max steps (20)``, ``cancelled``...)."""


class StepRecorded(_EventBase, frozen=True, tag="step"):
    rollout_id: str
    step: Step


class ToolCalled(_EventBase, frozen=True, tag="tool_call"):
    rollout_id: str
    call_id: str
    tool: str
    arguments: str
    is_error: bool = False
    duration_s: float = 0.0


class SummaryWritten(_EventBase, frozen=True, tag="summary"):
    summary: TrajectorySummary


class VoteCast(_EventBase, frozen=True, tag="vote"):
    """One aggregation decision: a round of a tournament, a vote tally."""

    aggregator: str
    round: int
    candidates: list[str]
    winner: str | None
    votes: dict[str, int] = {}


class BudgetUpdated(_EventBase, frozen=True, tag="budget"):
    spent: Cost
    reserved_tokens: int = 0
    cancelled_calls: int = 0
    """Calls cancelled in flight (early stop, a deadline), charged as
    reserved: their usage is unknown, so ``spent`` is an upper bound."""
    left_tokens: int | None = None
    left_usd: float | None = None


class ToolProgress(_EventBase, frozen=True, tag="tool_progress"):
    """A running tool reported progress or a log line (for example an MCP
    server's ``notifications/progress`` or ``notifications/message``)."""

    rollout_id: str
    call_id: str
    tool: str
    kind: str  # "progress" | "log"
    progress: float | None = None
    total: float | None = None
    message: str = ""
    level: str = ""


class SignalRaised(_EventBase, frozen=True, tag="signal"):
    """A behaviour signal fired on a rollout (computed without model calls):
    ``loop``, ``stagnation``, ``tool_failure_rate``, ``exhaustion`` or
    ``give_up``.  ``step`` is the step that fired it; ``value`` is the
    measure that crossed its threshold (a count or a rate), when there is one."""

    rollout_id: str
    signal: str
    step: int
    detail: str = ""
    value: float | None = None


class TokenDelta(_EventBase, frozen=True, tag="token"):
    """Text a rollout's model is generating, as it arrives: the pieces of one
    model call, coalesced (one event per rollout per time window), in
    order.  Made only while someone reads tokens, and never stored: the
    step's ``StepRecorded`` carries the whole reply."""

    rollout_id: str
    step: int
    """The step whose model call is generating."""
    text: str = ""
    reasoning: str = ""
    """Reasoning text (a thinking model's ``reasoning_content``)."""


class ErrorRaised(_EventBase, frozen=True, tag="error"):
    where: str
    message: str
    rollout_id: str | None = None
    fatal: bool = False


Event = (
    RunStarted
    | RunFinished
    | RolloutStarted
    | RolloutQueued
    | RolloutRestarted
    | RolloutFinished
    | StepRecorded
    | ToolCalled
    | ToolProgress
    | TokenDelta
    | SummaryWritten
    | VoteCast
    | BudgetUpdated
    | SignalRaised
    | ErrorRaised
)
