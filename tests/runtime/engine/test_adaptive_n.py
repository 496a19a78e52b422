"""Adaptive N stops by its own rule, and a run's answer is what the vote
compared (issue 28, item 6).

The rule: stop once the leading answer beats the runner-up with probability
``confidence`` (``_settled``).  With every rollout agreeing, that is after
the k-th answer where 1 - 2^-(k+1) first reaches ``confidence``: the run
must vote over exactly k rollouts, however many were in flight."""

from __future__ import annotations

import re

import pytest

from agentrt.agents import EventLog
from agentrt.aggregators._vote import voted_answer
from agentrt.protocols import ModelRequest, ScalingSpec, SummaryWritten
from agentrt.runtime.engine._runtime import Runtime, RuntimeConfig
from agentrt.testing import ScriptedBackend

pytestmark = [pytest.mark.anyio]

_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


def rule_n(confidence: float) -> int:
    """The rule's N when every answer agrees: the least k with
    P(Beta(k + 1, 1) > 1/2) = 1 - 2^-(k + 1) >= confidence."""
    k = 1
    while 1 - 2 ** -(k + 1) < confidence:
        k += 1
    return k


@pytest.mark.parametrize(
    ("confidence", "min_rollouts"), [(0.9, 4), (0.9, 2), (0.97, 4), (0.97, 8), (0.99, 3)]
)
async def test_adaptive_n_votes_over_exactly_the_rollouts_its_rule_names(
    confidence: float, min_rollouts: int
) -> None:
    started: list[int] = []

    def agree(request: ModelRequest) -> str:
        found = _ROLLOUT.search(request.request_id or "")
        assert found is not None
        started.append(int(found.group(1)))
        return "6 x 7 = 42.\nANSWER: 42"

    log = EventLog()  # a reader of every event: the engine awaits between rollouts' ends
    async with Runtime(RuntimeConfig(warm_prefix=False), backends=[ScriptedBackend(agree)]) as rt:
        result = await rt.run(
            "6 x 7?",
            scaling=ScalingSpec(rollouts=20, confidence=confidence, min_rollouts=min_rollouts),
            events=log,
        )
    n = rule_n(confidence)
    assert len(result.summaries) == n, [s.rollout_id for s in result.summaries]
    # Rollouts in flight when the rule was met are stopped: never more
    # started than the rule's N plus the window still running.
    assert n <= len(started) <= n + min_rollouts - 1
    assert len(log.of_type(SummaryWritten)) >= n
    assert result.answer == "42"
    assert result.raw_answer == "6 x 7 = 42.\nANSWER: 42"


async def test_the_answer_is_what_the_vote_compared_and_the_text_stays() -> None:
    """The default vote extracts the text after ``ANSWER:``: the result's
    answer is that text (as written, not casefolded); a vote that compares
    whole answers (``normalize = ["none"]``) keeps them whole."""
    texts = ["I think it is Paris.\nANSWER: Paris", "ANSWER: Paris", "ANSWER: Lyon"]

    def by_rollout(request: ModelRequest) -> str:
        found = _ROLLOUT.search(request.request_id or "")
        assert found is not None
        return texts[int(found.group(1))]

    async with Runtime(
        RuntimeConfig(warm_prefix=False, early_stop=False),
        backends=[ScriptedBackend(by_rollout)],
    ) as rt:
        voted = await rt.run("Capital of France?", scaling=ScalingSpec(rollouts=3))
        whole = await rt.run(
            "Capital of France?",
            scaling=ScalingSpec(rollouts=3, options={"normalize": ["none"]}),
        )
        again = await rt.aggregate("Capital of France?", voted.summaries)
    assert voted.answer == "Paris"
    assert voted.raw_answer in texts[:2]
    assert whole.answer == whole.raw_answer
    assert whole.answer in texts
    assert again.answer == "Paris"
    assert again.raw_answer in texts[:2]


def test_an_answer_without_a_marker_is_kept_whole() -> None:
    """Nothing to extract (a patch): the answer is the text as written, its
    last newline included, whatever the vote's normalizer does to it."""
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    assert voted_answer(patch) == patch
    assert voted_answer("  Paris. ") == "  Paris. "
    assert voted_answer("ANSWER: Paris.\n") == "Paris."
