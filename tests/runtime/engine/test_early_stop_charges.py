"""Issue 28, item 2: a call cancelled in flight is charged what it
consumed (its prompt and the tokens it streamed), not its reservation, so
that stopping early never costs more than running every rollout."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig, AgentLimits
from agentrt.protocols import (
    Budget,
    Event,
    ModelRequest,
    RolloutQueued,
    RunResult,
    ScalingSpec,
    Usage,
)
from agentrt.runtime.models.http._http_client import HttpClientConfig, make_transport
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedReply, SimServer, SimServerConfig
from tests._support.backends import sim_backend

pytestmark = pytest.mark.anyio

SLOW_MS = 60_000
"""Long enough that a slow rollout can only end by being stopped."""


class SlowRollouts(httpx.AsyncBaseTransport):
    """Asks the sim-server to take ``slow_ms`` more before the first token
    of the requests of the rollouts named (request ids ``...-r<i>-<step>``)."""

    def __init__(self, slow: set[int], slow_ms: int) -> None:
        self._inner = make_transport()
        self._slow = tuple(f"-r{i}-" for i in slow)
        self._ms = slow_ms

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if any(s in request.headers.get("x-request-id", "") for s in self._slow):
            request.headers["x-sim-delay-ms"] = str(self._ms)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def solver() -> AgentConfig:
    return AgentConfig(
        name="solver",
        model="m0",
        stop_on=[],
        limits=AgentLimits(max_steps=2, max_tokens_per_step=512),
    )


async def run_on_sim(
    *,
    ttft_ms: int,
    reply_tokens: int,
    early_stop: bool,
    rollouts: int,
    http: HttpClientConfig | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    budget: Budget | None = None,
    events: Callable[[Event], Awaitable[None]] | None = None,
) -> tuple[RunResult, dict[str, Any]]:
    """``rollouts`` one-step rollouts of ``solver`` on the sim-server (model
    ``m0``, replies of ``reply_tokens`` tokens, the first after
    ``ttft_ms``); what the run reported and the server's stats once every
    request it saw has ended (an abandoned request is counted once its
    handler ends)."""
    sim = SimServerConfig(
        model="m0",
        ttft_ms=ttft_ms,
        token_ms=0,
        answer="answer",
        tool_rounds=0,
        reply_tokens=reply_tokens,
    )
    async with SimServer(sim) as server:
        model = sim_backend(server, transport=transport, http=http or HttpClientConfig())
        config = {"agents": {"solver": solver()}, "early_stop": early_stop, "warm_prefix": False}
        async with model, Runtime(config, backends=[model]) as rt:
            with anyio.fail_after(30):
                result = await rt.run(
                    "What is 2 + 3?",
                    agent="solver",
                    scaling=ScalingSpec(rollouts=rollouts),
                    budget=budget,
                    events=events,
                )
        for _ in range(1000):
            stats = server.stats()
            if not stats["in_flight"]:
                break
            await anyio.sleep(0.005)
    return result, stats


async def five_rollouts(*, early_stop: bool) -> tuple[RunResult, dict[str, int]]:
    """5 one-step rollouts on the sim-server: r0..r2 answer at once; with
    ``early_stop``, r3 and r4 would answer only after ``SLOW_MS`` (without
    it, at once: each call costs the same whenever it answers); what the
    run reported and the server counted."""
    result, stats = await run_on_sim(
        ttft_ms=0,
        reply_tokens=40,
        early_stop=early_stop,
        rollouts=5,
        transport=SlowRollouts({3, 4}, SLOW_MS if early_stop else 0),
    )
    return result, {**stats["tokens"], **stats["generations"]}


async def test_early_stop_is_charged_within_10_percent_of_what_the_server_counted() -> None:
    full, full_counted = await five_rollouts(early_stop=False)
    early, counted = await five_rollouts(early_stop=True)
    where = f"early {early.cost}, the server counted {counted}; all {full.cost}, {full_counted}"
    assert early.answer is not None, where
    assert early.answer == full.answer, where
    # r3 and r4 were cancelled waiting for their first token: the server had
    # their prompts and generated nothing for them.
    assert (counted["completed"], counted["abandoned"]) == (3, 2), where
    assert counted["abandoned_completion"] == 0, where
    served = sum(counted[k] for k in ("prompt", "completion", "abandoned_prompt"))
    charged = early.cost.usage.total_tokens
    assert abs(charged - served) <= served / 10, where
    assert early.cost.model_calls == 5, where
    # Stopping early costs less than running every rollout, never more.
    assert charged < full.cost.usage.total_tokens, where
    assert full.cost.usage.total_tokens == full_counted["prompt"] + full_counted["completion"]


@dataclass
class Plan:
    """One randomized run: per rollout, its delay and its answer; every
    reply is ``length`` tokens long."""

    delays: list[float]
    answers: list[str]
    length: int
    seen: list[str] = field(default_factory=list)


def planned_script(plans: dict[str, Plan]) -> Callable[[ModelRequest], ReplySpec]:
    """Each run's replies from its plan (found by the run id the requests carry)."""

    def script(request: ModelRequest) -> ReplySpec:
        plan = plans[request.affinity_key or ""]
        rid = request.request_id or ""
        index = int(rid.rsplit("-r", 1)[1].split("-")[0])
        words = " ".join(["so"] * plan.length)
        return ScriptedReply(
            content=f"{words}\nANSWER: {plan.answers[index]}", delay_s=plan.delays[index]
        )

    return script


