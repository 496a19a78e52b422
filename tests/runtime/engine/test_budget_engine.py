"""The run's one ledger, checked where the calls land: at the sim-server.

Many runs of one ``Runtime`` at once (random aggregators, rollouts, caps,
model summaries, warm-up, reply lengths drawn per request), each run on its
own sim-server, so every request a run made is counted by the server that
served it:

- no run crosses a cap: tokens, calls and USD as reported, calls as its
  server saw them, USD recomputed from what its server counted; a run the
  wall clock stopped says so, naming its own cap;
- a run's reported cost is what its server counted (calls, prompt,
  completion and cached tokens, exactly) when no call was cancelled in
  flight; a call that was (early stop, the wall-clock cap) is charged as
  reserved (``runtime.budget``), so the report is then never less than
  what the server served, and counts every request the server saw;
- the issue's two cases: an 8-rollout RTV run under 15,000 tokens, an RTV
  tournament with ``v=64`` under 50 calls;
- the wall-clock cap holds for the warm-up and the aggregation's calls too
  (calls that would outlive it are cut: counted, not timed);
- a prompt longer than the ledger's estimate of it crosses no cap after the
  run's first call (later estimates are calibrated);
- a model's first call, cancelled, whose prompt was longer than its
  estimate is charged no less than the server served (up to the bound on
  its prompt the caller gave the ledger).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentrt import Runtime
from agentrt.agents import AgentConfig, AgentLimits, EventLog
from agentrt.protocols import (
    Budget,
    BudgetUpdated,
    Cost,
    RunFinished,
    RunResult,
    ScalingSpec,
    SystemMessage,
    Usage,
    UserMessage,
)
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.models._prompt_estimate import CharEstimator, estimate_request_tokens
from agentrt.runtime.models.http._http_client import make_transport
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator
from tests._support.backends import sim_backend

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
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
    abandoned_prompt: int = 0
    """The prompts of the requests whose client went away."""
    abandoned_completion: int = 0
    """The tokens generated for them before it did."""

    @classmethod
    async def of(cls, server: SimServer) -> Counted:
        """The counts once no request is in flight: a request whose client
        went away is counted ``abandoned`` when aiohttp has cancelled its
        handler, a moment after the connection closed."""
        for _ in range(1000):  # 5 s at most
            stats = server.stats()
            if not stats["in_flight"]:
                break
            await anyio.sleep(0.005)
        else:
            raise AssertionError(f"{stats['in_flight']} requests still in flight: {stats}")
        tokens = stats["tokens"]
        return cls(
            seen=stats["requests"].get(CHAT, 0),
            completed=stats["generations"]["completed"],
            abandoned=stats["generations"]["abandoned"],
            prompt=tokens["prompt"],
            completion=tokens["completion"],
            cached=tokens["cached"],
            abandoned_prompt=tokens["abandoned_prompt"],
            abandoned_completion=tokens["abandoned_completion"],
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


def cancelled_calls(log: EventLog, result: RunResult) -> int:
    """How many of the run's calls were cancelled in flight (and charged as
    reserved): the ``cancelled_calls`` of the run's last ``BudgetUpdated``,
    the ledger's final state, sent just before ``RunFinished``."""
    *_, last, finished = log.events
    assert isinstance(finished, RunFinished), finished
    assert isinstance(last, BudgetUpdated), last
    assert (reported(last.spent), last.spent.usd) == (reported(result.cost), result.cost.usd), (
        f"the last BudgetUpdated {last.spent} is not the run's cost {result.cost}"
    )
    return last.cancelled_calls


