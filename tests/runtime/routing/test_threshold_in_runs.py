"""Threshold routing in real runs: ``Runtime.run`` with the default scorer
(the agent loop's signals), no difficulty value anywhere.  It used to fail
every rollout at step 0 ("needs signals.difficulty").

The small model calls a tool first; on a hard task it is unsure of that call
(mean token logprob -2) or the tool fails, so the next step goes to the large
model; on an easy task it is confident and every step stays small."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig, EventLog
from agentrt.protocols import (
    ModelRequest,
    ScalingSpec,
    StepRecorded,
    TokenLogprob,
    ToolMessage,
    UserMessage,
)
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.routing._routing_config import load_routing_config
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools import ToolOutput, tool

pytestmark = pytest.mark.anyio

TIERS = [{"name": "small", "model": "small"}, {"name": "large", "model": "large"}]
PRICES = PriceTable(
    models={
        "small": ModelPrice(prompt_usd_per_mtok=Decimal(1), completion_usd_per_mtok=Decimal(2)),
        "large": ModelPrice(prompt_usd_per_mtok=Decimal(10), completion_usd_per_mtok=Decimal(20)),
    }
)


@tool(name="lookup", description="look a key up")
async def lookup(key: str) -> ToolOutput:
    """Answers a key; the key ``broken`` fails."""
    if key == "broken":
        return ToolOutput.of_text(f"no entry {key!r}", is_error=True)
    return ToolOutput.of_text(f"{key} = 7")


def task_of(request: ModelRequest) -> str:
    first = next(m for m in request.messages if isinstance(m, UserMessage))
    assert isinstance(first.content, str)
    return first.content


def small(request: ModelRequest) -> ReplySpec:
    """Easy: a confident call.  Unsure: the same call with logprob -2 per
    token.  Broken: a confident call of a key the tool does not have."""
    task = task_of(request)
    if any(isinstance(m, ToolMessage) for m in request.messages):
        return "answer: 7 (small)"
    key = "broken" if task == "broken" else "x"
    logprob = -2.0 if task == "unsure" else -0.05
    return ScriptedReply(
        content="looking it up",
        tool_calls=[ScriptedToolCall("lookup", {"key": key})],
        logprobs=[TokenLogprob(token=t, logprob=logprob) for t in ("looking", " it", " up")],
    )


def large(request: ModelRequest) -> ReplySpec:
    return "answer: 7 (large)"


async def run(task: str, rollouts: int) -> tuple[list[list[str]], str | None, EventLog]:
    config = AgentConfig(
        name="router",
        logprobs=True,
        routing={"policy": "threshold", "tiers": TIERS, "thresholds": [0.5]},
    )
    log = EventLog()
    async with Runtime(
        backends=[
            ScriptedBackend(small, name="small", models=["small"]),
            ScriptedBackend(large, name="large", models=["large"]),
        ],
        tools=[lookup],
        agents={"router": config},
        prices=PRICES,
    ) as rt:
        result = await rt.run(
            task, agent="router", scaling=ScalingSpec(rollouts=rollouts), events=log
        )
    assert result.status == "succeeded", result.error
    tiers: dict[str, list[str]] = {}
    for event in log.of_type(StepRecorded):
        routing = event.step.routing
        assert routing is not None
        assert routing.policy == "threshold"
        tiers.setdefault(event.rollout_id, []).append(routing.tier)
    return list(tiers.values()), result.answer, log


async def test_confident_rollouts_stay_on_the_small_model() -> None:
    tiers, answer, log = await run("easy", rollouts=3)
    assert tiers == [["small", "small"]] * 3
    assert "small" in (answer or "")
    first = log.of_type(StepRecorded)[0].step.routing
    assert first is not None
    assert "scorer signals" in first.reason


async def test_an_unsure_step_sends_the_next_one_to_the_large_model() -> None:
    tiers, answer, log = await run("unsure", rollouts=3)
    assert tiers == [["small", "large"]] * 3
    assert "large" in (answer or "")
    escalated = [
        e.step.routing
        for e in log.of_type(StepRecorded)
        if e.step.routing is not None and e.step.routing.tier == "large"
    ]
    assert all(r.reason.startswith("difficulty 0.60 (scorer signals) >= 0.50") for r in escalated)


async def test_a_failed_tool_call_sends_the_next_step_to_the_large_model() -> None:
    tiers, _, _ = await run("broken", rollouts=2)
    assert tiers == [["small", "large"]] * 2


def test_a_provided_scorer_without_a_fallback_is_refused_up_front() -> None:
    with pytest.raises(ConfigError, match="scorer 'provided' needs fallback_difficulty"):
        load_routing_config(
            {"policy": "threshold", "tiers": TIERS, "thresholds": [0.5], "scorer": "provided"}
        )
    with pytest.raises(ConfigError, match="confident_logprob"):
        load_routing_config(
            {
                "policy": "threshold",
                "tiers": TIERS,
                "thresholds": [0.5],
                "weights": {"confident_logprob": -2.0},
            }
        )
