"""Majority / weighted vote with normalization, best-of-N, compressed
reasoning, ROUGE-L and configuration, on crafted summaries."""

from __future__ import annotations

import re

import msgspec
import pytest

from agentrt.agents import EventLog
from agentrt.agents._recording import EventEmitter
from agentrt.aggregators import (
    PDR,
    RTV,
    AggregationContext,
    BestOfN,
    CompressedReasoning,
    MajorityVote,
    ModelJudge,
    SimulatedJudge,
    WeightedVote,
    build_aggregator,
    lcs_length,
    rouge_l,
)
from agentrt.aggregators._verdict import VerdictUnparseable
from agentrt.aggregators._vote import (
    chain,
    extract_answer,
    number,
    strip,
    verified_facts_weight,
)
from agentrt.protocols import ErrorRaised, Fact, ModelRequest, TrajectorySummary, VoteCast
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.testing import ScriptedBackend, ScriptedReply

pytestmark = pytest.mark.anyio


def context(
    backend: ModelBackend | None = None,
    *,
    events: EventEmitter | None = None,
    run_id: str = "",
) -> AggregationContext:
    """``backend`` metered on a fresh uncapped ledger (default: one that
    answers nothing: votes make no call)."""
    return AggregationContext.metered(
        backend or ScriptedBackend([]), BudgetLedger("agg"), events=events, run_id=run_id
    )


def s(rid: str, answer: str | None, *, verified: int = 0) -> TrajectorySummary:
    facts = [Fact(claim=f"f{i}", evidence="step 0", verified=True) for i in range(verified)]
    return TrajectorySummary(rollout_id=rid, answer=answer, facts=facts)


def test_normalizers() -> None:
    assert number("1,000.50") == number("1000.5") == number("1.0005e3") == "1000.5"
    assert number("42.0") == "42"
    assert number("forty") == "forty"
    assert extract_answer("I think... ANSWER: Paris") == "Paris"
    # The last marker, not the first (the first answered 'the answer: 42').
    assert extract_answer("Answer: the answer: 42") == "42"
    assert extract_answer("answer: 7? No.\nFinal answer: 42\nbecause 6*7") == "42"
    assert extract_answer("no marker here") == "no marker here"
    assert chain(extract_answer, strip, str.casefold)("Final answer:  PARIS. ") == "paris"


async def test_majority_groups_normalized_answers_and_skips_failures() -> None:
    log = EventLog()
    summaries = [
        s("a", "ANSWER: 1,000"),
        s("b", "42"),
        s("c", "1000.0"),
        s("d", None),  # a crashed rollout: excluded, aggregation continues
        s("e", "42.00 "),
        s("f", "1000"),
    ]
    result = await MajorityVote().aggregate(
        "t", summaries, context(events=EventEmitter(log), run_id="run-3")
    )
    assert (result.answer, result.winner) == ("ANSWER: 1,000", "a")
    assert result.excluded == ["d"]
    assert "3 of 5" in result.rationale
    (vote,) = log.of_type(VoteCast)
    assert vote.votes == {"a": 3, "b": 2}
    assert (vote.seq, vote.run_id, vote.aggregator) == (1, "run-3", "majority")
    assert result.trace == [vote]


async def test_majority_tie_goes_to_first_seen_and_empty_is_none() -> None:
    result = await MajorityVote().aggregate(
        "t", [s("a", "x"), s("b", "y"), s("c", "y"), s("d", "x")], context()
    )
    assert result.winner == "a"
    assert "tie" in result.rationale
    empty = await MajorityVote().aggregate("t", [s("a", None)], context())
    assert (empty.answer, empty.winner, empty.excluded) == (None, None, ["a"])


async def test_weighted_vote_counts_evidence_not_trajectories() -> None:
    summaries = [s("a", "x"), s("b", "x"), s("c", "y", verified=3)]
    assert (await MajorityVote().aggregate("t", summaries, context())).answer == "x"
    assert (await WeightedVote().aggregate("t", summaries, context())).answer == "y"
    # Evidence is capped (two verified facts count) and tool output that does
    # not support the answer earns nothing: three plain votes beat one rollout
    # with ten verified facts, and ten unverified ones weigh like none.
    many = [s("a", "x"), s("b", "x"), s("d", "x"), s("c", "y", verified=10)]
    assert (await WeightedVote().aggregate("t", many, context())).answer == "x"
    noisy = TrajectorySummary(
        rollout_id="n",
        answer="z",
        facts=[Fact(claim=f"tool output {i}", evidence="step 0") for i in range(10)],
    )
    failed = msgspec.structs.replace(s("f", "x"), failure_modes=["a tool failed"])
    assert [verified_facts_weight(x) for x in (noisy, failed, s("c", "y", verified=1))] == [
        1.0,
        0.5,
        1.75,
    ]
    custom = WeightedVote(weight=lambda x: 5.0 if x.rollout_id == "b" else 1.0)
    log = EventLog()
    picked = await custom.aggregate(
        "t",
        [s("a", "p"), s("b", "q"), s("c", "p")],
        context(events=EventEmitter(log), run_id="run-4"),
    )
    assert picked.winner == "b"
    (vote,) = log.of_type(VoteCast)
    assert (vote.run_id, vote.aggregator, vote.votes) == ("run-4", "weighted", {"a": 2, "b": 5})


