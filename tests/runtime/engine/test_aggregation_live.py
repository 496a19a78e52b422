"""Issue 28, item 3: the cost of an aggregation is live (a ``ModelCalled``
and a ``BudgetUpdated`` after each judge call, not one jump at the end),
and an aggregation the cap stopped keeps its bracket so far."""

from __future__ import annotations

import anyio
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig
from agentrt.models import OpenAIBackend, OpenAIBackendConfig
from agentrt.protocols import (
    Budget,
    BudgetUpdated,
    Event,
    ModelCalled,
    RolloutFinished,
    RunFinished,
    ScalingSpec,
    StepRecorded,
    VoteCast,
)
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator

pytestmark = pytest.mark.anyio


class EventLog:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)


async def test_an_rtv_stopped_by_its_cap_keeps_its_bracket_and_its_cost_is_live() -> None:
    # Judges that seldom give a readable verdict (the sim answers "ANSWER:
    # 5") are asked again until the cap of 50 calls refuses them: a
    # comparison none of whose judges answered stays in the trace, undecided.
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer")
    log = EventLog()
    async with SimServer(sim) as server:
        model = OpenAIBackend(
            OpenAIBackendConfig(name="sim", base_url=f"{server.url}/v1", models=["m0"])
        )
        agent = AgentConfig(name="solver", model="m0", tools=["calculator"])
        config = {"agents": {"solver": agent}, "warm_prefix": False}
        async with model, Runtime(config, backends=[model], tools=[Calculator()]) as rt:
            options = {"g": 2, "v": 64, "skip_agreeing": False}
            with anyio.fail_after(60):
                result = await rt.run(
                    "What is 2 + 3?",
                    agent="solver",
                    scaling=ScalingSpec(rollouts=8, aggregate="rtv", options=options),
                    budget=Budget(max_model_calls=50),
                    events=log,
                )
        served = server.stats()["requests"].get("/v1/chat/completions", 0)
    where = f"{result.rationale}; {result.cost}; stopped {result.stopped}"
    assert "stopped at the budget cap (max_model_calls)" in result.rationale, where
    assert result.cost.model_calls == served == 50, where
    # The bracket so far: level 1's four comparisons, decided or not.
    assert len(result.aggregation_trace) == 4, where
    assert all(len(v["candidates"]) == 2 for v in result.aggregation_trace), where
    undecided = [v for v in result.aggregation_trace if v["winner"] is None]
    assert all(set(v["votes"].values()) == {0} for v in undecided), where
    left = int(result.rationale.split(" with ")[1].split()[0])  # "... with 7 candidates left"
    assert left == 4 + len(undecided), where
    votes = [e for e in log.events if isinstance(e, VoteCast)]
    assert len(votes) == 4, where
    # The run says the cap stopped its aggregation.
    assert result.stopped is not None, where
    assert result.stopped.limit == "max_model_calls", where
    assert result.stopped.aggregation, where
    assert (result.stopped.finished, result.stopped.cut) == (8, 0), where
    # Live cost: after the last rollout ended, every judge call is followed
    # by a budget event whose spend counts it.
    last_rollout = max(i for i, e in enumerate(log.events) if isinstance(e, RolloutFinished))
    after = log.events[last_rollout:]
    judged = [e for e in after if isinstance(e, ModelCalled) and e.purpose == "aggregation"]
    steps = sum(1 for e in log.events if isinstance(e, StepRecorded) and e.step.reply is not None)
    assert len(judged) == result.cost.model_calls - steps > 0, where
    assert all(e.aggregator == "rtv" for e in judged), where
    budgets = [e for e in after if isinstance(e, BudgetUpdated)]
    calls_seen = [b.spent.model_calls for b in budgets]
    assert calls_seen == sorted(calls_seen), where
    assert len(budgets) >= len(judged), where
    assert calls_seen[-1] == result.cost.model_calls, where
    assert len(set(calls_seen)) >= len(judged), where
    assert isinstance(log.events[-1], RunFinished)
    assert log.events[-1].stopped == result.stopped
