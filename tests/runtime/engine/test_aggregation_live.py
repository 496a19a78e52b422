"""Issue 28, item 3: the cost of an aggregation is live (a ``ModelCalled``
and a ``BudgetUpdated`` after each judge call, not one jump at the end),
and an aggregation the cap stopped keeps its bracket so far; item 1: the
judges spend a token cap instead of being refused at their worst case."""

from __future__ import annotations

import re

import anyio
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig
from agentrt.agents._summary import SUMMARY_MIN_TOKENS
from agentrt.aggregators._aggregator import AGGREGATION_MIN_TOKENS
from agentrt.protocols import (
    Budget,
    BudgetUpdated,
    Event,
    ModelCalled,
    ModelRequest,
    RolloutFinished,
    RunFinished,
    ScalingSpec,
    StepRecorded,
    VoteCast,
)
from agentrt.runtime.engine._runtime import RuntimeConfig
from agentrt.testing import ScriptedBackend, ScriptedReply, SimServer, SimServerConfig
from agentrt.tools import Calculator
from tests._support.backends import sim_backend

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
        model = sim_backend(server)
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


_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


def _rollouts_then_judges(request: ModelRequest) -> ScriptedReply:
    """Rollouts answer 42 or 41 by index; a judge names attempt 1 in a short
    reply (far below the 1,024 tokens a judge call reserves)."""
    found = _ROLLOUT.search(request.request_id or "")
    if found:
        return ScriptedReply(content=f"ANSWER: {41 + int(found.group(1)) % 2}")
    return ScriptedReply(content="Attempt 1 shows its work. VERDICT: 1", delay_s=0.001)


async def test_an_rtv_under_a_token_cap_spends_it_instead_of_stopping_early() -> None:
    # Issue 28: concurrent judges each reserved their worst case (1,024
    # completion tokens and the prompt) and the ones that did not fit were
    # refused, so RTV "stopped at the budget cap" with most of it left.  Now
    # a judge call that does not fit waits for the calls in flight to give
    # back what they did not use, or runs with max_tokens lowered.
    cap = 12_000
    backend = ScriptedBackend(_rollouts_then_judges)
    config = RuntimeConfig.model_validate({"early_stop": False})
    async with Runtime(config, backends=[backend]) as rt:
        options = {"g": 2, "v": 8, "skip_agreeing": False}
        with anyio.fail_after(60):
            result = await rt.run(
                "What is 6 x 7?",
                scaling=ScalingSpec(rollouts=8, aggregate="rtv", options=options),
                budget=Budget(max_tokens=cap),
            )
    spent = result.cost.usage.total_tokens
    judges = [r for r in backend.requests if not _ROLLOUT.search(r.request_id or "")]
    where = f"{result.rationale}; spent {spent} of {cap} in {len(judges)} judge calls"
    assert spent <= cap, where  # no cap crossed
    assert len(backend.requests) == result.cost.model_calls, where  # every call charged
    # 56 judge calls (7 comparisons x 8 votes) would need more than the cap:
    # the cap, not an early refusal, ends the bracket.
    assert spent >= 0.8 * cap, where
    assert "stopped at the budget cap (max_tokens)" in result.rationale, where
    # The trace of the comparisons made is kept: level 1's four, and more.
    assert len(result.aggregation_trace) > 4, where
    # The last calls ran with max_tokens lowered to what was left, never
    # below a short verdict's room.
    lowered = [r.sampling.max_tokens for r in judges if r.sampling.max_tokens < 1024]
    assert lowered, where
    assert min(lowered) >= AGGREGATION_MIN_TOKENS, where


_PART = '{"answer_seen": "42", "progress": ["computed 6 x 7"], "conclusions": ["42"]}'


def _rollouts_then_summaries(request: ModelRequest) -> ScriptedReply:
    """Rollouts answer 42 at once; a summary call writes a short part (far
    below the 512 tokens it reserves)."""
    if _ROLLOUT.search(request.request_id or ""):
        return ScriptedReply(content="ANSWER: 42")
    return ScriptedReply(content=_PART, delay_s=0.01)


async def test_model_summaries_under_a_token_cap_wait_or_run_lowered() -> None:
    # 8 rollouts spend about 900 of 3,000 tokens; their 8 summaries, each
    # reserving its prompt and 512 tokens at once, do not all fit. They were
    # refused (6 of 8 rollouts kept their rule-based summary); now a summary
    # call waits for those in flight to give back what they did not use, or
    # runs with max_tokens lowered, as a judge's does.
    cap = 3000
    backend = ScriptedBackend(_rollouts_then_summaries)
    config = RuntimeConfig.model_validate(
        {"early_stop": False, "summarizer": "model", "warm_prefix": False}
    )
    async with Runtime(config, backends=[backend]) as rt:
        with anyio.fail_after(60):
            result = await rt.run(
                "What is 6 x 7?",
                scaling=ScalingSpec(rollouts=8, aggregate="majority"),
                budget=Budget(max_tokens=cap),
            )
    summaries = [r for r in backend.requests if not _ROLLOUT.search(r.request_id or "")]
    spent = result.cost.usage.total_tokens
    modes = [m for s in result.summaries for m in s.failure_modes]
    where = f"spent {spent} of {cap}; {len(summaries)} summary calls; {modes}"
    assert spent <= cap, where
    assert len(backend.requests) == result.cost.model_calls, where
    assert len(summaries) == len(result.summaries) == 8, where
    assert modes == [], where  # every summary is the model's
    assert result.stopped is None, where
    lowered = [r.sampling.max_tokens for r in summaries if r.sampling.max_tokens < 512]
    assert lowered, where
    assert min(lowered) >= SUMMARY_MIN_TOKENS, where
