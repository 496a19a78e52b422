"""``answer_key``: the one grouping of answers, shared by the votes and the
engine's early stop (issue 10: early stop grouped by whitespace and case
only, the vote by the full normalizer, so stopping early could change the
answer)."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.aggregators import (
    NORMALIZERS,
    AggregationResult,
    MajorityVote,
    WeightedVote,
    answer_key,
)
from agentrt.aggregators._aggregator import AggregationContext
from agentrt.aggregators._vote import default_normalizer
from agentrt.protocols import TrajectorySummary
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.testing import ScriptedBackend


def s(rid: str, answer: str | None) -> TrajectorySummary:
    return TrajectorySummary(rollout_id=rid, answer=answer)


async def vote(
    by: MajorityVote | WeightedVote, summaries: list[TrajectorySummary]
) -> AggregationResult:
    """A vote makes no model call; its context has a ledger all the same."""
    context = AggregationContext.metered(ScriptedBackend([]), BudgetLedger("test"))
    return await by.aggregate("t", summaries, context)


def test_answer_key_is_the_default_normalizer_and_none_for_no_answer() -> None:
    spellings = ["Paris", "paris", "  PARIS. ", "ANSWER: Paris", "Final answer: paris."]
    assert {answer_key(a) for a in spellings} == {"paris"}
    # What whitespace-and-case grouping kept apart, the vote puts together.
    assert answer_key("ANSWER: 1,000") == answer_key("1000.0") == "1000"
    assert [answer_key(a) for a in (None, "", " \n\t")] == [None, None, None]
    assert answer_key("Paris", NORMALIZERS["strip"]) != answer_key("paris", NORMALIZERS["strip"])
    assert answer_key("  x ", default_normalizer) == default_normalizer("  x ")


@pytest.mark.anyio
async def test_the_vote_answers_with_the_first_original_of_the_winning_group() -> None:
    summaries = [s("r0", "Lyon"), s("r1", "paris"), s("r2", "Paris"), s("r3", "PARIS.")]
    result = await vote(MajorityVote(), summaries)
    assert (result.answer, result.winner) == ("paris", "r1")
    again = await vote(MajorityVote(), summaries)
    assert (again.answer, again.winner) == ("paris", "r1")
    # Another order, another representative: the first of the group given.
    flipped = await vote(MajorityVote(), summaries[::-1])
    assert (flipped.answer, flipped.winner) == ("PARIS.", "r3")
    # The vote's own normalizer decides the groups: case now matters.
    strict = await vote(MajorityVote(NORMALIZERS["strip"]), summaries)
    assert (strict.answer, strict.winner) == ("Lyon", "r0")


_SPELLINGS = ["Paris", "paris", " PARIS.", "ANSWER: Paris", "Lyon", "lyon ", "1,000", "1000", ""]


@given(
    answers=st.lists(st.one_of(st.none(), st.sampled_from(_SPELLINGS)), min_size=1, max_size=9),
    weighted=st.booleans(),
)
def test_the_vote_groups_exactly_by_answer_key(answers: list[str | None], weighted: bool) -> None:
    summaries = [s(f"r{i}", a) for i, a in enumerate(answers)]
    by = WeightedVote(weight=lambda _: 1.0) if weighted else MajorityVote()
    result = anyio.run(vote, by, summaries)

    keys = [answer_key(a) for a in answers]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        assert result.answer is None
        return
    best = max(counts.values())
    # The most frequent key (a tie: the one seen first), represented by its
    # first member in rollout order.
    winner = next(k for k in keys if k is not None and counts[k] == best)
    first = keys.index(winner)
    assert (result.answer, result.winner) == (answers[first], f"r{first}")


_COMPARED: list[int] = [0]


class _CountingSummary(TrajectorySummary, frozen=True):
    """A summary that counts the comparisons made with it."""

    def __eq__(self, other: object) -> bool:
        _COMPARED[0] += 1
        return self is other

    def __hash__(self) -> int:
        return id(self)


def test_usable_keeps_order_and_is_one_pass() -> None:
    """``usable`` splits summaries in one pass: with 600 of them it compared
    every excluded one with the kept list (O(n^2); 138 ms at 3,000 rollouts,
    at the end of every run) and here makes no comparison at all."""
    from agentrt.aggregators._aggregator import usable

    answers = ["4", None, " ", "ANSWER: 4", "", "5"] * 100
    summaries = [_CountingSummary(rollout_id=f"r{i}", answer=a) for i, a in enumerate(answers)]
    _COMPARED[0] = 0
    kept, excluded = usable(summaries)
    assert _COMPARED[0] == 0
    assert [x.rollout_id for x in kept] == [
        f"r{i}" for i, a in enumerate(answers) if a is not None and a.strip()
    ]
    assert excluded == [f"r{i}" for i, a in enumerate(answers) if a is None or not a.strip()]
