"""Verified best-of-N: ``VerifiedFirst`` keeps the candidates whose tests
passed (``TrajectorySummary.verification``) and lets another aggregator
(majority, RTV, best-of-N...) choose among those only; with no passing
candidate it chooses among all (or, ``require``, answers nothing).

May import protocols and ``agentrt.aggregators._aggregator``; nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    Aggregator,
    emit_all,
    empty_result,
    usable,
)
from agentrt.protocols._events import VoteCast
from agentrt.protocols._trajectory import TrajectorySummary

__all__ = ["VerifiedFirst", "passed"]


def passed(summary: TrajectorySummary) -> bool:
    """The rollout's tests ran and passed."""
    return summary.verification is not None and summary.verification.passed


@final
class VerifiedFirst:
    """Candidates that pass their tests first.

    ::

        VerifiedFirst(RecursiveTournament(judge))   # RTV among the passing ones

    One passing candidate wins without a model call; several go to
    ``then``; none: ``then`` chooses among every candidate (the rationale
    says no test passed), unless ``require``, which answers nothing."""

    __slots__ = ("require", "then")

    def __init__(self, then: Aggregator, *, require: bool = False) -> None:
        self.then = then
        self.require = require

    @property
    def name(self) -> str:
        return "verified"

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        passing = [s for s in kept if passed(s)]
        vote = VoteCast(
            run_id=context.run_id,
            aggregator=self.name,
            round=0,
            candidates=[s.rollout_id for s in kept],
            winner=passing[0].rollout_id if len(passing) == 1 else None,
            votes={s.rollout_id: int(passed(s)) for s in kept},
        )
        trace = await emit_all(context.events, [vote], run_id=context.run_id)
        if len(passing) == 1:
            (only,) = passing
            return AggregationResult(
                answer=only.answer,
                winner=only.rollout_id,
                rationale=f"the only one of {len(kept)} candidates whose tests passed",
                trace=trace,
                excluded=excluded + [s.rollout_id for s in kept if s is not only],
            )
        if not passing:
            if self.require:
                return AggregationResult(
                    answer=None,
                    winner=None,
                    rationale=f"none of {len(kept)} candidates passed its tests",
                    trace=trace,
                    excluded=excluded + [s.rollout_id for s in kept],
                )
            inner = await self.then.aggregate(task, kept, context)
            why = (
                f"none of {len(kept)} candidates passed its tests; {self.then.name} chose among all"
            )
            return _after(inner, why, trace, excluded)
        inner = await self.then.aggregate(task, passing, context)
        failing = [s.rollout_id for s in kept if not passed(s)]
        why = (
            f"{len(passing)} of {len(kept)} candidates passed their tests; "
            f"{self.then.name} chose among them"
        )
        return _after(inner, why, trace, excluded + failing)


def _after(
    inner: AggregationResult, why: str, trace: list[VoteCast], excluded: list[str]
) -> AggregationResult:
    """``inner``'s choice, with the tests' verdict before its rationale."""
    return AggregationResult(
        answer=inner.answer,
        winner=inner.winner,
        rationale=f"{why}: {inner.rationale}",
        trace=trace + inner.trace,
        cost=inner.cost,
        excluded=excluded + inner.excluded,
    )
