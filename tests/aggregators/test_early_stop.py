"""Early stop for every aggregator: the engine's majority early stop never
changes the answer, RTV and PDR save judge calls when answers agree, and
adaptive N stops launching rollouts once the answer is settled."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

import agentrt
from agentrt.aggregators import PDR, RTV, AggregationContext, ModelJudge, Workspace
from agentrt.aggregators._vote import answer_key
from agentrt.protocols import Budget, ModelRequest, ScalingSpec, TrajectorySummary
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.testing import ScriptedBackend, ScriptedReply

pytestmark = pytest.mark.anyio


def population(answers: Sequence[str], delays: Sequence[float]) -> ScriptedBackend:
    """Rollout i (its one call is the i-th) answers ``answers[i]`` after ``delays[i]``."""
    calls = iter(range(len(answers)))

    def reply(request: ModelRequest) -> ScriptedReply:
        i = next(calls)
        return ScriptedReply(content=answers[i], delay_s=delays[i])

    return ScriptedBackend(reply)


async def run(answers: Sequence[str], delays: Sequence[float], *, early_stop: bool) -> str | None:
    backend = population(answers, delays)
    async with agentrt.Runtime({"early_stop": early_stop}, backends=[backend]) as rt:
        result = await rt.run("q", scaling=ScalingSpec(rollouts=len(answers)))
    return result.answer


async def test_the_issue_case_stops_early_without_changing_the_answer() -> None:
    """7 rollouts: three fast ``7``s, four slower spellings of 42 that only
    the vote's normalizer groups.  Stopping early must still answer 42."""
    answers = ["7", "ANSWER: 42", "7", "42.0", "answer: 42", "7", "Final answer: 42"]
    delays = [0.01, 0.03, 0.01, 0.04, 0.05, 0.01, 0.06]
    full = await run(answers, delays, early_stop=False)
    early = await run(answers, delays, early_stop=True)
    assert answer_key(full) == answer_key(early) == "42"


async def test_early_stop_never_changes_the_answer_on_random_populations() -> None:
    rng = random.Random(13)
    stopped_early = 0
    for _ in range(6):
        n = rng.choice([5, 7, 9])
        answers = [rng.choice(["1", "answer: 1", "1.0", "2", "ANSWER: 2", "3"]) for _ in range(n)]
        delays = [rng.uniform(0.0, 0.03) for _ in range(n)]
        backend = population(answers, delays)
        async with agentrt.Runtime({"early_stop": True}, backends=[backend]) as rt:
            early = await rt.run("q", scaling=ScalingSpec(rollouts=n))
        stopped_early += len([s for s in early.summaries if s.answer is not None]) < n
        full = await run(answers, delays, early_stop=False)
        assert answer_key(early.answer) == answer_key(full), (answers, delays)
    assert stopped_early > 0  # the property was exercised, not vacuous


def s(rid: str, answer: str) -> TrajectorySummary:
    return TrajectorySummary(rollout_id=rid, answer=answer)


def judge_context(backend: ScriptedBackend, **kwargs: object) -> AggregationContext:
    return AggregationContext.metered(backend, BudgetLedger("agg"), **kwargs)  # type: ignore[arg-type]


async def test_rtv_over_8_identical_answers_makes_no_judge_call() -> None:
    backend = ScriptedBackend(["VERDICT: 1"], on_exhausted="repeat_last")
    same = [s(f"r{i}", "ANSWER: 42" if i % 2 else "42") for i in range(8)]
    result = await RTV(ModelJudge(), g=2, v=8).aggregate("t", same, judge_context(backend))
    assert answer_key(result.answer) == "42"
    assert backend.requests == []  # was 7 * 8 = 56
    assert "7 of them agreed, 0 judge calls" in result.rationale
    # Two camps of four: only the comparisons across camps are judged.
    camps = [s(f"r{i}", "42" if i < 4 else "7") for i in range(8)]
    mixed = await RTV(ModelJudge(), g=2, v=8, shuffle=False).aggregate(
        "t", camps, judge_context(backend)
    )
    assert len(backend.requests) == 8  # only the final (42 vs 7) was judged
    assert "6 of them agreed, 8 judge calls" in mixed.rationale


async def test_pdr_stops_refining_once_a_round_converges() -> None:
    rounds: list[int] = []

    async def rollout(task: str, workspace: Workspace) -> TrajectorySummary:
        rounds.append(workspace.round)
        return s(f"w{len(rounds)}", "42")

    backend = ScriptedBackend(["VERDICT: 1"], on_exhausted="repeat_last")
    split = [s("a", "42"), s("b", "7"), s("c", "42"), s("d", "9")]
    pdr = PDR(ModelJudge(), rounds=4, m=4, k=2, v=2)
    result = await pdr.aggregate("t", split, judge_context(backend, rollout=rollout))
    assert rounds == [2, 2, 2, 2]  # round 2 agreed: rounds 3 and 4 never ran
    assert "round 2 converged: its 4 answers agree; no round 3" in result.rationale
    assert result.answer == "42"
    calls = len(backend.requests)
    assert calls == 2 * 2  # distilling round 1 only (a vs b, c vs d; a=c agree later)
    never = PDR(ModelJudge(), rounds=4, m=4, k=2, v=2, stop_on_agreement=False)
    rounds.clear()
    await never.aggregate("t", split, judge_context(backend, rollout=rollout))
    assert rounds == [2] * 4 + [3] * 4 + [4] * 4


async def adaptive(answers: Sequence[str], spec: ScalingSpec, budget: Budget | None = None) -> int:
    """How many rollouts an adaptive run started (each makes one call,
    unless the budget refused it)."""
    backend = population(answers, [0.005] * len(answers))
    async with agentrt.Runtime({"early_stop": False}, backends=[backend]) as rt:
        result = await rt.run("q", scaling=spec, budget=budget)
    if budget is None:
        # A rollout still in flight when the answer settled is cancelled:
        # its call was made, and it has no summary.
        extra = len(backend.requests) - len(result.summaries)
        assert 0 <= extra <= spec.min_rollouts, (len(backend.requests), len(result.summaries))
    return len(result.summaries)


async def test_adaptive_n_stops_once_the_answer_is_settled() -> None:
    # Unanimous: 4 agreeing answers settle it at 0.95 (31/32 = 0.97), 5 at 0.98.
    spec = ScalingSpec(rollouts=16, confidence=0.95, min_rollouts=2)
    started = await adaptive(["42"] * 16, spec)
    assert 4 <= started <= 5  # at most one more was in flight when it settled
    strict = ScalingSpec(rollouts=16, confidence=0.99, min_rollouts=1)
    assert await adaptive(["42"] * 16, strict) == 6  # 63/64 < 0.99 <= 127/128
    # Split answers never settle: every rollout up to the cap runs.
    assert await adaptive(["1", "2"] * 8, spec) == 16
    # The budget ends it too: no rollout starts once no call is left (one
    # started while the last call was still in flight may find none).
    capped = await adaptive(["1", "2"] * 8, spec, Budget(max_model_calls=6))
    assert capped <= 6 + 1
    # Without a confidence, every rollout starts at once (fixed N).
    assert await adaptive(["42"] * 6, ScalingSpec(rollouts=6)) == 6


def test_adaptive_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"ScalingSpec.confidence must be a probability > 0.5"):
        ScalingSpec(rollouts=4, confidence=1.0)
    with pytest.raises(ValueError, match=r"ScalingSpec.min_rollouts must be >= 1"):
        ScalingSpec(rollouts=4, confidence=0.9, min_rollouts=0)
