"""What a caller asks for (``RunRequest``) and gets back (``RunResult``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._tools import ToolSpec
from agentrt.protocols._trajectory import SCHEMA_VERSION, TrajectorySummary
from agentrt.protocols._usage import BudgetCut, Cost

RunStatus = Literal["pending", "running", "waiting", "succeeded", "failed", "cancelled"]


def _shown(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def _count(owner: str, name: str, value: object, *, least: int) -> None:
    """``value`` is an ``int`` (not a ``bool``) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int >= {least}, got {_shown(value)}")
    if value < least:
        raise ValueError(f"{owner}.{name} must be >= {least}, got {value}")


def _cap(owner: str, name: str, value: object, *, integer: bool) -> None:
    """``value`` is ``None`` (uncapped) or a finite number >= 0."""
    if value is None:
        return
    if integer:
        _count(owner, name, value, least=0)
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}.{name} must be a number >= 0 or None, got {_shown(value)}")
    if not math.isfinite(value):
        # JSON has no inf/NaN (msgspec would write null: uncapped); None is uncapped.
        raise ValueError(f"{owner}.{name} must be finite (None means uncapped), got {value}")
    if value < 0:
        raise ValueError(f"{owner}.{name} must be >= 0, got {value}")


class Budget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Hard caps for a run; ``None`` means uncapped.

    Raises ``ValueError`` for a negative or non-finite cap and ``TypeError``
    for one that is not a number (``msgspec.ValidationError`` when decoding)."""

    max_tokens: Annotated[int, Meta(ge=0)] | None = None
    max_usd: Annotated[float, Meta(ge=0)] | None = None
    max_model_calls: Annotated[int, Meta(ge=0)] | None = None
    max_wall_seconds: Annotated[float, Meta(ge=0)] | None = None

    def __post_init__(self) -> None:
        _cap("Budget", "max_tokens", self.max_tokens, integer=True)
        _cap("Budget", "max_usd", self.max_usd, integer=False)
        _cap("Budget", "max_model_calls", self.max_model_calls, integer=True)
        _cap("Budget", "max_wall_seconds", self.max_wall_seconds, integer=False)


class ScalingSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to scale at inference time: how many ``rollouts`` (>= 1), which
    aggregator (``aggregate``, a registered name) and its ``options`` (for
    example ``{"g": 2, "v": 8}`` for RTV; their bounds are the aggregator's).

    Raises ``ValueError``/``TypeError`` naming the field (``msgspec.ValidationError``
    when decoding)."""

    rollouts: Annotated[int, Meta(ge=1)] = 1
    aggregate: str = "majority"
    options: dict[str, Any] = {}
    confidence: float | None = None
    """Adaptive N.  ``None``: every rollout starts at once.  A probability in
    (0.5, 1): ``rollouts`` becomes a cap; ``min_rollouts`` start, and each
    time one ends another starts, until the leading answer is settled (the
    probability that it is more common than the runner-up, from their
    counts with a uniform prior, reaches ``confidence``), the cap is reached
    or the budget ends; rollouts still running then are cancelled and left
    out, so the vote is over exactly the rollouts the rule counted.
    ``confidence`` says the leader beats the runner-up, not that it is
    correct: rollouts agreeing on a wrong answer settle as fast."""
    min_rollouts: Annotated[int, Meta(ge=1)] = 4
    """Adaptive N: rollouts started at first and kept in flight."""

    def __post_init__(self) -> None:
        _count("ScalingSpec", "rollouts", self.rollouts, least=1)
        _count("ScalingSpec", "min_rollouts", self.min_rollouts, least=1)
        if self.confidence is not None and (
            isinstance(self.confidence, bool)
            or not isinstance(self.confidence, int | float)
            or not 0.5 < self.confidence < 1
        ):
            raise ValueError(
                "ScalingSpec.confidence must be a probability > 0.5 and < 1 (or None), "
                f"got {_shown(self.confidence)}"
            )
        if not isinstance(self.aggregate, str):
            raise TypeError(
                f"ScalingSpec.aggregate must be an aggregator name (str), got "
                f"{_shown(self.aggregate)}"
            )
        if not isinstance(self.options, dict):
            raise TypeError(
                "ScalingSpec.options must be a dict of the aggregator's options "
                f"(e.g. {{'g': 2, 'v': 8}}), got {_shown(self.options)}"
            )
        for key in self.options:
            if not isinstance(key, str):
                raise TypeError(
                    f"ScalingSpec.options keys must be option names (str), got {_shown(key)}"
                )


