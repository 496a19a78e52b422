"""Events: what happened during a run, as a tagged union on ``type``.

Events stream to every interface (SSE, MCP progress, the terminal) and are
persisted, so each carries the run id, a per-run sequence number assigned
by the emitter, and a wall-clock timestamp.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentrt.protocols._model import ModelReply
from agentrt.protocols._trajectory import SCHEMA_VERSION, Step, TrajectorySummary, Verification
from agentrt.protocols._usage import BudgetCut, Cost, Usage


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
    stopped: BudgetCut | None = None
    """Set when a budget cap cut the run short (``RunResult.stopped``)."""


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


class ModelCalled(_EventBase, frozen=True, kw_only=True, tag="model_called"):
    """A model call made outside a rollout's steps (a step's call is in its
    ``StepRecorded``), as its reply reported it: a summary's, a judge's or
    an aggregation agent's, or the warm-up.  Charged on the run's ledger
    (a ``BudgetUpdated`` follows); traces give it a span."""

    purpose: str
    """``summary``, ``aggregation`` or ``warm-up``."""
    aggregator: str | None = None
    """The aggregator that made it (``rtv``, ``aggagent``...), for ``aggregation``."""
    model: str
    """The model asked for."""
    response_model: str = ""
    backend: str = ""
    request_id: str | None = None
    usage: Usage = Usage()
    latency_s: float = 0.0
    finish_reasons: list[str] = []


class BudgetUpdated(_EventBase, frozen=True, tag="budget"):
    spent: Cost
    reserved_tokens: int = 0
    cancelled_calls: int = 0
    """Calls cancelled in flight (early stop, a deadline): charged their
    prompt and the tokens streamed before the cancellation when these were
    counted, else as reserved (an upper bound)."""
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


class CallReserved(_EventBase, frozen=True, kw_only=True, tag="call_reserved"):
    """A model call's worst case was booked on the run's ledger and is about
    to be sent.  Journaled runs only (the daemon's): committed before the
    call leaves, so a run resumed after a crash charges a call the crash
    left in flight (as reserved) and its caps hold across crashes."""

    call: str
    """The call's own id (unique), which its ``CallSettled`` names."""
    request_id: str | None = None
    """The request's id (``<rollout_id>-<step>`` for an agent's step; a
    content digest for a judge's or a summary's)."""
    ledger: str = ""
    """The ledger it was booked on (a rollout's, a sub-agent's, the run's)."""
    model: str
    prompt_tokens: int
    """The prompt tokens reserved (the calibrated estimate)."""
    completion_tokens: int
    """``n * max_tokens``: the completion tokens reserved."""


class CallSettled(_EventBase, frozen=True, kw_only=True, tag="call_settled"):
    """How the call its ``CallReserved`` named ``call`` ended: charged with
    ``usage``, or (``None``) failed before the server could serve it and
    cost nothing."""

    call: str
    usage: Usage | None = None
    reply: ModelReply | None = None
    """The reply, when the call was an agent's step: a run resumed before
    that step was committed takes the step up with this reply instead of
    asking the model again, so its tool calls keep their ids (and their
    idempotency keys)."""


class ElicitationRequested(_EventBase, frozen=True, kw_only=True, tag="elicitation"):
    """The person behind the run is asked something: by an MCP server (its
    ``elicitation.mode`` or ``url`` is ``ask``, or a destructive tool needs
    approval) or by agentrt, for a tool under ``[approvals.TOOL]``
    (``mode`` ``approval``, ``server`` empty).  The run is ``waiting``
    until every question is answered (``ElicitationAnswered``).  Answer it with ``POST
    /v1/runs/{run_id}/elicitations/{question_id}`` (``action``: accept,
    decline or cancel; ``content``: the form's fields) or
    ``Runtime.answer_elicitation``; unanswered, it is cancelled after the
    server's ``elicitation.timeout_s``."""

    question_id: str
    server: str
    mode: str
    """``form`` (fill ``requested_schema``), ``url`` (open ``url``) or
    ``approval`` (may ``tool`` run with ``arguments``?)."""
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str = ""
    arguments: dict[str, Any] | None = None
    tool: str = ""
    rollout_id: str | None = None
    call_id: str = ""
    expires_at: float | None = None
    """Unix seconds when the question is given up unanswered: an approval's
    ``approvals.TOOL.timeout_s`` after it was first asked (a daemon restart
    asks it again with the same ``question_id`` and deadline), an MCP
    server's question its ``elicitation.timeout_s`` after it was asked."""


class ElicitationAnswered(_EventBase, frozen=True, kw_only=True, tag="elicitation_answered"):
    """A question of the run's (``ElicitationRequested`` with this
    ``question_id``) stopped waiting: ``action`` is the answer (``accept``,
    ``decline``, ``cancel``) or ``timeout`` (nobody answered by its
    ``expires_at``).  A run with no question waiting is ``running`` again;
    a daemon restarted after this event takes the recorded answer up
    instead of asking again."""

    question_id: str
    action: str
    content: dict[str, Any] | None = None
    rollout_id: str | None = None
    call_id: str = ""


class ErrorRaised(_EventBase, frozen=True, tag="error"):
    where: str
    message: str
    rollout_id: str | None = None
    fatal: bool = False


class VerifierRan(_EventBase, frozen=True, tag="verifier"):
    """A task's test command ran on a finished rollout's workspace."""

    rollout_id: str
    verification: Verification


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
    | ModelCalled
    | SignalRaised
    | CallReserved
    | CallSettled
    | ElicitationRequested
    | ElicitationAnswered
    | ErrorRaised
    | VerifierRan
)


class McpAuthorizationRequired(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="mcp_authorization_required"
):
    """An MCP server needs a person to approve agentrt's access (OAuth
    authorization code flow).  Not a run's event: it happens when a server
    connects.  The person opens ``authorization_url``; the authorization
    server then redirects their browser to ``redirect_uri`` (agentrt's
    loopback listener), which completes it.  A browser on another machine
    can complete it by requesting the URL it was redirected to on the
    agentrt machine (``curl 'REDIRECTED_URL'``)."""

    server: str
    server_url: str
    authorization_url: str
    redirect_uri: str
    expires_in_s: float
    """How long agentrt waits for the approval."""
    ts: float = 0.0
