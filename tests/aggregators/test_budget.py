"""Every aggregation call is on the run's ledger: aggregators reach a model
only through their context's metered backend, stop at the cap with the best
answer they have, and refuse options past their bounds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.aggregators import (
    PDR,
    RTV,
    AggregationAgent,
    AggregationContext,
    AggregationResult,
    Aggregator,
    BestOfN,
    CompressedReasoning,
    ModelJudge,
    Workspace,
    build_aggregator,
    parse_config,
)
from agentrt.protocols import Budget, ModelRequest, TrajectorySummary, Usage, UserMessage
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.testing import ScriptedBackend, ScriptedReply

pytestmark = pytest.mark.anyio


def summaries(n: int) -> list[TrajectorySummary]:
    # r0 and every third one agree: "a0" wins a plurality.
    return [TrajectorySummary(rollout_id=f"r{i}", answer=f"a{i % 3}") for i in range(n)]


def judge_backend() -> ScriptedBackend:
    """A judge that always names the first attempt or report."""
    return ScriptedBackend(["1"], on_exhausted="repeat_last")


def check_within(ledger: BudgetLedger, backend: ScriptedBackend) -> None:
    """The caps held, and every request the backend saw is on the ledger."""
    snap = ledger.snapshot()
    budget = ledger.budget
    if budget.max_tokens is not None:
        assert snap.spent.usage.total_tokens <= budget.max_tokens
    if budget.max_model_calls is not None:
        assert snap.spent.model_calls <= budget.max_model_calls
    assert snap.overruns == 0
    assert (snap.in_flight, snap.reserved_tokens) == (0, 0)
    assert len(backend.requests) == snap.spent.model_calls


async def test_a_metered_rtv_stops_at_a_token_cap_with_the_best_answer_so_far() -> None:
    backend = judge_backend()
    ledger = BudgetLedger("run", Budget(max_tokens=1_500))
    context = AggregationContext.metered(backend, ledger, run_id="run")
    result = await RTV(ModelJudge(), g=2, v=8).aggregate("t", summaries(8), context)

    check_within(ledger, backend)
    assert 0 < ledger.spent.model_calls < 7 * 8  # the whole bracket needs 56 calls
    assert result.answer is not None
    assert result.rationale.startswith("stopped at the budget cap (max_tokens)")


def cut_at_max_tokens(request: ModelRequest) -> ScriptedReply:
    """A judge that uses all the room it is given and is cut off every time."""
    used = Usage(prompt_tokens=40, completion_tokens=request.sampling.max_tokens)
    return ScriptedReply(content="Let me compare", finish_reason="length", usage=used)


async def test_a_cut_judge_reply_is_asked_again_only_within_the_cap() -> None:
    # Each retry of a cut reply asks for twice the room; on a context with
    # a floor it runs with max_tokens lowered to what is left, and is
    # refused once not even the floor fits: the cap is never crossed.
    backend = ScriptedBackend(cut_at_max_tokens)
    cap = 2_000
    ledger = BudgetLedger("run", Budget(max_tokens=cap))
    context = AggregationContext.metered(backend, ledger, run_id="run", min_tokens=16)
    judge = ModelJudge(max_tokens=256, retries=5, structured=False)
    with pytest.raises(BudgetExceeded, match="max_tokens"):
        await judge.compare("t", summaries(2), context)
    asked = [r.sampling.max_tokens for r in backend.requests]
    assert len(asked) == 3, asked
    assert asked[:2] == [256, 512], asked  # twice the room while it fits
    assert 16 <= asked[2] < 1024, asked  # then lowered to what is left, never below the floor
    snap = ledger.snapshot()
    assert snap.spent.usage.total_tokens <= cap
    assert (snap.overruns, snap.in_flight, snap.reserved_tokens) == (0, 0, 0)
    check_within(ledger, backend)


async def test_a_metered_rtv_at_its_largest_v_stops_at_a_call_cap() -> None:
    backend = judge_backend()
    ledger = BudgetLedger("run", Budget(max_model_calls=50))
    context = AggregationContext.metered(backend, ledger)
    rtv = build_aggregator({"name": "rtv", "v": 64})
    result = await rtv.aggregate("t", summaries(8), context)

    check_within(ledger, backend)
    assert ledger.spent.model_calls == 50  # level 1 alone asks for 4 * 64
    assert "stopped at the budget cap (max_model_calls)" in result.rationale
    assert result.answer == "a0"  # votes went to each group's first: r0, r2, r4, r6


def test_strict_options_take_json_schema_integers_and_nothing_looser() -> None:
    # What the daemon checks a request's options with: the published schema
    # says integer, and JSON Schema counts 59.0 as one (a fuzzer found it
    # refused); a string or a fraction is still not an integer.
    parsed = parse_config({"name": "aggagent", "max_turns": 59.0}, strict=True)
    assert getattr(parsed, "max_turns", None) == 59
    nested = parse_config(
        {"name": "pdr", "rounds": 2.0, "judge": {"temperature": 1.0}}, strict=True
    )
    assert getattr(nested, "rounds", None) == 2
    for bad in ("59", 59.5, True):
        with pytest.raises(ConfigError, match=r"max_turns: "):
            parse_config({"name": "aggagent", "max_turns": bad}, strict=True)


def test_options_past_their_bounds_are_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"aggregate \(rtv\): v: .*less than or equal to 64"):
        parse_config({"name": "rtv", "v": 100_000})
    with pytest.raises(ConfigError, match=r"\(got 100000\)"):
        parse_config({"name": "rtv", "v": 100_000})
    for raw, key in (
        ({"name": "rtv", "g": 17}, "g"),
        ({"name": "pdr", "rounds": 9}, "rounds"),
        ({"name": "pdr", "m": 65}, "m"),
        ({"name": "pdr", "k": 17}, "k"),
        ({"name": "pdr", "v": 65}, "v"),
        ({"name": "aggagent", "max_turns": 101}, "max_turns"),
        ({"name": "compressed", "report_chars": 20_001}, "report_chars"),
    ):
        with pytest.raises(ConfigError, match=rf"scaling.aggregate \(\w+\): {key}: "):
            build_aggregator(raw, where="scaling.aggregate")
    with pytest.raises(ConfigError, match=r"pdr.rounds: rounds must be >= 1 and <= 8"):
        PDR(rounds=100)


@pytest.mark.parametrize(
    "config",
    [
        {"name": "best_of_n", "mode": "pointwise"},
        {"name": "best_of_n", "mode": "pairwise"},
        {"name": "pdr", "rounds": 3, "m": 4, "k": 2, "v": 2},
        {"name": "pdr", "rounds": 3, "m": 4, "k": 2, "select": "judge"},
    ],
    ids=lambda c: "-".join(str(v) for v in c.values()),
)
async def test_every_aggregator_stops_at_the_cap_with_an_answer(config: dict[str, object]) -> None:
    backend = judge_backend()
    ledger = BudgetLedger("run", Budget(max_model_calls=3))  # each needs more
    refined: list[int] = []

    async def rollout(task: str, workspace: Workspace) -> TrajectorySummary:
        # A fresh rollout that spends on the same ledger, as the engine's do.
        refined.append(workspace.round)
        reply = await MeteredBackend(backend, ledger).complete(
            ModelRequest(messages=[UserMessage(content=workspace.render()[:200])])
        )
        return TrajectorySummary(rollout_id=f"n{len(refined)}", answer=reply.message.content)

    context = AggregationContext.metered(backend, ledger, rollout=rollout)
    result = await build_aggregator(config).aggregate("t", summaries(6), context)

    check_within(ledger, backend)
    assert result.answer is not None
    assert "budget cap" in result.rationale


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 12),
    config=st.sampled_from(
        [
            {"name": "rtv", "g": 2, "v": 8},
            {"name": "rtv", "g": 3, "v": 5, "tie": "cheapest"},
            {"name": "best_of_n"},
            {"name": "best_of_n", "mode": "pairwise"},
            {"name": "compressed"},
            {"name": "aggagent", "max_turns": 4},
        ]
    ),
    max_tokens=st.none() | st.integers(0, 6_000),
    max_calls=st.none() | st.integers(0, 40),
)
async def test_no_aggregator_crosses_a_cap(
    n: int, config: dict[str, object], max_tokens: int | None, max_calls: int | None
) -> None:
    backend = judge_backend()
    ledger = BudgetLedger("run", Budget(max_tokens=max_tokens, max_model_calls=max_calls))
    context = AggregationContext.metered(backend, ledger)
    result = await build_aggregator(config).aggregate("t", summaries(n), context)
    check_within(ledger, backend)
    assert result.answer is not None


async def test_a_custom_aggregator_sees_only_the_metered_backend() -> None:
    seen: list[object] = []

    class Echo:
        name = "echo"

        async def aggregate(
            self,
            task: str,
            summaries: Sequence[TrajectorySummary],
            context: AggregationContext,
        ) -> AggregationResult:
            seen.append(context.backend)
            reply = await context.backend.complete(
                ModelRequest(messages=[UserMessage(content=task)])
            )
            return AggregationResult(answer=reply.message.content, winner=None)

    backend = ScriptedBackend(["mine"], on_exhausted="repeat_last")
    ledger = BudgetLedger("run", Budget(max_model_calls=1))
    custom: Aggregator = Echo()
    context = AggregationContext.metered(backend, ledger)
    assert (await custom.aggregate("t", summaries(2), context)).answer == "mine"
    (given_backend,) = seen
    assert isinstance(given_backend, MeteredBackend)
    assert given_backend.ledger is ledger
    assert ledger.spent.model_calls == 1
    # Its second call is one past the cap: refused before the model sees it.
    with pytest.raises(Exception, match="max_model_calls"):
        await custom.aggregate("t", summaries(2), context)
    assert len(backend.requests) == 1
    # A context cannot be built around a raw backend, or one metered elsewhere.
    with pytest.raises(ConfigError, match="must be a MeteredBackend"):
        AggregationContext(run_id="run", ledger=ledger, backend=backend)  # type: ignore[arg-type]
    elsewhere = MeteredBackend(backend, BudgetLedger("other"))
    with pytest.raises(ConfigError, match="metered on ledger 'other'"):
        AggregationContext(run_id="run", ledger=ledger, backend=elsewhere)
    with pytest.raises(ConfigError, match="already metered on ledger 'other'"):
        AggregationContext.metered(elsewhere, ledger)
    assert AggregationContext.metered(given_backend, ledger).backend is given_backend


async def test_aggagent_ends_at_the_runs_cap_and_falls_back_without_more_calls() -> None:
    from agentrt.testing import ScriptedToolCall

    backend = ScriptedBackend([ScriptedToolCall("get_solution", {})], on_exhausted="repeat_last")
    ledger = BudgetLedger("run", Budget(max_model_calls=2))
    context = AggregationContext.metered(backend, ledger)
    result = await AggregationAgent(max_turns=10).aggregate("t", summaries(4), context)
    check_within(ledger, backend)
    assert ledger.spent.model_calls == 2
    assert result.answer == "a0"
    assert "agent stopped at the budget cap" in result.rationale
    assert "majority fallback" in result.rationale


async def test_best_of_n_and_compressed_fall_back_when_nothing_is_left() -> None:
    backend = judge_backend()
    ledger = BudgetLedger("run", Budget(max_model_calls=0))
    context = AggregationContext.metered(backend, ledger)
    for aggregator in (BestOfN(), BestOfN(mode="pairwise"), CompressedReasoning()):
        result = await aggregator.aggregate("t", summaries(5), context)
        assert result.answer is not None
        assert "stopped at the budget cap (max_model_calls)" in result.rationale
    assert backend.requests == []


async def test_pdr_starts_no_round_once_the_ledger_is_spent() -> None:
    backend = judge_backend()
    # Distilling round 1 (2 scores) and round 2's 4 rollouts take 6 calls: all there is.
    ledger = BudgetLedger("run", Budget(max_model_calls=6))
    rounds: list[int] = []

    async def rollout(task: str, workspace: Workspace) -> TrajectorySummary:
        rounds.append(workspace.round)
        reply = await MeteredBackend(backend, ledger).complete(
            ModelRequest(messages=[UserMessage(content=workspace.render())])
        )
        return TrajectorySummary(rollout_id=f"n{len(rounds)}", answer=reply.message.content)

    context = AggregationContext.metered(backend, ledger, rollout=rollout)
    pdr = PDR(rounds=3, m=4, k=1, select="judge", stop_on_agreement=False)
    result = await pdr.aggregate("t", summaries(2), context)

    check_within(ledger, backend)
    assert rounds == [2, 2, 2, 2]
    assert "stopped at the budget cap (max_model_calls) before round 3" in result.rationale
    assert result.answer == "1"  # round 2's answers, by a plurality: the final RTV had no room
    assert [len(r.summaries) for r in pdr.history] == [2, 4]
