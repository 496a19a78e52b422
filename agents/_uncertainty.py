"""Per-step uncertainty from token logprobs (ParallelMuse partial rollouts):
the perplexity of a step's reasoning tokens and of its tool-call tokens
(``StepUncertainty``, ``step_uncertainty``, ``trajectory_uncertainty``).

Pure computation; imports protocols and the chat template's markers only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import msgspec

from agentrt.protocols._messages import AssistantMessage
from agentrt.protocols._model import TokenLogprob
from agentrt.protocols._trajectory import Step, Trajectory
from agentrt.runtime.models.sglang._sglang_template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

UncertaintyKind = Literal["reasoning", "tool", "combined"]
"""Which perplexity ranks steps: over reasoning tokens, tool-call tokens or all."""


class StepUncertainty(msgspec.Struct, frozen=True, kw_only=True):
    """The uncertainty of one step; ``None`` where no tokens were scored."""

    step: int
    reasoning: float | None = None
    tool: float | None = None
    combined: float | None = None
    reasoning_tokens: int = 0
    tool_tokens: int = 0

    def of(self, kind: UncertaintyKind) -> float | None:
        """The perplexity of ``kind``."""
        if kind == "reasoning":
            return self.reasoning
        if kind == "tool":
            return self.tool
        return self.combined


def perplexity(logprobs: Sequence[float]) -> float | None:
    """``exp(-mean(logprobs))``; ``None`` for no tokens."""
    if not logprobs:
        return None
    return math.exp(-math.fsum(logprobs) / len(logprobs))


def _tool_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the ``<tool_call>`` blocks of ``text`` (an
    unclosed block runs to the end)."""
    spans: list[tuple[int, int]] = []
    start = text.find(TOOL_CALL_OPEN)
    while start >= 0:
        end = text.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN))
        stop = len(text) if end < 0 else end + len(TOOL_CALL_CLOSE)
        spans.append((start, stop))
        start = text.find(TOOL_CALL_OPEN, stop)
    return spans


def split_logprobs(
    message: AssistantMessage, tokens: Sequence[TokenLogprob]
) -> tuple[list[float], list[float]]:
    """The logprobs of ``tokens`` as (reasoning, tool-call), each token by
    the position of its first character.  When the raw text holds
    ``<tool_call>`` blocks, tokens inside them (markers included) are
    tool-call tokens; otherwise the first ``len(reasoning_content) +
    len(content)`` characters are reasoning and later tokens tool-call
    tokens (if the message has tool calls)."""
    text = "".join(t.token for t in tokens)
    spans = _tool_spans(text)
    reasoning: list[float] = []
    tool: list[float] = []
    if spans:
        position, span = 0, 0
        for token in tokens:
            while span < len(spans) and spans[span][1] <= position:
                span += 1
            inside = span < len(spans) and spans[span][0] <= position
            (tool if inside else reasoning).append(token.logprob)
            position += len(token.token)
        return reasoning, tool
    if not message.tool_calls:
        return [t.logprob for t in tokens], []
    prose = len(message.reasoning_content or "") + len(message.content or "")
    position = 0
    for token in tokens:
        (reasoning if position < prose else tool).append(token.logprob)
        position += len(token.token)
    return reasoning, tool


def step_uncertainty(step: Step) -> StepUncertainty:
    """The perplexities ``exp(-mean(logprob))`` of ``step``'s reply (first
    choice) over reasoning, tool-call and all tokens; ``None`` for a part
    with no scored tokens (a brancher never picks it)."""
    reply = step.reply
    if reply is None or not reply.choices or not reply.choices[0].logprobs:
        return StepUncertainty(step=step.index)
    choice = reply.choices[0]
    tokens = choice.logprobs or []
    reasoning, tool = split_logprobs(choice.message, tokens)
    return StepUncertainty(
        step=step.index,
        reasoning=perplexity(reasoning),
        tool=perplexity(tool),
        combined=perplexity([t.logprob for t in tokens]),
        reasoning_tokens=len(reasoning),
        tool_tokens=len(tool),
    )


def trajectory_uncertainty(trajectory: Trajectory) -> list[StepUncertainty]:
    """``step_uncertainty`` of every step of ``trajectory``, in order."""
    return [step_uncertainty(s) for s in trajectory.steps]


__all__ = [
    "StepUncertainty",
    "UncertaintyKind",
    "perplexity",
    "split_logprobs",
    "step_uncertainty",
    "trajectory_uncertainty",
]