def check_run(what: str, budget: Budget, result: RunResult, counted: Counted, log: EventLog) -> int:
    """The run kept to ``budget``, and its cost accounts for what its server
    counted; returns how many calls were cancelled in flight."""
    cost = result.cost
    cancelled = cancelled_calls(log, result)
    where = f"{what}: reported {cost}, {cancelled} cancelled; the server counted {counted}"
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
    assert cost.wall_seconds > 0, where
    # The wall clock stops only a run with a wall-clock cap, and says which:
    # a rollout cut at the deadline, an aggregation cut (both name the cap),
    # a call the ledger refused.
    said = [*(m for s in result.summaries for m in s.failure_modes)]
    said += [result.rationale or "", result.error or ""]
    cut = [m for m in said if "wall-clock cap (" in m or "no answer within " in m]
    refused = [m for m in said if "max_wall_seconds" in m]
    if budget.max_wall_seconds is None:
        assert cut == refused == [], where
    else:
        cap = f"{budget.max_wall_seconds:g} s"
        assert all(cap in m for m in cut), (cut, where)
    calls, _, _, cached = reported(cost)
    served = (counted.completed, counted.prompt, counted.completion, counted.cached)
    if cancelled == 0:
        # Every request the server saw was served and is on the run's cost
        # with the usage the server reported, and nothing else.
        assert reported(cost) == served, where
        assert counted.seen == calls, where
        assert abs(Fraction(cost.usd) - counted.usd) < Fraction(1, 10**9), where
        return 0
    # A call cancelled in flight is charged as reserved, every other one
    # with the usage its server reported (the sim draws no faults: no call
    # fails, none is retried).  A cancelled call was served in full (the
    # client was cancelled reading the reply: ``completed``), left by its
    # client mid-generation (``abandoned``), or never reached the server
    # (cancelled before its request was read).  With s, a and u of each,
    # cancelled = s + a + u and abandoned = a, so
    #   calls = (completed - s) + cancelled = seen + u = completed + cancelled - s:
    # seen <= calls <= completed + cancelled, each bound met when u = 0
    # (every cancelled call reached the server) or s = 0 (none was served
    # in full); both happen here.
    assert counted.abandoned <= cancelled, where
    assert counted.seen <= calls <= counted.completed + cancelled, where
    # A cancelled call is charged what it consumed when its caller streamed
    # it (its prompt, estimated, and the tokens received: no more than the
    # server generated), else its reservation (n * max_tokens, no more than
    # a server writes), and never a cache discount for a reply nobody read;
    # every other call as its server reported it.
    assert cached <= counted.cached, where
    return cancelled


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
    max_examples=30,
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
    logs = [EventLog() for _ in plans]
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
                    f"What is {i} + {3 * i}?",
                    agent=f"a{i}",
                    scaling=scaling,
                    budget=plan.budget,
                    events=logs[i],
                )

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i, plan in enumerate(plans):
                        tg.start_soon(run, i, plan)
        for i, (plan, sim) in enumerate(zip(plans, sims, strict=True)):
            counted = await Counted.of(sim)
            check_run(f"run {i} {plan}", plan.budget, results[i], counted, logs[i])


# -- the cases -------------------------------------------------------------


async def rtv_of_8(config: dict[str, Any], v: int, budget: Budget, log: EventLog) -> RunResult:
    """The task by 8 rollouts of ``a0``, aggregated by rtv (g = 2, ``v``
    votes a pair) even though every rollout answers alike."""
    async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:
        options = {"g": 2, "v": v, "skip_agreeing": False}
        scaling = ScalingSpec(rollouts=8, aggregate="rtv", options=options)
        return await rt.run(
            "What is 2 + 3?", agent="a0", scaling=scaling, budget=budget, events=log
        )


async def test_an_8_rollout_rtv_run_under_15000_tokens_spends_no_more() -> None:
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, reply_tokens=20)
    sim = sim.model_copy(update={"reply_tokens_max": 200})
    budget = Budget(max_tokens=15_000)
    log = EventLog()
    async with SimServer(sim) as server:
        config = runtime_config([server], warm_prefix=True)
        config["agents"] = {"a0": agent(0, max_tokens_per_step=1024)}
        result = await rtv_of_8(config, 8, budget, log)
        counted = await Counted.of(server)
    check_run("rtv under 15,000 tokens", budget, result, counted, log)
    assert counted.prompt + counted.completion > 10_000  # the cap, not the task, ended it
    assert "stopped at the budget cap (max_tokens)" in result.rationale


async def test_an_rtv_tournament_with_v_64_makes_at_most_50_calls() -> None:
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer")
    budget = Budget(max_model_calls=50)
    log = EventLog()
    async with SimServer(sim) as server:
        result = await rtv_of_8(runtime_config([server]), 64, budget, log)
        counted = await Counted.of(server)
    check_run("rtv v=64 under 50 calls", budget, result, counted, log)
    assert counted.seen == 50  # level 1 alone asks for 4 * 64 judgements
    assert "stopped at the budget cap (max_model_calls)" in result.rationale
    assert result.answer == "5"


# -- calls cancelled in flight and the wall clock ------------------------------------


@dataclass(frozen=True)
class CutCall:
    """A reply the server served whose caller was cancelled while it was
    held: what the server counted for it, and the completion tokens its
    request allowed (``n * max_tokens``)."""

    served: Usage
    allowed: int


