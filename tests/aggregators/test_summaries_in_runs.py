"""In a run with model summaries, the votes and judges read the rollouts'
own answers: a summarizer that claims another answer changes nothing."""

from __future__ import annotations

import pytest

import agentrt
from agentrt.aggregators._vote import answer_key
from agentrt.protocols import ModelRequest, ScalingSpec
from agentrt.testing import ScriptedBackend

pytestmark = pytest.mark.anyio

ANSWERS = ["ANSWER: 42", "ANSWER: 42", "ANSWER: 41"]


def model(request: ModelRequest) -> str:
    system = str(request.messages[0].content)
    if system.startswith("You summarize part"):  # the summarizer, claiming 99
        return '{"answer_seen": "99", "conclusions": ["the answer is 99"], "progress": ["x"]}'
    rollout = int((request.request_id or "r0-0").split("-r")[-1].split("-")[0])
    return ANSWERS[rollout]


@pytest.mark.parametrize("aggregate", ["majority", "weighted"])
async def test_a_model_summary_never_replaces_the_rollouts_answer(aggregate: str) -> None:
    backend = ScriptedBackend(model)
    config = {"summarizer": "model", "early_stop": False}
    async with agentrt.Runtime(config, backends=[backend]) as rt:
        result = await rt.run("q", scaling=ScalingSpec(rollouts=3, aggregate=aggregate))
    assert [s.answer for s in result.summaries] == ANSWERS
    assert answer_key(result.answer) == "42"
    assert all(any("'99'" in u for u in s.uncertainties) for s in result.summaries)
    # Three rollouts and three summaries, every call on the run's ledger.
    assert result.cost.model_calls == 6
