"""The run's one ledger, checked where the calls land: at the sim-server.

Many runs of one ``Runtime`` at once (random aggregators, rollouts, caps,
model summaries, warm-up, reply lengths drawn per request), each run on its
own sim-server, so every request a run made is counted by the server that
served it:

- no run crosses a cap: tokens, calls and USD as reported, calls as its
  server saw them, USD recomputed from what its server counted, and wall
  time within a small slack;
- a run's reported cost is what its server counted: calls, prompt,
  completion and cached tokens, exactly;
- the issue's two cases: an 8-rollout RTV run under 15,000 tokens, an RTV
  tournament with ``v=64`` under 50 calls;
- a reply the server served is charged even when the run cancels the
  rollout that asked for it (early stop, the wall-clock cap);
- the wall-clock cap holds for the warm-up and the aggregation's calls too;
- a prompt longer than the ledger's estimate of it does not cross the cap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentrt import Runtime
from agentrt.agents import AgentConfig, AgentLimits
from agentrt.protocols import Budget, Cost, RunResult, ScalingSpec, SystemMessage, UserMessage
from agentrt.runtime.models.http import make_transport
from agentrt.runtime.models.openai import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.models.prompt_estimate import CharEstimator, estimate_request_tokens
from agentrt.runtime.pricing import ModelPrice, PriceTable
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
#: How far past ``max_wall_seconds`` a run may end: cancelling its rollouts,
#: refused aggregation calls, stopping its actors (a loaded CI machine).
WALL_SLACK_S = 0.5
MAX_RUNS = 5
#: USD per million tokens, the same for every model ``m<i>``.
PRICE = {
    "prompt_usd_per_mtok": "1",
    "completion_usd_per_mtok": "4",
    "cached_prompt_usd_per_mtok": "0.5",
}
PRICES = PriceTable(models={f"m{i}": ModelPrice.model_validate(PRICE) for i in range(MAX_RUNS)})


@dataclass(frozen=True)
class Counted:
    """What one sim-server counted (``/sim/stats``)."""

    seen: int
    completed: int
    abandoned: int
    prompt: int
    completion: int
    cached: int

    @classmethod
    def of(cls, server: SimServer) -> Counted:
        stats = server.stats()
        tokens = stats["tokens"]
        return cls(
            seen=stats["requests"].get(CHAT, 0),
            completed=stats["generations"]["completed"],
            abandoned=stats["generations"]["abandoned"],
            prompt=tokens["prompt"],
            completion=tokens["completion"],
            cached=tokens["cached"],
        )

    @property
    def usd(self) -> Fraction:
        """What the served tokens cost, recomputed with rationals from the
        prices (not through the ledger's integer path)."""
        prompt, completion, cached = (Fraction(p) for p in PRICE.values())
        fresh = self.prompt - self.cached
        return (fresh * prompt + self.cached * cached + self.completion * completion) / 10**6


def reported(cost: Cost) -> tuple[int, int, int, int]:
    usage = cost.usage
    return (
        cost.model_calls,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_prompt_tokens,
    )


def check_run(what: str, budget: Budget, result: RunResult, counted: Counted) -> None:
    """The run kept to ``budget``, and its cost is what its server counted."""
    cost = result.cost
    where = f"{what}: reported {cost}, the server counted {counted}"
    assert counted.seen == counted.completed + counted.abandoned, where
    if budget.max_tokens is not None:
        assert cost.usage.total_tokens <= budget.max_tokens, where
        assert counted.prompt + counted.completion <= budget.max_tokens, where
    if budget.max_model_calls is not None:
        assert cost.model_calls <= budget.max_model_calls, where
        assert counted.seen <= budget.max_model_calls, where
    if budget.max_usd is not None:
        assert cost.usd <= budget.max_usd, where
        assert counted.usd <= Fraction(budget.max_usd), where
    if budget.max_wall_seconds is not None:
        assert cost.wall_seconds <= budget.max_wall_seconds + WALL_SLACK_S, where
    # Every reply the server served is on the run's cost, and nothing else.
    served = (counted.completed, counted.prompt, counted.completion, counted.cached)
    assert reported(cost) == served, where
    assert abs(Fraction(cost.usd) - counted.usd) < Fraction(1, 10**9), where


def agent(i: int, **limits: Any) -> AgentConfig:
    return AgentConfig(
        name=f"a{i}",
        model=f"m{i}",
        tools=["calculator"],
        limits=AgentLimits(**{"max_steps": 4, "max_tokens_per_step": 256, **limits}),
    )


def runtime_config(servers: Sequence[SimServer], **options: Any) -> dict[str, Any]:
    """One backend ``b<i>`` serving model ``m<i>`` per server, one agent
    ``a<i>`` on each, model summaries."""
    return {
        "models": {
            "backends": {
                f"b{i}": {"kind": "openai", "base_url": f"{s.url}/v1", "models": [f"m{i}"]}
                for i, s in enumerate(servers)
            }
        },
        "agents": {f"a{i}": agent(i) for i in range(len(servers))},
        "summarizer": "model",
        **options,
    }


# -- the property ----------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    aggregate: dict[str, Any]
    rollouts: int
    budget: Budget
    server: SimServerConfig

    def __str__(self) -> str:
        b, s = self.budget, self.server
        caps = {
            "tokens": b.max_tokens,
            "calls": b.max_model_calls,
            "usd": b.max_usd,
            "wall": b.max_wall_seconds,
        }
        server = (
            f"ttft {s.ttft_ms} ms, {s.token_ms} ms/token, replies {s.reply_tokens}.."
            f"{s.reply_tokens_max} tokens, {s.answer}, {s.tool_rounds} tool rounds"
        )
        kept = {k: v for k, v in caps.items() if v is not None}
        return f"{self.aggregate} x{self.rollouts}, caps {kept}, server: {server}"


aggregates = st.one_of(
    st.just({"name": "majority"}),
    st.builds(lambda g, v: {"name": "rtv", "g": g, "v": v}, st.integers(2, 3), st.integers(1, 8)),
    st.builds(
        lambda rounds, m, k: {"name": "pdr", "rounds": rounds, "m": m, "k": k},
        st.integers(1, 3),
        st.integers(1, 4),
        st.integers(1, 2),
    ),
    st.builds(lambda turns: {"name": "aggagent", "max_turns": turns}, st.integers(1, 4)),
    st.builds(
        lambda mode: {"name": "best_of_n", "mode": mode},
        st.sampled_from(["pointwise", "pairwise"]),
    ),
    st.just({"name": "compressed"}),
)
budgets = st.builds(
    Budget,
    max_tokens=st.none() | st.integers(0, 40_000),
    max_model_calls=st.none() | st.integers(0, 40),
    max_usd=st.none() | st.sampled_from([0.0, 0.0005, 0.002, 0.01, 0.05]),
    max_wall_seconds=st.none() | st.sampled_from([0.05, 0.2, 0.5, 1.5]),
)


@st.composite
def servers(draw: st.DrawFn, i: int) -> SimServerConfig:
    shortest = draw(st.integers(1, 12))
    return SimServerConfig(
        model=f"m{i}",
        seed=draw(st.integers(0, 2**16)),
        ttft_ms=draw(st.sampled_from([0.0, 5.0, 25.0])),
        token_ms=draw(st.sampled_from([0.0, 0.1, 0.5])),
        reply_tokens=shortest,
        reply_tokens_max=draw(st.integers(shortest, 400)),  # past 256: cut at max_tokens
        answer=draw(st.sampled_from(["answer", "text"])),
        tool_rounds=draw(st.integers(0, 2)),
    )


@st.composite
def run_plans(draw: st.DrawFn) -> list[RunPlan]:
    count = draw(st.integers(2, MAX_RUNS))
    return [
        RunPlan(
            aggregate=draw(aggregates),
            rollouts=draw(st.integers(1, 6)),
            budget=draw(budgets),
            server=draw(servers(i)),
        )
        for i in range(count)
    ]


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    # Each example is a few hundred HTTP requests: no shrinking replays.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(plans=run_plans(), warm_prefix=st.booleans(), early_stop=st.booleans())
async def test_concurrent_runs_keep_to_their_caps_and_report_what_the_server_served(
    plans: list[RunPlan], warm_prefix: bool, early_stop: bool
) -> None:
    results: dict[int, RunResult] = {}
    async with AsyncExitStack() as stack:
        sims = [await stack.enter_async_context(SimServer(p.server)) for p in plans]
        config = runtime_config(sims, warm_prefix=warm_prefix, early_stop=early_stop)
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:

            async def run(i: int, plan: RunPlan) -> None:
                scaling = ScalingSpec(
                    rollouts=plan.rollouts,
                    aggregate=plan.aggregate["name"],
                    options={k: v for k, v in plan.aggregate.items() if k != "name"},
                )
                results[i] = await rt.run(
                    f"What is {i} + {3 * i}?", agent=f"a{i}", scaling=scaling, budget=plan.budget
                )

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i, plan in enumerate(plans):
                        tg.start_soon(run, i, plan)
        for i, (plan, sim) in enumerate(zip(plans, sims, strict=True)):
            check_run(f"run {i} {plan}", plan.budget, results[i], Counted.of(sim))


# -- the cases -------------------------------------------------------------


async def test_an_8_rollout_rtv_run_under_15000_tokens_spends_no_more() -> None:
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, reply_tokens=20)
    sim = sim.model_copy(update={"reply_tokens_max": 200})
    budget = Budget(max_tokens=15_000)
    async with SimServer(sim) as server:
        config = runtime_config([server], warm_prefix=True)
        config["agents"] = {"a0": agent(0, max_tokens_per_step=1024)}
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:
            scaling = ScalingSpec(rollouts=8, aggregate="rtv", options={"g": 2, "v": 8})
            result = await rt.run("What is 2 + 3?", agent="a0", scaling=scaling, budget=budget)
        counted = Counted.of(server)
    check_run("rtv under 15,000 tokens", budget, result, counted)
    assert counted.prompt + counted.completion > 10_000  # the cap, not the task, ended it
    assert "stopped at the budget cap (max_tokens)" in result.rationale