def reply_usage(body: bytes) -> Usage:
    """The usage a chat completion reports: a JSON body's, or the last one
    in an event stream."""
    if body.lstrip().startswith(b"{"):
        documents = [json.loads(body)]
    else:
        data = (line.removeprefix(b"data:").strip() for line in body.splitlines())
        documents = [json.loads(d) for d in data if d.startswith(b"{")]
    usage = [d["usage"] for d in documents if d.get("usage")][-1]
    return Usage(
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        cached_prompt_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
    )


class HoldReplies(httpx.AsyncBaseTransport):
    """Reads each reply in full (so the server has served and counted it),
    then holds it for ``hold(request)`` seconds (``math.inf``: until the
    caller is cancelled) before handing it over: a reply waiting in the
    socket while its client is busy, or a slow network.  ``cut``: the held
    replies whose caller was cancelled."""

    def __init__(self, hold: Callable[[httpx.Request], float]) -> None:
        self._inner = make_transport()
        self._hold = hold
        self.held: list[str] = []
        self.cut: list[CutCall] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        seconds = self._hold(request)
        if seconds > 0:
            self.held.append(request.headers.get("x-request-id", ""))
            try:
                await anyio.sleep(seconds)
            except anyio.get_cancelled_exc_class():
                sent = json.loads(request.content)
                allowed = sent.get("n", 1) * (
                    sent.get("max_completion_tokens") or sent["max_tokens"]
                )
                self.cut.append(CutCall(reply_usage(body), allowed))
                raise
        # A stream, not ``content=``: a streamed call reads it as one.
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(body),
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def held_backend(server: SimServer, transport: HoldReplies) -> OpenAIBackend:
    """Backend ``b0`` (model ``m0``) on ``server``, through ``transport``."""
    return sim_backend(server, "b0", transport=transport)


def check_cut_calls(
    what: str,
    result: RunResult,
    counted: Counted,
    cancelled: int,
    cut: Sequence[CutCall],
    *,
    streamed: bool,
) -> None:
    """The only calls cancelled in flight are the ``cut`` ones, each served
    in full and held before a byte reached the caller, and charged, when
    ``streamed``, what the caller received (no completion token) and its
    prompt, estimated from the calls before it (within 10% of the prompt
    served), else as reserved: its ``n * max_tokens`` completion tokens and
    its prompt estimate (no less than the prompt served); never cached
    tokens.  Every other call as the server reported it."""
    calls, prompt, completion, cached = reported(result.cost)
    served = Usage(
        prompt_tokens=sum(c.served.prompt_tokens for c in cut),
        completion_tokens=sum(c.served.completion_tokens for c in cut),
        cached_prompt_tokens=sum(c.served.cached_prompt_tokens for c in cut),
    )
    where = f"{what}: reported {result.cost}, the server counted {counted}, cut {cut}"
    assert cancelled == len(cut) >= 1, where
    assert calls == counted.seen == counted.completed, where  # every call was served
    charged = 0 if streamed else sum(c.allowed for c in cut)
    assert completion == counted.completion - served.completion_tokens + charged, where
    assert cached == counted.cached - served.cached_prompt_tokens, where
    cut_prompt = prompt - (counted.prompt - served.prompt_tokens)
    if streamed:
        assert abs(cut_prompt - served.prompt_tokens) <= served.prompt_tokens / 10, where
    else:
        # The cut calls' prompts are charged their estimates, which must cover them.
        assert cut_prompt >= served.prompt_tokens, where


@pytest.mark.parametrize(
    ("rollouts", "options", "budget"),
    [
        # r0..r2 agree: the vote is decided and r3 is cancelled.
        (4, {"early_stop": True}, Budget()),
        # r1 is held past the run's deadline.
        (2, {}, Budget(max_wall_seconds=1.0)),
    ],
    ids=["early-stop", "wall-clock"],
)
async def test_a_call_cancelled_in_flight_is_charged_what_it_consumed(
    rollouts: int, options: dict[str, Any], budget: Budget
) -> None:
    # The last rollout's first step is served, then held until the run
    # cancels it: its usage never reaches the ledger.  The run may stop its
    # rollouts, so they stream their calls and count what they receive:
    # the cut call is charged its prompt and nothing it never received.
    last = f"-r{rollouts - 1}-0"

    def hold(request: httpx.Request) -> float:
        return math.inf if request.headers.get("x-request-id", "").endswith(last) else 0

    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer", tool_rounds=0)
    transport = HoldReplies(hold)
    log = EventLog()
    async with SimServer(sim) as server:
        backend = held_backend(server, transport)
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
                    events=log,
                )
        counted = await Counted.of(server)
    assert result.answer == "5"
    assert len(transport.held) == 1, transport.held
    assert transport.held[0].endswith(last), transport.held
    cancelled = check_run("a call cancelled in flight", budget, result, counted, log)
    check_cut_calls(
        "a call cancelled in flight", result, counted, cancelled, transport.cut, streamed=True
    )


