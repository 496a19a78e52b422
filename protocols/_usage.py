"""Token usage and money: what a model call consumed and what it cost."""

from __future__ import annotations

import msgspec


# gc=False: frozen values holding no reference cycles (only other wire values,
# strings, numbers and lists of them), kept by the thousand while rollouts run;
# the cyclic collector need not track them.
class Usage(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """Tokens as the serving model reported them (never estimated here).

    ``cached_prompt_tokens`` is the part of ``prompt_tokens`` the server
    served from its prefix cache, when it says so.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
        )


class Cost(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What a piece of work cost: money, tokens, calls and wall time."""

    usd: float = 0.0
    usage: Usage = Usage()
    model_calls: int = 0
    wall_seconds: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        mine, theirs = self.usage, other.usage  # ``Usage.__add__``, inlined
        return Cost(
            usd=self.usd + other.usd,
            usage=Usage(
                prompt_tokens=mine.prompt_tokens + theirs.prompt_tokens,
                completion_tokens=mine.completion_tokens + theirs.completion_tokens,
                cached_prompt_tokens=mine.cached_prompt_tokens + theirs.cached_prompt_tokens,
            ),
            model_calls=self.model_calls + other.model_calls,
            wall_seconds=self.wall_seconds + other.wall_seconds,
        )


class BudgetCut(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """How a budget cap cut a run short: the cap and how far the run got.
    A run with an answer still ``succeeded``; this says it is the answer of
    fewer rollouts than asked for."""

    limit: str
    """The cap that stopped the rollouts: ``max_tokens``, ``max_usd``,
    ``max_model_calls`` or ``max_wall_seconds``."""
    rollouts: int
    """Rollouts the run asked for."""
    finished: int
    """Rollouts that ended with an answer."""
    cut: int
    """Rollouts the cap ended before they answered, or kept from starting."""
    aggregation: bool = False
    """The cap stopped the aggregation before it decided: the answer is the
    best it had (its rationale says how it was chosen)."""

    def describe(self) -> str:
        """One line for people: ``cut short by max_tokens: 2 of 8 rollouts
        finished (6 stopped by the cap)``."""
        text = f"cut short by {self.limit}: {self.finished} of {self.rollouts} rollouts finished"
        if self.cut:
            text += f" ({self.cut} stopped by the cap)"
        if self.aggregation:
            text += ", and the aggregation was stopped before it decided"
        return text