async def test_over_200_randomized_runs_early_stop_never_charges_more() -> None:
    rng = random.Random(28)
    plans: dict[str, Plan] = {}
    backend = ScriptedBackend(planned_script(plans), models=["m0"])
    agents = {"solver": solver()}
    stopped_early = cheaper = 0
    async with (
        backend,
        Runtime(
            {"agents": agents, "early_stop": True, "warm_prefix": False}, backends=[backend]
        ) as early_rt,
        Runtime(
            {"agents": agents, "early_stop": False, "warm_prefix": False}, backends=[backend]
        ) as full_rt,
    ):
        for k in range(200):
            n = rng.randint(3, 7)
            plan = Plan(
                delays=[rng.choice([0.0, 0.0, 0.001, 0.005, 0.02]) for _ in range(n)],
                answers=[rng.choice(["5", "5", "5", "6"]) for _ in range(n)],
                length=rng.randint(1, 60),
            )
            plans[f"e{k}"] = plans[f"f{k}"] = plan
            with anyio.fail_after(30):
                early = await early_rt.run(
                    "What is 2 + 3?",
                    agent="solver",
                    scaling=ScalingSpec(rollouts=n),
                    run_id=f"e{k}",
                )
                full = await full_rt.run(
                    "What is 2 + 3?",
                    agent="solver",
                    scaling=ScalingSpec(rollouts=n),
                    run_id=f"f{k}",
                )
            where = f"run {k}: {plan}; early {early.cost}; all {full.cost}"
            assert full.cost.model_calls == n, where
            assert early.cost.usage.total_tokens <= full.cost.usage.total_tokens, where
            assert early.cost.usage.completion_tokens <= full.cost.usage.completion_tokens, where
            if early.cost.usage.total_tokens < full.cost.usage.total_tokens:
                cheaper += 1
            if len(early.summaries) < n:  # a rollout stopped early has none
                stopped_early += 1
    # Early stop did happen, and saved tokens, in a good share of the runs.
    assert stopped_early >= 20, (stopped_early, cheaper)
    assert cheaper >= 20, (stopped_early, cheaper)


async def test_early_stop_cancels_queued_rollouts_before_their_calls_are_sent() -> None:
    # The backend takes 3 requests at once: r0..r2 run and agree (3 of 5
    # decide the vote); r3 and r4 wait for a slot.  One may get the slot of
    # the first to answer (before the vote is decided) and be stopped in
    # flight; one still waiting when the vote is decided is stopped there,
    # never sent and never charged.
    events: list[Event] = []

    async def record(event: Event) -> None:
        events.append(event)

    result, stats = await run_on_sim(
        ttft_ms=50,
        reply_tokens=20,
        early_stop=True,
        rollouts=5,
        http=HttpClientConfig(max_connections=3),
        events=record,
    )
    seen = stats["requests"].get("/v1/chat/completions", 0)
    queued = {e.rollout_id for e in events if isinstance(e, RolloutQueued)}
    where = f"{result.cost}, the server saw {seen}, queued {queued}"
    assert len(queued) == 2, where
    assert result.answer is not None, where
    assert len(result.summaries) == 3, where
    # A call is charged if and only if it was sent.
    assert result.cost.model_calls == seen, where


async def test_a_spent_budget_stops_the_queued_rollouts_and_the_run_says_so() -> None:
    # One request at a time, one model call allowed: r0's call spends the
    # budget; r1 and r2, waiting for the slot r0 frees, are stopped there,
    # never sent nor charged, and the result says the cap cut them.
    result, stats = await run_on_sim(
        ttft_ms=0,
        reply_tokens=20,
        early_stop=False,
        rollouts=3,
        http=HttpClientConfig(max_connections=1),
        budget=Budget(max_model_calls=1),
    )
    seen = stats["requests"].get("/v1/chat/completions", 0)
    where = f"{result.cost}, the server saw {seen}, stopped {result.stopped}"
    assert result.cost.model_calls == seen == 1, where
    assert result.answer is not None, where
    assert result.stopped is not None, where
    assert (result.stopped.limit, result.stopped.finished, result.stopped.cut) == (
        "max_model_calls",
        1,
        2,
    ), where


async def test_a_call_past_its_deadline_after_tokens_came_is_charged_them() -> None:
    # Two rollouts under a cap stream their calls; each reply is 400 slow
    # tokens and the call's deadline cuts it: the tokens received are
    # charged (to the ledger and to the rollout's own cost), not dropped.
    words = " ".join(["so"] * 400)
    backend = ScriptedBackend(
        [ScriptedReply(content=words)], token_delay_s=0.002, on_exhausted="repeat_last"
    )
    agent = AgentConfig(
        name="solver", stop_on=[], limits=AgentLimits(max_steps=1, model_timeout_s=0.1)
    )
    config = {"agents": {"solver": agent}, "early_stop": False, "warm_prefix": False}
    async with Runtime(config, backends=[backend]) as rt:
        with anyio.fail_after(30):
            result = await rt.run(
                "What is 2 + 3?",
                agent="solver",
                scaling=ScalingSpec(rollouts=2),
                budget=Budget(max_tokens=100_000),
            )
    where = f"{result.cost}; {[s.failure_modes for s in result.summaries]}"
    assert result.answer is None, where
    assert all("no reply within" in " ".join(s.failure_modes) for s in result.summaries), where
    usage = result.cost.usage
    assert 0 < usage.completion_tokens < 2 * 400, where
    assert usage.prompt_tokens > 0, where
    assert result.cost.model_calls == 2, where
    assert usage == sum((s.cost.usage for s in result.summaries), Usage()), where