async def test_a_cancelled_call_longer_than_its_estimate_is_not_under_reported() -> None:
    # One step, its prompt longer than its estimate (the sim-server counts
    # each "(" as a token), served in full, then held past the deadline.
    task, step = "What is 2 + 3? " + "(" * 200, 64
    sim = SimServerConfig(
        model="m0", ttft_ms=0, token_ms=0, answer="text", reply_tokens=step, tool_rounds=0
    )
    budget = Budget(max_wall_seconds=0.2)
    transport = HoldReplies(lambda request: math.inf)
    log = EventLog()
    async with SimServer(sim) as server:
        backend = held_backend(server, transport)
        config = {"agents": {"a0": agent(0, max_tokens_per_step=step)}}
        async with (
            backend,
            Runtime(config, backends=[backend], tools=[Calculator()], prices=PRICES) as rt,
        ):
            with anyio.fail_after(30):
                result = await rt.run(task, agent="a0", budget=budget, events=log)
        counted = await Counted.of(server)
    cancelled = check_run("an underestimated call cancelled", budget, result, counted, log)
    check_cut_calls(
        "an underestimated call cancelled",
        result,
        counted,
        cancelled,
        transport.cut,
        streamed=False,
    )


async def test_the_warm_up_counts_against_the_wall_clock_cap() -> None:
    # The warm-up takes 1 s (its reply is one token); a step of 256 tokens
    # takes 1 s plus 255 x 4 ms, about 2 s: within the 2.5 s cap on its own,
    # past it after the warm-up.  The server's delays are floors (a loaded
    # machine only adds to them): the steps are cut only if the warm-up's
    # second counts, and they would finish if the cap started after it.
    sim = SimServerConfig(model="m0", ttft_ms=1_000, token_ms=4, reply_tokens=256, tool_rounds=0)
    cap = 2.5
    budget = Budget(max_wall_seconds=cap)
    log = EventLog()
    async with SimServer(sim) as server:
        config = runtime_config([server], warm_prefix=True)
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:
            with anyio.fail_after(30):
                result = await rt.run(
                    "What is 2 + 3?",
                    agent="a0",
                    scaling=ScalingSpec(rollouts=2),
                    budget=budget,
                    events=log,
                )
        counted = await Counted.of(server)
    cancelled = check_run("warm-up and the wall clock", budget, result, counted, log)
    # The warm-up was served; both first steps were sent after it and cut
    # by the deadline mid-generation, each charged what it consumed: its
    # prompt and the tokens received, no more than the server generated
    # (how many fewer depends on how far the client lagged the server).
    where = f"reported {result.cost}, {cancelled} cancelled; the server counted {counted}"
    assert (counted.completed, counted.abandoned, cancelled) == (1, 2, 2), where
    assert result.cost.model_calls == counted.seen == 3, where
    usage = result.cost.usage
    served = counted.completion + counted.abandoned_completion
    assert counted.completion < usage.completion_tokens <= served, where
    assert (
        abs(usage.prompt_tokens - counted.prompt - counted.abandoned_prompt)
        <= usage.prompt_tokens / 10
    )
    assert result.answer is None  # no rollout answered in time
    assert {m for s in result.summaries for m in s.failure_modes} == {f"no answer within {cap:g} s"}