async def test_an_rtv_tournament_with_v_64_makes_at_most_50_calls() -> None:
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer")
    budget = Budget(max_model_calls=50)
    async with SimServer(sim) as server:
        async with Runtime(runtime_config([server]), tools=[Calculator()], prices=PRICES) as rt:
            scaling = ScalingSpec(rollouts=8, aggregate="rtv", options={"g": 2, "v": 64})
            result = await rt.run("What is 2 + 3?", agent="a0", scaling=scaling, budget=budget)
        counted = Counted.of(server)
    check_run("rtv v=64 under 50 calls", budget, result, counted)
    assert counted.seen == 50  # level 1 alone asks for 4 * 64 judgements
    assert "stopped at the budget cap (max_model_calls)" in result.rationale
    assert result.answer == "ANSWER: 5"


# -- cancelled rollouts and the wall clock ------------------------------------------


class HoldReplies(httpx.AsyncBaseTransport):
    """Reads each reply in full (so the server has served and counted it),
    then holds it for ``hold(request)`` seconds (``math.inf``: until the
    caller is cancelled) before handing it over: a reply waiting in the
    socket while its client is busy, or a slow network."""

    def __init__(self, hold: Callable[[httpx.Request], float]) -> None:
        self._inner = make_transport()
        self._hold = hold
        self.held: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        seconds = self._hold(request)
        if seconds > 0:
            self.held.append(request.headers.get("x-request-id", ""))
            await anyio.sleep(seconds)
        return httpx.Response(
            response.status_code, headers=response.headers, content=body, request=request
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def held_backend(server: SimServer, hold: Callable[[httpx.Request], float]) -> OpenAIBackend:
    """Backend ``b0`` (model ``m0``) on ``server``, through ``HoldReplies(hold)``."""
    return OpenAIBackend(
        OpenAIBackendConfig(name="b0", base_url=f"{server.url}/v1", models=["m0"]),
        transport=HoldReplies(hold),
    )


@pytest.mark.parametrize(
    ("rollouts", "options", "budget"),
    [
        # r0..r2 agree: the vote is decided and r3 is cancelled.
        (4, {"early_stop": True}, Budget()),
        (2, {}, Budget(max_wall_seconds=1.0)),
    ],
    ids=["early-stop", "wall-clock"],
)
async def test_a_reply_the_server_served_is_charged_when_its_rollout_is_cancelled(
    rollouts: int, options: dict[str, Any], budget: Budget
) -> None:
    last = f"-r{rollouts - 1}-0"  # the last rollout's first step

    def hold(request: httpx.Request) -> float:
        return math.inf if request.headers.get("x-request-id", "").endswith(last) else 0

    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer", tool_rounds=0)
    async with SimServer(sim) as server:
        backend = held_backend(server, hold)
        config = {"agents": {"a0": agent(0)}, "summarizer": "model", **options}
        async with (
            backend,
            Runtime(config, backends=[backend], tools=[Calculator()], prices=PRICES) as rt,
        ):
            with anyio.fail_after(30):
                result = await rt.run(
                    "What is 2 + 3?",
                    agent="a0",
                    scaling=ScalingSpec(rollouts=rollouts),
                    budget=budget,
                )
        counted = Counted.of(server)
    assert result.answer == "ANSWER: 5"
    # The held step was served (the server counted its tokens), so it is on
    # the run's cost like every other call the server answered.
    check_run("a cancelled rollout's served reply", budget, result, counted)


async def test_the_warm_up_counts_against_the_wall_clock_cap() -> None:
    # The warm-up takes 1 s (its reply is one token); a step of up to 256
    # tokens takes 1 s plus 256 x 8 ms: it outlives the cap either way.
    sim = SimServerConfig(model="m0", ttft_ms=1_000, token_ms=8, reply_tokens=256, tool_rounds=0)
    cap = 1.5
    budget = Budget(max_wall_seconds=cap)
    async with SimServer(sim) as server:
        config = runtime_config([server], warm_prefix=True)
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:
            started = time.perf_counter()
            with anyio.fail_after(30):
                result = await rt.run(
                    "What is 2 + 3?", agent="a0", scaling=ScalingSpec(rollouts=2), budget=budget
                )
            elapsed = time.perf_counter() - started
        counted = Counted.of(server)
    assert counted.completed >= 1  # the warm-up was served
    assert elapsed <= cap + WALL_SLACK_S, (elapsed, result.cost)
    check_run("warm-up and the wall clock", budget, result, counted)


async def test_a_prompt_longer_than_its_estimate_does_not_cross_the_token_cap() -> None:
    # The step's prompt as the ledger estimates it, plus its 8 reply tokens
    # and a little: the call is admitted, and the server must not then count
    # more than the cap.
    task, limits = "What is 2 + 3?", {"max_tokens_per_step": 8}
    instructions = agent(0).instructions
    estimate = estimate_request_tokens(
        [SystemMessage(content=instructions), UserMessage(content=task)],
        [Calculator().spec],
        CharEstimator(),
    )
    budget = Budget(max_tokens=estimate + 8 + 10)
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer", tool_rounds=0)
    async with SimServer(sim) as server:
        config = runtime_config([server])
        config["agents"] = {"a0": agent(0, **limits)}
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:
            result = await rt.run(task, agent="a0", budget=budget)
        counted = Counted.of(server)
    assert counted.completed >= 1  # the step was admitted
    check_run(f"one step under {budget.max_tokens} tokens", budget, result, counted)


async def test_aggregation_calls_stop_at_the_wall_clock_cap() -> None:
    # Rollouts answer at once; every aggregation call (no request id: the
    # judges) takes 3 s to come back, past the run's 1 s cap.
    def hold(request: httpx.Request) -> float:
        return 0 if "x-request-id" in request.headers else 3.0

    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer", tool_rounds=0)
    cap = 1.0
    budget = Budget(max_wall_seconds=cap)
    async with SimServer(sim) as server:
        backend = held_backend(server, hold)
        config = {"agents": {"a0": agent(0)}}
        async with (
            backend,
            Runtime(config, backends=[backend], tools=[Calculator()], prices=PRICES) as rt,
        ):
            started = time.perf_counter()
            with anyio.fail_after(30):
                result = await rt.run(
                    "What is 2 + 3?",
                    agent="a0",
                    scaling=ScalingSpec(rollouts=3, aggregate="best_of_n"),
                    budget=budget,
                )
            elapsed = time.perf_counter() - started
        counted = Counted.of(server)
    assert counted.completed > 3  # the judges were asked
    assert elapsed <= cap + WALL_SLACK_S, (elapsed, result.cost)
    check_run("judges past the wall-clock cap", budget, result, counted)
