"""Fixtures of the aggregator tests."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentrt.aggregators import AggregationContext, Judge, Score, Verdict
from agentrt.protocols import TrajectorySummary


class _Abstaining:
    """A judge that never gives a usable verdict: every comparison is a tie."""

    async def score(
        self, task: str, summary: TrajectorySummary, context: AggregationContext
    ) -> Score:
        raise AssertionError("not used")

    async def compare(
        self, task: str, candidates: Sequence[TrajectorySummary], context: AggregationContext
    ) -> Verdict:
        return Verdict(winner=None)


@pytest.fixture
def abstaining_judge() -> Judge:
    """A judge that abstains on every comparison (it holds no state)."""
    return _Abstaining()