async def test_best_of_n_pointwise_and_pairwise_with_a_perfect_judge() -> None:
    summaries = [s("a", "wrong"), s("b", "also wrong"), s("c", "right"), s("d", None)]
    for mode in ("pointwise", "pairwise"):
        judge = SimulatedJudge("right", 1.0, seed=1)
        result = await BestOfN(judge, mode=mode).aggregate("t", summaries, context())
        assert (result.winner, result.excluded) == ("c", ["d"])
        assert result.cost.model_calls == judge.calls == (3 if mode == "pointwise" else 2)


async def test_compressed_reasoning_writes_a_report_per_rollout_then_picks() -> None:
    def model(request: ModelRequest) -> str:
        system, user = (str(m.content) for m in request.messages)
        if system.startswith("Compress"):  # one report per rollout, from its record
            answer = user.rsplit("Its final answer: ", 1)[1]
            return f"Planning: check.\nMethods: the lookup returned {answer}.\nFinal reasoning: ok."
        reports = dict(re.findall(r"Report (\d+):\n.*?\nAnswer: (\w+)", user, re.S))
        shown = next(k for k, answer in reports.items() if answer == "y")
        return f"Report {shown} rests on a tool result.\nVERDICT: {shown}"

    backend = ScriptedBackend(model)
    group = [s("a", "x"), s("b", "y", verified=1), s("c", "z")]
    result = await CompressedReasoning(seed=3).aggregate("t", group, context(backend))
    assert (result.answer, result.winner) == ("y", "b")
    assert result.cost.model_calls == 4 == len(backend.requests)  # N reports + 1 pick
    pick = str(backend.requests[-1].messages[1].content)
    assert "Methods: the lookup returned y." in pick  # the model's report, not a template
    assert "answer: y\nfact (verified" in str(backend.requests[1].messages[1].content)
    assert "3 model-written reports (4 calls)" in result.rationale
    log = EventLog()
    ctx = AggregationContext.metered(
        ScriptedBackend(["Planning: x"] * 2 + ["hmm"]),
        BudgetLedger("agg"),
        events=EventEmitter(log),
    )
    unreadable = await CompressedReasoning().aggregate("t", [s("a", "x"), s("b", "y")], ctx)
    assert unreadable.winner == "a"  # plurality (a tie: the first seen)
    assert "compressed (picking call): no readable verdict" in unreadable.rationale
    assert [e.where for e in log.of_type(ErrorRaised)] == ["compressed (picking call)"]
    # A picking reply cut at max_tokens is no pick, whatever it said so far.
    cut = ScriptedReply(content="VERDICT: 2\n\nReport 2 rests on", finish_reason="length")
    ctx = AggregationContext.metered(
        ScriptedBackend(["Planning: x", "Planning: x", cut]), BudgetLedger("agg")
    )
    cut_off = await CompressedReasoning().aggregate("t", [s("a", "x"), s("b", "y")], ctx)
    assert cut_off.winner == "a"
    assert "compressed (picking call): no readable verdict" in cut_off.rationale


def test_rouge_l_on_known_pairs() -> None:
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    r = rouge_l("the cat sat on the mat", "the cat was on the mat")
    assert (r.recall, r.precision) == (5 / 6, 5 / 6)
    r = rouge_l("police killed the gunman", "the gunman kill police")
    assert r.recall == pytest.approx(2 / 4)  # LCS "the gunman"
    assert rouge_l("a b", "").f1 == 0.0
    assert rouge_l("x y z", "a x b y").recall == pytest.approx(2 / 3)


def test_build_aggregator_from_config_and_composition() -> None:
    judge = SimulatedJudge("x", 0.9)
    rtv = build_aggregator({"name": "rtv", "g": 3, "v": 5}, judge=judge)
    assert isinstance(rtv, RTV)
    assert (rtv.g, rtv.v, rtv.judge) == (3, 5, judge)
    # No judge given: a ModelJudge, which asks the context's backend at run time.
    default = build_aggregator({"name": "rtv"})
    assert isinstance(default, RTV)
    assert isinstance(default.judge, ModelJudge)

    pdr = build_aggregator(
        [{"name": "pdr", "rounds": 2, "m": 8, "k": 3}, {"name": "rtv", "g": 2, "v": 8}],
        judge=judge,
    )
    assert isinstance(pdr, PDR)
    assert isinstance(pdr.final, RTV)
    assert pdr.final.v == 8
    assert (pdr.rounds, pdr.m, pdr.k) == (2, 8, 3)
    with pytest.raises(ConfigError, match=r"unknown aggregator .rvt.; known: aggagent"):
        build_aggregator({"name": "rvt"})
    with pytest.raises(ConfigError, match=r"aggregate \(rtv\): g: Input should be greater"):
        build_aggregator({"name": "rtv", "g": 1}, judge=judge)
    with pytest.raises(ConfigError, match="unknown normalizers"):
        build_aggregator({"name": "majority", "normalize": ["lower"]})
    with pytest.raises(ConfigError, match="only pdr can be followed"):
        build_aggregator([{"name": "majority"}, {"name": "rtv"}], judge=judge)