async def test_a_prompt_longer_than_its_estimate_crosses_no_cap_after_the_first_call() -> None:
    # The sim-server counts each "(" as a token, the ledger's estimator a
    # third of one: every prompt of this task is longer than its estimate.
    task, step = "What is 2 + 3? " + "(" * 200, 64
    estimate = estimate_request_tokens(
        [SystemMessage(content=agent(0).instructions), UserMessage(content=task)],
        [Calculator().spec],
        CharEstimator(),
    )
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer", tool_rounds=2)
    async with SimServer(sim) as server:
        config = runtime_config([server])
        config["agents"] = {"a0": agent(0, max_tokens_per_step=step)}
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:

            async def run(budget: Budget) -> tuple[RunResult, Counted, EventLog]:
                server.engine.reset_stats()  # one run's requests at a time
                log = EventLog()
                result = await rt.run(task, agent="a0", budget=budget, events=log)
                return result, await Counted.of(server), log

            _, first, _ = await run(Budget(max_model_calls=1))
            assert first.prompt > estimate + 50, (first, estimate)
            _, whole, _ = await run(Budget())
            assert whole.seen == 4  # two tool rounds, then the answer
            # Every cap up to the whole run's tokens (and past them).
            for cap in range(0, whole.prompt + whole.completion + step, 11):
                budget = Budget(max_tokens=cap)
                result, counted, log = await run(budget)
                what = f"a cap of {cap} tokens"
                if cap >= first.prompt + step:
                    # The first call fits whatever it is; every later one
                    # is reserved on an estimate scaled by the first
                    # prompt's ratio to its estimate, so none crosses.
                    check_run(what, budget, result, counted, log)
                else:
                    # The first prompt is measured only once served: it
                    # may cross a cap it was admitted under, and then no
                    # call is admitted after it (the ledger is past its cap).
                    check_run(what, Budget(), result, counted, log)
                    crossed = counted.prompt + counted.completion > cap
                    assert not crossed or counted.seen == 1, (what, counted)


async def test_aggregation_calls_stop_at_the_wall_clock_cap() -> None:
    # Rollouts answer at once; no aggregation call (no request id: the
    # judges) ever comes back: only the run's 1 s cap ends the run.
    def hold(request: httpx.Request) -> float:
        return 0 if "x-request-id" in request.headers else math.inf

    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, answer="answer", tool_rounds=0)
    cap = 1.0
    budget = Budget(max_wall_seconds=cap)
    transport = HoldReplies(hold)
    log = EventLog()
    async with SimServer(sim) as server:
        backend = held_backend(server, transport)
        config = {"agents": {"a0": agent(0)}}
        async with (
            backend,
            Runtime(config, backends=[backend], tools=[Calculator()], prices=PRICES) as rt,
        ):
            with anyio.fail_after(30):  # a hang guard: without the cap, the judges hold it
                result = await rt.run(
                    "What is 2 + 3?",
                    agent="a0",
                    scaling=ScalingSpec(rollouts=3, aggregate="best_of_n"),
                    budget=budget,
                    events=log,
                )
        counted = await Counted.of(server)
    assert counted.completed > 3  # the judges were asked
    cancelled = check_run("judges past the wall-clock cap", budget, result, counted, log)
    # Every judge was cut (none ever comes back), and a majority vote over
    # the rollouts' answers decided instead.
    assert len(transport.cut) == len(transport.held), transport
    check_cut_calls(
        "judges past the wall-clock cap", result, counted, cancelled, transport.cut, streamed=False
    )
    assert result.answer == "5"
    assert result.rationale.startswith(
        f"the wall-clock cap ({cap:g} s) cut best_of_n; a majority vote decided"
    ), result.rationale


# -- the sim-server these checks rely on ---------------------------------------------


async def test_the_sim_server_writes_no_more_than_max_tokens_even_in_a_tool_call() -> None:
    # A cancelled call is charged n * max_tokens completion tokens: that is
    # the most a real server writes, a tool call cut short included.
    sim = SimServerConfig(model="m0", ttft_ms=0, token_ms=0, tool_rounds=1)
    tool = {"type": "function", "function": msgspec.to_builtins(Calculator().spec)}
    async with SimServer(sim) as server, httpx.AsyncClient(base_url=server.url) as client:
        replies = []
        for max_tokens in (1, 5, 1000):
            body = {
                "model": "m0",
                "messages": [{"role": "user", "content": "What is 2 + 3?"}],
                "tools": [tool],
                "max_tokens": max_tokens,
            }
            response = await client.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            replies.append(response.json())
    (cut1, cut5, whole) = replies
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["usage"]["completion_tokens"] > 5
    for reply, max_tokens in ((cut1, 1), (cut5, 5)):
        choice = reply["choices"][0]
        assert reply["usage"]["completion_tokens"] == max_tokens, reply
        assert choice["finish_reason"] == "length", reply
        assert not choice["message"].get("tool_calls"), reply
