"""Judges with real-model replies: verdicts written in the styles models
write are read as meant, and position bias is controlled (an uninformative
judge makes each of N candidates win with probability 1/N)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import pytest

from agentrt.aggregators import (
    RTV,
    AggregationContext,
    Judge,
    ModelJudge,
    build_aggregator,
)
from agentrt.aggregators._verdict import parse_score, parse_verdict
from agentrt.protocols import ModelRequest, TrajectorySummary
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend, ScriptedToolCall

pytestmark = pytest.mark.anyio

#: Chi-square critical values at p = 0.001 (a seeded test fails by chance
#: with probability 1/1000 at most, and the seeds make it reproducible).
CHI2_999 = {2: 13.816, 4: 18.467, 7: 24.322}


@pytest.mark.parametrize(
    ("reply", "n", "expected"),
    [
        # reasoning before the verdict (the old reader took the first integer: 1)
        ("Comparing attempts 1 and 2, attempt 2 is better supported.", 2, 1),
        ("Attempt 1 cites no source; attempt 2 ran the query.\n\nVERDICT: 2", 2, 1),
        ("Attempt 3 is wrong, attempt 1 is unverified.\nFinal verdict: Attempt 2", 3, 1),
        # verdict first, reasoning after (mentions other attempts)
        ("Verdict: 1\n\nAttempt 2 is better written, but attempt 1 verified it.", 2, 0),
        # markdown
        ("**Verdict:** Attempt 2", 2, 1),
        ("## Decision\n**Winner: Attempt #3**", 3, 2),
        ("The best attempt is **attempt 2**.", 2, 1),
        # JSON, bare and fenced, with reasoning first
        ('{"reasoning": "attempt 1 guessed", "verdict": 2}', 2, 1),
        ('Here is my judgement:\n```json\n{"winner": "Attempt 3"}\n```', 3, 2),
        # a reasoning model's scratch is not the verdict
        ("<think>verdict: 1? no...</think>\nVERDICT: [[2]]", 2, 1),
        ("I choose Attempt 3 because its test passed.", 3, 2),
        ("2", 2, 1),
        ("**1**", 2, 0),
        # refusals, ties and impossible numbers are no verdict
        ("I cannot determine which attempt is better.", 2, None),
        ("I'm sorry, but I can't help with that.", 2, None),
        ("Neither attempt 1 nor attempt 2 is better; it is a tie.", 2, None),
        ("VERDICT: 7", 2, None),
        ("", 2, None),
        # written after the parser, as a check on what the corpus did not cover
        ("I would not choose Attempt 1.", 2, None),
        ("I would not choose Attempt 1. VERDICT: 2", 2, 1),
        ("The winner is clearly Attempt 2!", 2, 1),
        ("Both attempts reach the same answer. VERDICT: both", 2, None),
        ("Attempt 2 is better supported. VERDICT: 1", 2, 0),
        ('{"winner": "tie"}', 2, None),
        ("Attempt 1 passes 3/4 tests; attempt 2 passes 4/4. VERDICT: 2", 2, 1),
        ("Attempt 1 is better written, but Attempt 2 is correct.", 2, None),
        ("Verdict: Attempt 1 is wrong, so Attempt 2.", 2, None),
        ("Final Answer: Attempt 2", 2, 1),
    ],
)
def test_verdict_styles_are_read_as_meant(reply: str, n: int, expected: int | None) -> None:
    assert parse_verdict(reply, n) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("The answer is supported by two tool results.\nSCORE: 8", 0.8),
        ("Score: 3/10", 0.3),
        ('{"reasoning": "weak", "score": 2}', 0.2),
        ("I'd rate it 6 out of 10.", 0.6),
        ("7", 0.7),
        ("Score: 11", None),
        ("I cannot score this.", None),
        # written after the parser, as a check on what the corpus did not cover
        ("Passed 3/4 tests.", None),
        ("Overall: 7/10", 0.7),
        ("Score (0-10): 7", 0.7),
        ("Rating: 3 stars out of 5", 0.6),
        ("Score: 7\n\n(Note: 9/10 of the steps were verified.)", 0.7),
        ("Confidence: high", None),
        ("Likelihood of being correct: 80%", 0.8),
    ],
)
def test_score_styles_are_read_as_meant(reply: str, expected: float | None) -> None:
    assert parse_score(reply) == (None if expected is None else pytest.approx(expected))


def s(rid: str, answer: str) -> TrajectorySummary:
    return TrajectorySummary(rollout_id=rid, answer=answer)


def context(backend: ScriptedBackend) -> AggregationContext:
    return AggregationContext.metered(backend, BudgetLedger("judge"))


async def test_the_verdict_maps_back_from_the_shown_order() -> None:
    """Whatever order the candidates are shown in, the verdict names the
    candidate the model meant (read from the prompt)."""

    def pick_x(request: ModelRequest) -> str:
        prompt = str(request.messages[1].content)
        shown = {a: i for i, a in re.findall(r"Attempt (\d+):\nanswer: (\w+)", prompt)}
        return f"The attempt answering x is verified.\nVERDICT: {shown['x']}"

    backend = ScriptedBackend(pick_x)
    judge = ModelJudge(seed=11)
    group = [s("a", "w"), s("b", "x"), s("c", "y"), s("d", "z")]
    firsts: set[str] = set()
    for _ in range(20):
        verdict = await judge.compare("t", group, context(backend))
        assert verdict.winner == 1
        prompt = str(backend.requests[-1].messages[1].content)
        first = re.search(r"Attempt 1:\nanswer: (\w+)", prompt)
        assert first is not None
        firsts.add(first.group(1))
    assert len(firsts) == 4  # every candidate was shown first at some point


def chi2(counts: Counter[str], ids: Sequence[str], trials: int) -> float:
    expected = trials / len(ids)
    return sum((counts[i] - expected) ** 2 / expected for i in ids)


async def test_a_position_biased_judge_makes_each_of_8_win_with_probability_one_eighth() -> None:
    """A judge that always picks whichever attempt it is shown first says
    nothing about the candidates.  With shuffled presentation and coin ties,
    each of 8 candidates wins the tournament 1/8 of the time (chi-square, 7
    degrees of freedom, p = 0.001); without shuffling, candidate 0 always
    wins (the test would catch it)."""
    backend = ScriptedBackend(
        ["Both look plausible; the first one reads better.\nVERDICT: 1"], on_exhausted="repeat_last"
    )
    group = [s(f"r{i}", f"answer {i}") for i in range(8)]
    ids = [x.rollout_id for x in group]
    trials = 800
    wins: Counter[str] = Counter()
    biased: Counter[str] = Counter()
    for seed in range(trials):
        rtv = RTV(ModelJudge(seed=seed), v=2, seed=seed)
        wins[str((await rtv.aggregate("t", group, context(backend))).winner)] += 1
    for seed in range(50):
        fixed = RTV(ModelJudge(shuffle=False), v=2, tie="first", shuffle=False, seed=seed)
        biased[str((await fixed.aggregate("t", group, context(backend))).winner)] += 1
    assert chi2(wins, ids, trials) < CHI2_999[7], wins
    assert biased == Counter({"r0": 50})
    assert chi2(biased, ids, 50) > CHI2_999[7]


@pytest.mark.parametrize("n", [3, 5, 8])
async def test_ties_and_byes_favour_no_candidate(n: int, abstaining_judge: Judge) -> None:
    """Ties go to a seeded coin and byes to a seeded place in the bracket:
    with a judge that never decides, each of N (3 and 5 have byes) wins
    1/N of the time; the old rule (the first wins a tie) fails the test."""
    group = [s(f"r{i}", f"answer {i}") for i in range(n)]
    ids = [x.rollout_id for x in group]
    backend = ScriptedBackend([])
    trials = 300 * n
    wins: Counter[str] = Counter()
    for seed in range(trials):
        rtv = RTV(abstaining_judge, v=2, seed=seed)
        wins[str((await rtv.aggregate("t", group, context(backend))).winner)] += 1
    first = RTV(abstaining_judge, v=2, tie="first", shuffle=False)
    assert (await first.aggregate("t", group, context(backend))).winner == "r0"
    dof = n - 1
    critical = CHI2_999[dof] if dof in CHI2_999 else CHI2_999[4]
    assert chi2(wins, ids, trials) < critical, wins


async def test_structured_output_reads_the_verdict_tool_call() -> None:
    call = ScriptedToolCall("verdict", {"reasoning": "attempt 2 ran the test", "verdict": 2})
    backend = ScriptedBackend([call])
    judge = ModelJudge(structured=True, shuffle=False)
    verdict = await judge.compare("t", [s("a", "x"), s("b", "y")], context(backend))
    assert verdict.winner == 1
    request = backend.requests[0]
    assert [t.name for t in request.tools] == ["verdict"]
    assert request.tool_choice == "required"
    assert request.tools[0].parameters["properties"]["verdict"]["maximum"] == 2


def test_a_judge_option_that_does_not_exist_is_named() -> None:
    with pytest.raises(ConfigError, match=r"scaling.aggregate \(rtv\): judge.max_token: Extra"):
        build_aggregator({"name": "rtv", "judge": {"max_token": 9}}, where="scaling.aggregate")
    with pytest.raises(ConfigError, match=r"aggregate.name: unknown aggregator 'rtvv'; known: "):
        build_aggregator({"name": "rtvv"})
    with pytest.raises(ConfigError, match=r"judge.retries: retries must be >= 0 and <= 5"):
        ModelJudge(retries=9)
    rtv = build_aggregator({"name": "rtv", "judge": {"max_tokens": 2048, "retries": 0}})
    assert isinstance(rtv, RTV)
    assert isinstance(rtv.judge, ModelJudge)
    assert (rtv.judge.max_tokens, rtv.judge.retries) == (2048, 0)