async def test_model_judge_reads_summaries_and_parses_its_reply() -> None:
    backend = ScriptedBackend(
        ["Attempt 1 guessed; attempt 2 checked it. VERDICT: 2", "Score: 9/10", "7 of 10"]
    )
    judge = ModelJudge(temperature=0.5, shuffle=False)
    ctx = context(backend)
    pair = [s("a", "x"), s("b", "y", verified=1)]
    verdict = await judge.compare("task?", pair, ctx)
    assert verdict.winner == 1
    assert verdict.cost.model_calls == 1
    prompt = backend.requests[0].messages[1].content
    assert isinstance(prompt, str)
    assert "Attempt 2:\nanswer: y\nfact (verified; step 0): f0" in prompt
    assert "VERDICT: <a number from 1 to 2>" in prompt
    assert (await judge.score("task?", pair[0], ctx)).value == 0.9
    assert (await judge.score("task?", pair[0], ctx)).value == 0.7
    assert backend.requests[0].sampling.temperature == 0.5
    assert backend.requests[0].sampling.max_tokens == 1024  # room to reason
    # Every call was reserved on, and charged to, the context's ledger.
    assert ctx.ledger.spent.model_calls == 3


async def test_an_unparseable_reply_is_asked_again_then_fails_naming_the_judge() -> None:
    backend = ScriptedBackend(["I cannot tell.", "VERDICT: 1", "no idea", "still no idea"])
    judge = ModelJudge(shuffle=False)
    ctx = context(backend)
    pair = [s("a", "x"), s("b", "y")]
    verdict = await judge.compare("task?", pair, ctx)
    assert (verdict.winner, verdict.cost.model_calls) == (0, 2)  # the retry parsed
    retry = backend.requests[1].messages
    assert retry[-2].content == "I cannot tell."
    assert "VERDICT: <number>" in str(retry[-1].content)
    with pytest.raises(VerdictUnparseable, match=r"judge \(model 'scripted'\).*'still no idea'"):
        await judge.compare("task?", pair, ctx)
    assert ctx.ledger.spent.model_calls == 4  # retries are on the ledger too


async def test_an_rtv_comparison_no_vote_of_which_parses_is_one_clear_error() -> None:
    """The rollouts already ran: the run goes on, and the judge that never
    gave a verdict is reported once per comparison, naming it and the reply."""
    backend = ScriptedBackend(["I refuse to judge."], on_exhausted="repeat_last")
    log = EventLog()
    ctx = AggregationContext.metered(
        backend, BudgetLedger("agg"), events=EventEmitter(log), run_id="run-9"
    )
    rtv = RTV(ModelJudge(retries=1), v=3, shuffle=False)
    result = await rtv.aggregate("task?", [s("a", "x"), s("b", "y")], ctx)
    assert len(backend.requests) == 3 * 2  # three votes, each asked twice
    (error,) = log.of_type(ErrorRaised)
    assert (error.where, error.fatal, error.run_id) == (
        "rtv level 1, comparison of ['a', 'b']",
        False,
        "run-9",
    )
    assert "judge (model 'scripted')" in error.message
    assert "'I refuse to judge.'" in error.message
    assert result.answer in {"x", "y"}
    assert "1 comparisons had no readable verdict and were decided by the coin" in result.rationale


async def test_a_failing_judge_call_abstains_and_the_bracket_completes() -> None:
    from agentrt.runtime.kernel._errors import BackendUnavailable

    down = BackendUnavailable("503 after retries", backend="judge", endpoint="http://j/v1")
    backend = ScriptedBackend([down, "1", "2"])
    judge = ModelJudge(timeout_s=5.0)
    ctx = context(backend)
    pair = [s("a", "x"), s("b", "y")]
    failed = await judge.compare("task?", pair, ctx)
    assert failed.winner is None
    assert failed.cost.model_calls == 0
    assert ctx.ledger.snapshot().in_flight == 0  # the failed call's booking was released
    rtv = build_aggregator({"name": "rtv", "g": 2, "v": 1}, judge=judge)
    result = await rtv.aggregate("task?", [s("a", "x"), s("b", "y"), s("c", "z")], ctx)
    assert result.answer in {"x", "y", "z"}
    assert len(backend.requests) == 3


async def test_budget_exhaustion_in_a_judge_is_not_swallowed() -> None:
    from agentrt.runtime.kernel._errors import BudgetExceeded

    backend = ScriptedBackend([BudgetExceeded("no tokens left", limit="max_tokens")])
    with pytest.raises(BudgetExceeded):
        await ModelJudge().compare("task?", [s("a", "x"), s("b", "y")], context(backend))