class RequiredTool(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A ``tool_choice`` naming one client tool: the rollout ends with a call to it."""

    name: Annotated[str, Meta(min_length=1)]


ToolChoice = Literal["auto", "none", "required"] | RequiredTool
"""How a run's client tools are called: ``RunOptions.tool_choice``."""


def conversation_problem(messages: Sequence[ChatMessage]) -> tuple[int, str, str] | None:
    """What is wrong with a conversation given as ``RunOptions.conversation``:
    ``(index, field, reason)`` of its first bad message, else ``None``.  A
    system message belongs in ``instructions``; a tool message answers a
    call of the last assistant message before it, once (ids may repeat
    across turns: some servers number calls per reply); the conversation
    needs a user message (the last one is the run's task)."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        match message:
            case SystemMessage():
                return index, "role", "system messages go in `instructions`"
            case AssistantMessage(tool_calls=calls):
                open_calls = {c.id for c in calls}
            case ToolMessage(tool_call_id=call_id):
                if call_id not in open_calls:
                    return (
                        index,
                        "tool_call_id",
                        f"a tool result for call {call_id!r}, which the assistant message "
                        "before it did not make (or it is answered already)",
                    )
                open_calls.discard(call_id)
            case UserMessage():
                pass
    if messages and not any(isinstance(m, UserMessage) for m in messages):
        return 0, "role", "the conversation needs a user message"
    return None


class RunOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How this run's agent calls its model, over the agent's configuration
    (``None``: as configured).  The sampling fields apply to every model call
    of the agent's rollouts; ``max_tokens`` bounds each call's completion.

    ``logprobs``/``top_logprobs``: ask the backend for token log-probabilities.
    ``response_schema``: a JSON schema the final answer must match (the answer
    is JSON text); an answer that does not is sent back to the model with
    the validation error, up to ``response_retries`` times, after which the
    rollout fails.  ``client_tools``: tools the caller runs itself, offered to
    the model beside the agent's own; a reply calling one ends the rollout
    (``finished``, stop reason ``client tool call``) with the call in its last
    step, for the caller to run and continue the conversation (in
    ``conversation``).

    Raises ``ValueError`` naming the message when ``conversation`` is not
    one (``conversation_problem``)."""

    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    stop: list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] = 0
    response_schema: dict[str, Any] | None = None
    response_retries: Annotated[int, Meta(ge=0, le=5)] = 2
    client_tools: list[ToolSpec] = []
    tool_choice: ToolChoice = "auto"
    """How the client's tools are called (the agent's own tools are always
    the model's to choose): ``auto``, the model's choice; ``none``, they are
    not offered; ``required``, the rollout ends with a call to one of them
    (the agent may use its own tools first; when its model would answer
    instead, one more call is made offering only the client's tools, with
    the call required); a ``RequiredTool``, the same with that tool only."""
    instructions: str | None = None
    """The caller's instructions (a client's system messages), added to the
    agent's own in the system message."""
    conversation: list[ChatMessage] = []
    """The conversation so far, as native messages (user, assistant with its
    tool calls, tool results, in order), in place of the task's one user
    message; its last user message is the task.  Empty: the task alone."""

    def __post_init__(self) -> None:
        problem = conversation_problem(self.conversation)
        if problem is not None:
            index, field, reason = problem
            raise ValueError(f"RunOptions.conversation[{index}].{field}: {reason}")


class RunRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A run as a caller asks for it.  Raises ``TypeError`` when a field has
    the wrong type (a dict for ``scaling``: pass a ``ScalingSpec``).  Decoding
    refuses fields it does not know (``rollouts`` belongs in ``scaling``)."""

    task: Annotated[str, Meta(min_length=1, pattern=r"\S")]
    agent: str = "default"
    scaling: ScalingSpec = ScalingSpec()
    budget: Budget = Budget()
    options: RunOptions = RunOptions()
    metadata: dict[str, str] = {}
    webhook: str | None = None
    """An ``http(s)`` URL the daemon posts a signed ``WebhookEvent`` to when
    the run ends (over ``server.webhook.url``); the daemon needs a
    ``server.webhook.secret`` for it."""
    stream_tokens: bool = False
    """Stream the run's model calls from its start, for a client that
    follows its events right after posting it (the daemon's web page
    does): their ``token`` events reach it from the first call.  Without
    it a call streams only while someone follows the run's tokens, and a
    run nobody follows makes its calls whole, as the engine does.
    Creating and following in one call (``Accept: text/event-stream``,
    an OpenAI ``stream``) sets it."""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name, value, kind in (
            ("task", self.task, str),
            ("agent", self.agent, str),
            ("scaling", self.scaling, ScalingSpec),
            ("budget", self.budget, Budget),
            ("options", self.options, RunOptions),
            ("metadata", self.metadata, dict),
        ):
            if not isinstance(value, kind):
                raise TypeError(f"RunRequest.{name} must be a {kind.__name__}, got {_shown(value)}")


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """A finished run.  ``answer`` is the answer the aggregation chose, as
    the vote compared it (the text after the winning rollout's ``ANSWER:``
    marker when the vote's normalizer extracts it: ``42``, not ``ANSWER:
    42``); ``raw_answer`` is the winning rollout's answer as it wrote it.
    ``summaries``: one per rollout that ended (adaptive N and early stop
    leave out the rollouts they stopped)."""

    run_id: str
    status: RunStatus
    answer: str | None = None
    raw_answer: str | None = None
    rationale: str = ""
    summaries: list[TrajectorySummary] = []
    aggregation_trace: list[dict[str, Any]] = []
    cost: Cost = Cost()
    error: str | None = None
    stopped: BudgetCut | None = None
    """Set when a budget cap cut the run short (rollouts ended or never
    started for want of budget); ``None`` when every rollout ran its course."""
    schema_version: int = SCHEMA_VERSION
