"""What a routing policy sees at a step: signals, headroom, request size.

Owns ``Signals`` (cheap behaviour signals computed without model calls),
``StepContext`` (the whole input of one routing decision) and the helpers
that derive signals from a step's reply and tool results: mean token
log-probability / perplexity and repeated-action detection.

Pure data and arithmetic: no I/O, no ledger mutation.  Must not import
agents, tools or aggregators (it reads only protocol types).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import msgspec

from agentrt.protocols._messages import ToolCall
from agentrt.protocols._model import ModelReply, TokenLogprob
from agentrt.protocols._tools import ToolResult
from agentrt.runtime.budget._ledger import UNCAPPED, Headroom


class Signals(msgspec.Struct, frozen=True, kw_only=True):
    """Behaviour signals about the rollout so far (all optional)."""

    last_tool_failed: bool = False
    """A tool call of the previous step returned an error."""
    repeated_action: bool = False
    """The previous step repeated the tool calls of the one before it."""
    mean_logprob: float | None = None
    """Mean token log-probability of the previous reply (confidence)."""
    judge_disagreement: float | None = None
    """Share of judges disagreeing with the majority, in [0, 1]."""
    difficulty: float | None = None
    """A difficulty score for the task or step in [0, 1] from any source
    (a classifier, task metadata, a RouteLLM-style router)."""


NO_SIGNALS = Signals()
"""No signal fired (the first step, or all clear)."""


class StepContext(msgspec.Struct, frozen=True, kw_only=True):
    """The input of one routing decision."""

    step_index: int
    signals: Signals = NO_SIGNALS
    headroom: Headroom = UNCAPPED
    """What the budget ledger still allows (``BudgetLedger.headroom()``)."""
    prompt_tokens: int = 0
    """Estimate of the prompt's size in tokens (worst case: no cache hit)."""
    max_tokens: int = 512
    """Completion cap of the call about to be made."""
    n: int = 1
    """Samples the call asks for."""
    min_tokens: int | None = None
    """The fewest completion tokens per sample a call may be lowered to
    when its worst case does not fit the budget (``None``: never lowered;
    a call that does not fit is refused)."""
    previous_tier: str | None = None
    """Tier that served the previous step (``None`` on the first step)."""
    steps_on_tier: int = 0
    """How many consecutive steps, up to the previous one, ``previous_tier``
    has served (0 on the first step)."""


def mean_logprob(tokens: Sequence[TokenLogprob] | None) -> float | None:
    """Mean log-probability of generated tokens; ``None`` when there are none."""
    if not tokens:
        return None
    return math.fsum(t.logprob for t in tokens) / len(tokens)


def perplexity(mean: float) -> float:
    """Perplexity from a mean token log-probability: ``exp(-mean)``."""
    return math.exp(-mean)


def _action_key(call: ToolCall) -> tuple[str, str]:
    # Arguments compare as JSON values, so key order and spacing do not hide a
    # repeat; malformed JSON compares as raw text.
    try:
        canonical = json.dumps(json.loads(call.function.arguments), sort_keys=True)
    except ValueError:
        canonical = call.function.arguments.strip()
    return call.function.name, canonical


def same_action(previous: Sequence[ToolCall], current: Sequence[ToolCall]) -> bool:
    """Whether ``current`` repeats ``previous``: the same non-empty multiset
    of (tool, arguments) pairs, ignoring call ids and argument key order."""
    if not current or len(previous) != len(current):
        return False
    return sorted(map(_action_key, previous)) == sorted(map(_action_key, current))


def signals_from_step(
    reply: ModelReply,
    tool_results: Sequence[ToolResult],
    previous_calls: Sequence[ToolCall] = (),
    *,
    judge_disagreement: float | None = None,
    difficulty: float | None = None,
) -> Signals:
    """The signals one finished step gives the next routing decision."""
    choice = reply.choices[0] if reply.choices else None
    return Signals(
        last_tool_failed=any(r.is_error for r in tool_results),
        repeated_action=choice is not None
        and same_action(previous_calls, choice.message.tool_calls),
        mean_logprob=mean_logprob(choice.logprobs) if choice is not None else None,
        judge_disagreement=judge_disagreement,
        difficulty=difficulty,
    )


__all__ = [
    "NO_SIGNALS",
    "UNCAPPED",
    "Signals",
    "StepContext",
    "mean_logprob",
    "perplexity",
    "same_action",
    "signals_from_step",
]
