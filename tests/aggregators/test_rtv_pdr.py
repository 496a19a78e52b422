"""Recursive Tournament Voting's bracket and Parallel-Distill-Refine's
workspace."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from agentrt.agents import EventLog
from agentrt.agents._recording import EventEmitter
from agentrt.aggregators import (
    PDR,
    RTV,
    AggregationContext,
    Judge,
    Rollout,
    SimulatedJudge,
    Workspace,
)
from agentrt.protocols import Cost, TrajectorySummary, Usage, VoteCast
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend

pytestmark = pytest.mark.anyio


def context(
    *,
    events: EventEmitter | None = None,
    run_id: str = "",
    rollout: Rollout | None = None,
    ledger: BudgetLedger | None = None,
) -> AggregationContext:
    """A context on an uncapped ledger; the scripted backend is never asked
    (the simulated judge books its calls on the ledger directly)."""
    return AggregationContext.metered(
        ScriptedBackend([]),
        ledger or BudgetLedger("agg"),
        run_id=run_id,
        events=events,
        rollout=rollout,
    )


def s(rid: str, answer: str | None, tokens: int = 0) -> TrajectorySummary:
    return TrajectorySummary(
        rollout_id=rid, answer=answer, cost=Cost(usage=Usage(completion_tokens=tokens))
    )


async def test_bracket_shape_for_8_with_groups_of_2() -> None:
    judge = SimulatedJudge("right", 1.0, delay_s=0.01)
    log = EventLog()
    summaries = [s(f"r{i}", "right" if i == 5 else f"wrong{i}") for i in range(8)]
    ledger = BudgetLedger("agg")
    result = await RTV(judge, g=2, v=3, shuffle=False).aggregate(
        "t", summaries, context(events=EventEmitter(log), run_id="run-7", ledger=ledger)
    )

    assert (result.answer, result.winner) == ("right", "r5")
    votes = log.of_type(VoteCast)
    assert votes == result.trace
    assert {v.run_id for v in votes} == {"run-7"}
    assert [v.round for v in votes] == [1, 1, 1, 1, 2, 2, 3]
    assert all(len(v.candidates) == 2 and sum(v.votes.values()) == 3 for v in votes)
    assert votes[0].candidates == ["r0", "r1"]
    assert [v.winner for v in votes if v.round == 3] == ["r5"]
    assert judge.calls == 7 * 3 == result.cost.model_calls
    assert result.cost.usage.total_tokens == 21 * judge.tokens_per_call
    # The simulated calls are on the ledger, and its spend is the whole truth.
    assert ledger.spent.model_calls == 21
    assert ledger.spent.usage == result.cost.usage
    # Comparisons of one level, and the votes of one comparison, ran at once.
    assert judge.max_in_flight > 3


async def test_odd_count_gets_byes_and_n_minus_1_comparisons() -> None:
    judge = SimulatedJudge("x", 1.0)
    summaries = [s(f"r{i}", "x" if i == 4 else f"y{i}") for i in range(5)]
    result = await RTV(judge, g=2, v=1, shuffle=False).aggregate("t", summaries, context())
    byes = [v for v in result.trace if len(v.candidates) == 1]
    played = [v for v in result.trace if len(v.candidates) > 1]
    assert [(b.round, b.candidates) for b in byes] == [(1, ["r4"]), (2, ["r4"])]
    assert len(played) == 4
    assert judge.calls == 4
    assert result.winner == "r4"
    groups_of_3 = await RTV(SimulatedJudge("x", 1.0), g=3, v=1, shuffle=False).aggregate(
        "t", summaries, context()
    )
    assert [len(v.candidates) for v in groups_of_3.trace] == [3, 2, 2]


async def test_tie_rules(abstaining_judge: Judge) -> None:
    summaries = [s("big", "a", tokens=900), s("small", "b", tokens=100)]
    first = await RTV(abstaining_judge, v=4, tie="first", shuffle=False).aggregate(
        "t", summaries, context()
    )
    cheapest = await RTV(abstaining_judge, v=4, tie="cheapest").aggregate("t", summaries, context())
    assert (first.winner, cheapest.winner) == ("big", "small")
    assert first.trace[0].votes == {"big": 0, "small": 0}
    with pytest.raises(ConfigError, match="group size g must be >= 2"):
        RTV(abstaining_judge, g=1)
    with pytest.raises(ConfigError, match=r"rtv.v: votes per comparison v must be .* <= 64"):
        RTV(v=100_000)


async def test_failed_rollouts_are_left_out_of_the_bracket() -> None:
    summaries = [s("a", None), s("b", "x"), s("c", "y"), s("d", None)]
    result = await RTV(SimulatedJudge("y", 1.0), v=1).aggregate("t", summaries, context())
    assert (result.winner, result.excluded) == ("c", ["a", "d"])
    assert [sorted(v.candidates) for v in result.trace] == [["b", "c"]]


async def test_pdr_workspace_is_bounded_to_k_and_conditions_the_next_round() -> None:
    seen: list[Workspace] = []
    counter = iter(range(1000))

    async def rollout(task: str, workspace: Workspace) -> TrajectorySummary:
        seen.append(workspace)
        n = next(counter)
        await anyio.lowlevel.checkpoint()
        if n == 2:
            raise RuntimeError("sandbox died")  # a crashed rollout
        # Conditioned rollouts copy the workspace's best answer (a model that
        # trusts its seed); fresh ones answer by index.
        answer = workspace.summaries[0].answer if workspace.summaries else f"a{n % 3}"
        return s(f"r{n}", answer)

    judge = SimulatedJudge("a1", 1.0, seed=3)
    pdr = PDR(judge, rounds=3, m=6, k=2, v=2, stop_on_agreement=False)
    result = await pdr.run("task", context(rollout=rollout))

    assert [len(r.summaries) for r in pdr.history] == [6, 6, 6]
    first, second, third = pdr.history
    assert first.workspace.summaries == []
    assert any(x.answer is None and "sandbox died" in x.failure_modes[0] for x in first.summaries)
    for r in (second, third):
        assert len(r.workspace.summaries) == 2 == r.workspace.k
    # The judge is perfect: the workspace holds a right answer, and every
    # round-2 rollout saw it in its seed text.
    assert second.workspace.summaries[0].answer == "a1"
    round_two = [w for w in seen if w.round == 2]
    assert len(round_two) == 6
    assert all("answer: a1" in w.render() for w in round_two)
    assert "Do not trust them" in round_two[0].render()
    assert all(x.answer == "a1" for x in third.summaries)
    assert result.answer == "a1"
    assert result.winner in {x.rollout_id for x in third.summaries}
    assert "pdr-r1-2" in result.excluded
    # Two distilling tournaments plus the final one, each recorded.
    assert result.cost.model_calls == judge.calls > 0
    assert {v.round for v in result.trace} >= {1, 2}


async def test_pdr_as_an_aggregator_with_judge_selection() -> None:
    calls: list[int] = []

    async def rollout(task: str, workspace: Workspace) -> TrajectorySummary:
        calls.append(len(workspace.summaries))
        return s(f"n{len(calls)}", workspace.summaries[0].answer if workspace.summaries else "z")

    judge = SimulatedJudge("good", 1.0)
    given = [s("a", "bad"), s("b", "good"), s("c", "bad")]
    result = await PDR(judge, rounds=2, m=3, k=1, select="judge").aggregate(
        "t", given, context(rollout=rollout)
    )
    assert calls == [1, 1, 1]
    assert result.answer == "good"
