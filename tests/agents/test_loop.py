"""The agent loop end to end with the scripted backend: tool rounds, bad
calls the model corrects, limits, budget, routing and recording."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

import anyio
import pytest

from agentrt.agents import Agent, AgentConfig, AgentLimits, EventLog, RolloutContext, stream_sink
from agentrt.protocols import (
    Budget,
    ErrorRaised,
    Event,
    ModelRequest,
    RolloutFinished,
    RolloutStarted,
    SignalRaised,
    StepRecorded,
    TokenLogprob,
    ToolCalled,
    ToolMessage,
    ToolSpec,
)
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.kernel._errors import (
    BackendUnavailable,
    BudgetExceeded,
    ConfigError,
    ToolCrashed,
    ToolError,
)
from agentrt.testing import ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools import Calculator, tool
from agentrt.tools._tool import Tool, ToolContext, ToolOutput
from tests._support.backends import ForwardingBackend

pytestmark = pytest.mark.anyio

Fn = Callable[[Mapping[str, Any]], Awaitable[str]]


class FnTool:
    """A tool around an async function, recording every call it gets."""

    def __init__(self, name: str, fn: Fn, **params: str) -> None:
        self._spec = ToolSpec(
            name=name,
            description=f"the {name} tool",
            parameters={
                "type": "object",
                "properties": {k: {"type": t} for k, t in params.items()},
                "required": list(params),
                "additionalProperties": False,
            },
        )
        self._fn = fn
        self.calls: list[dict[str, Any]] = []

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls.append(dict(arguments))
        return ToolOutput.of_text(await self._fn(arguments))


def search_tool(delay: float = 0.0) -> FnTool:
    async def search(args: Mapping[str, Any]) -> str:
        await anyio.sleep(delay)
        return f"results for {args['query']}"

    return FnTool("search", search, query="string")


def read_tool(delay: float = 0.0) -> FnTool:
    async def read(args: Mapping[str, Any]) -> str:
        await anyio.sleep(delay)
        return f"contents of {args['path']}"

    return FnTool("read_file", read, path="string")


def add_tool() -> FnTool:
    async def add(args: Mapping[str, Any]) -> str:
        return str(args["a"] + args["b"])

    return FnTool("add", add, a="integer", b="integer")


def make_agent(
    backend: ScriptedBackend, *tools: Tool, events: EventLog | None = None, **config: Any
) -> Agent:
    return Agent(
        AgentConfig(name="tester", **config), backends=[backend], tools=tools, events=events
    )


def tool_messages(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


async def test_a_task_with_parallel_tool_calls_end_to_end() -> None:
    backend = ScriptedBackend(
        [
            [
                ScriptedToolCall("search", {"query": "capital"}),
                ScriptedToolCall("read_file", {"path": "notes.txt"}),
            ],
            ScriptedToolCall("add", {"a": 1, "b": 2}),
            "The answer is 3",
        ]
    )
    # search waits for read_file to end, read_file for search to have begun:
    # only calls run concurrently get through (one after the other: a hang);
    # search ends last, and the results must still come in call order.
    search_started, read_done = anyio.Event(), anyio.Event()

    async def search_fn(args: Mapping[str, Any]) -> str:
        search_started.set()
        await read_done.wait()
        return f"results for {args['query']}"

    async def read_fn(args: Mapping[str, Any]) -> str:
        await search_started.wait()
        read_done.set()
        return f"contents of {args['path']}"

    search = FnTool("search", search_fn, query="string")
    read = FnTool("read_file", read_fn, path="string")
    add = add_tool()
    log = EventLog()
    agent = make_agent(backend, search, read, add, events=log)

    with anyio.fail_after(30):  # a hang guard: calls run one after the other never meet
        result = await agent.run("What is 1 + 2?", RolloutContext.new(run_id="run-1"))

    traj = result.trajectory
    assert (traj.status, traj.answer, traj.stop_reason) == (
        "finished",
        "The answer is 3",
        "final answer",
    )
    assert len(traj.steps) == 3
    first = traj.steps[0]
    assert [r.name for r in first.tool_results] == ["search", "read_file"]
    assert [r.content for r in first.tool_results] == [
        "results for capital",
        "contents of notes.txt",
    ]
    # The step is timed around its calls (the same clock): it covers each one.
    assert all(r.duration_s > 0 for r in first.tool_results)
    assert first.duration_s >= max(r.duration_s for r in first.tool_results)
    assert search.calls == [{"query": "capital"}]
    assert add.calls == [{"a": 1, "b": 2}]
    # The model saw both results, answering its calls in order.
    second = backend.requests[1]
    calls = first.reply.message.tool_calls if first.reply else []
    assert [m.tool_call_id for m in tool_messages(second)] == [c.id for c in calls]
    # Every step says which model served it and why.
    for step in traj.steps:
        assert step.routing is not None
        assert step.routing.model == "scripted"
        assert "single-model" in step.routing.reason
    # Cost is what the backend reported, summed.
    reported = sum(s.reply.usage.total_tokens for s in traj.steps if s.reply)
    assert traj.cost.usage.total_tokens == reported > 0
    assert traj.cost.model_calls == 3
    # Events: started, per-call, per-step, finished; seq strictly increasing.
    events = log.events
    assert isinstance(events[0], RolloutStarted)
    assert isinstance(events[-1], RolloutFinished)
    assert events[-1].status == "finished"
    assert len(log.of_type(StepRecorded)) == 3
    assert [e.tool for e in log.of_type(ToolCalled)] == ["search", "read_file", "add"]
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert all(e.run_id == "run-1" for e in events)


async def test_malformed_json_goes_back_to_the_model_which_corrects_it() -> None:
    backend = ScriptedBackend(
        [
            ScriptedToolCall("add", '{"a": 1 "b": 2}'),
            ScriptedToolCall("add", {"a": 1, "b": 2}),
            "3",
        ]
    )
    add = add_tool()
    result = await make_agent(backend, add).run("1+2?")

    bad = result.trajectory.steps[0].tool_results[0]
    assert bad.is_error
    assert "arguments for tool 'add' are not valid JSON: Expecting ',' delimiter at char 8" in (
        bad.content
    )
    assert add.calls == [{"a": 1, "b": 2}]  # never called with {} or a guess
    assert tool_messages(backend.requests[1])[-1].content == bad.content
    assert (result.status, result.answer) == ("finished", "3")


async def test_an_unknown_tool_is_named_with_the_available_ones() -> None:
    backend = ScriptedBackend(
        [
            ScriptedToolCall("serch", {"query": "x"}),
            ScriptedToolCall("search", {"query": "x"}),
            "done",
        ]
    )
    search = search_tool()
    result = await make_agent(backend, search, read_tool()).run("find x")

    error = result.trajectory.steps[0].tool_results[0]
    assert error.is_error
    assert (
        "unknown tool 'serch'; available tools: read_file, search (did you mean 'search'?)"
        in error.content
    )
    assert search.calls == [{"query": "x"}]
    assert result.status == "finished"


async def test_arguments_failing_the_schema_are_explained() -> None:
    backend = ScriptedBackend(
        [
            [
                ScriptedToolCall("read_file", {}),
                ScriptedToolCall("read_file", {"path": 3, "mode": "r"}),
            ],
            ScriptedToolCall("read_file", {"path": "a.txt"}),
            "ok",
        ]
    )
    read = read_tool()
    result = await make_agent(backend, read).run("read a.txt")

    missing, wrong = result.trajectory.steps[0].tool_results
    assert missing.is_error
    assert missing.content == (
        "error: Invalid arguments for tool 'read_file':\n"
        "- path: missing required argument\n"
        "Fix the arguments and call the tool again."
    )
    assert wrong.is_error
    assert "- path: expected string, got integer 3" in wrong.content
    assert "- mode: unexpected argument (expected one of: path)" in wrong.content
    assert read.calls == [{"path": "a.txt"}]
    assert result.status == "finished"


def _sleeps_until_cut(cut: anyio.Event) -> Fn:
    """A tool body that never answers: cancelled at its deadline, it sets ``cut``."""

    async def sleeping(args: Mapping[str, Any]) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            cut.set()
        return "late"

    return sleeping


async def test_a_tool_error_and_a_timeout_are_messages_for_the_model() -> None:
    async def failing(args: Mapping[str, Any]) -> str:
        raise ToolError("disk on fire")

    cut = anyio.Event()
    sleeping = _sleeps_until_cut(cut)

    backend = ScriptedBackend([[ScriptedToolCall("fail"), ScriptedToolCall("sleep")], "recovered"])
    tools = [FnTool("fail", failing), FnTool("sleep", sleeping)]
    agent = make_agent(backend, *tools, limits=AgentLimits(tool_timeout_s=0.2))
    with anyio.fail_after(30):  # a hang guard: only the tool's deadline ends the call
        result = await agent.run("t")

    assert cut.is_set()
    texts = [r.content for r in result.trajectory.steps[0].tool_results]
    assert texts == [
        "error: tool 'fail' failed: disk on fire",
        "error: tool 'sleep' timed out after 0.2 s",
    ]
    assert (result.status, result.answer) == ("finished", "recovered")


async def test_a_lone_call_times_out_and_a_tools_own_timeout_error_is_its_bug() -> None:
    """The deadline is the call's own: a lone call past it is a message for
    the model; a ``TimeoutError`` the tool raises itself (its own deadline
    inside, from anyio or asyncio) is a crash like any other exception."""

    cut = anyio.Event()
    sleeping = _sleeps_until_cut(cut)

    async def own_deadline(args: Mapping[str, Any]) -> str:
        with anyio.fail_after(0.01):
            await anyio.sleep(10)
        return "never"

    backend = ScriptedBackend([ScriptedToolCall("sleep"), "recovered"])
    agent = make_agent(backend, FnTool("sleep", sleeping), limits=AgentLimits(tool_timeout_s=0.2))
    with anyio.fail_after(30):  # a hang guard: only the call's deadline ends it
        result = await agent.run("t")
    assert cut.is_set()
    assert [r.content for r in result.trajectory.steps[0].tool_results] == [
        "error: tool 'sleep' timed out after 0.2 s"
    ]
    assert (result.status, result.answer) == ("finished", "recovered")

    backend = ScriptedBackend([ScriptedToolCall("own"), "never asked"])
    agent = make_agent(backend, FnTool("own", own_deadline), limits=AgentLimits(tool_timeout_s=5))
    with pytest.raises(ToolCrashed, match="TimeoutError"):
        await agent.run("t")


async def test_a_tool_that_raises_unexpectedly_crashes_the_rollout() -> None:
    """A bug, not a tool error: the rollout crashes (its supervisor restarts
    it from its committed steps) and the model hears nothing of it."""

    async def crashing(args: Mapping[str, Any]) -> str:
        raise ValueError("kaput")

    backend = ScriptedBackend([ScriptedToolCall("crash"), "never asked"])
    with pytest.raises(ToolCrashed, match="ValueError: kaput"):
        await make_agent(backend, FnTool("crash", crashing)).run("t")
    assert len(backend.requests) == 1


async def test_the_step_limit_ends_the_rollout_as_exhausted() -> None:
    def script(request: ModelRequest) -> ScriptedToolCall:
        return ScriptedToolCall("search", {"query": f"q{len(request.messages)}"})

    backend = ScriptedBackend(script)
    log = EventLog()
    agent = make_agent(backend, search_tool(), events=log, limits=AgentLimits(max_steps=3))
    result = await agent.run("never ends")

    assert result.status == "exhausted"
    assert result.trajectory.stop_reason == "max steps (3) reached"
    assert len(result.trajectory.steps) == len(backend.requests) == 3
    assert "exhaustion" in [s.signal for s in log.of_type(SignalRaised)]


async def test_a_spent_budget_ends_the_rollout_as_exhausted() -> None:
    backend = ScriptedBackend([ScriptedToolCall("search", {"query": "x"})], on_exhausted="cycle")
    ledger = BudgetLedger("run", Budget(max_model_calls=2))
    agent = Agent(
        AgentConfig(name="frugal", stop_on=[]),
        backends=[backend],
        tools=[search_tool()],
        ledger=ledger,
    )
    result = await agent.run("search forever")

    assert result.status == "exhausted"
    assert result.trajectory.stop_reason is not None
    assert result.trajectory.stop_reason.startswith("budget:")
    assert "max_model_calls" in result.trajectory.stop_reason
    assert len(backend.requests) == 2
    assert ledger.snapshot().spent.model_calls == 2
    assert ledger.snapshot().in_flight == 0


async def test_the_rollout_token_limit_ends_the_rollout() -> None:
    backend = ScriptedBackend([ScriptedToolCall("search", {"query": "x"})], on_exhausted="cycle")
    agent = make_agent(
        backend, search_tool(), stop_on=[], limits=AgentLimits(max_rollout_tokens=50)
    )
    result = await agent.run("search")
    used = result.trajectory.cost.usage.total_tokens
    assert result.status == "exhausted"
    assert result.trajectory.stop_reason == f"token limit: {used:,} of 50 tokens used"
    assert used >= 50


async def test_cascade_routing_escalates_after_a_failed_tool_call() -> None:
    small = ScriptedBackend([ScriptedToolCall("read_file", {})], name="small", models=["small"])
    large = ScriptedBackend(
        [ScriptedToolCall("read_file", {"path": "a"}), "done"], name="large", models=["large"]
    )
    prices = PriceTable(
        models={
            "small": ModelPrice(prompt_usd_per_mtok=Decimal(1), completion_usd_per_mtok=Decimal(2)),
            "large": ModelPrice(
                prompt_usd_per_mtok=Decimal(10), completion_usd_per_mtok=Decimal(20)
            ),
        }
    )
    ledger = BudgetLedger("run", Budget(max_usd=1.0), prices)
    config = AgentConfig(
        name="cascader",
        routing={
            "policy": "cascade",
            "tiers": [{"name": "small", "model": "small"}, {"name": "large", "model": "large"}],
            "escalate_on": ["tool_failed"],
        },
    )
    agent = Agent(config, backends=[small, large], tools=[read_tool()], ledger=ledger)
    result = await agent.run("read a")

    decisions = [s.routing for s in result.trajectory.steps]
    assert [d.tier for d in decisions if d] == ["small", "large", "large"]
    first, second, _ = decisions
    assert first is not None
    assert second is not None
    assert first.policy == second.policy == "cascade"
    assert "started on small" in first.reason
    assert "escalated from small to large at step 1" in second.reason
    assert "tool call failed at step 0" in second.reason
    assert second.budget_left_usd is not None
    assert len(small.requests) == 1
    assert len(large.requests) == 2
    assert result.trajectory.cost.usd == pytest.approx(float(ledger.spent_usd))
    assert result.trajectory.cost.usd > 0


async def test_cascade_escalates_on_a_low_confidence_reply() -> None:
    unsure = ScriptedReply(
        content="maybe",
        tool_calls=[ScriptedToolCall("search", {"query": "q"})],
        logprobs=[TokenLogprob(token="maybe", logprob=-3.0)],
    )
    small = ScriptedBackend([unsure], name="small", models=["small"])
    large = ScriptedBackend(["sure"], name="large", models=["large"])
    config = AgentConfig(
        name="cautious",
        logprobs=True,
        routing={
            "policy": "cascade",
            "tiers": [{"name": "small", "model": "small"}, {"name": "large", "model": "large"}],
            "escalate_on": ["low_confidence"],
        },
    )
    agent = Agent(config, backends=[small, large], tools=[search_tool()])
    result = await agent.run("q?")

    assert small.requests[0].logprobs
    second = result.trajectory.steps[1].routing
    assert second is not None
    assert second.tier == "large"
    assert "low confidence at step 0 (mean logprob -3.00" in second.reason
    assert result.answer == "sure"


async def test_the_finish_tool_ends_the_rollout_with_its_answer() -> None:
    backend = ScriptedBackend(
        [
            ScriptedToolCall("final_answer", {"reply": "42"}),
            ScriptedToolCall("final_answer", {"answer": "42"}),
        ]
    )
    agent = make_agent(backend, search_tool(), finish_tool="final_answer")
    result = await agent.run("6*7?")

    assert [t.name for t in backend.requests[0].tools] == ["final_answer", "search"]
    rejected = result.trajectory.steps[0].tool_results[0].content
    assert "- answer: missing required argument" in rejected
    assert "- reply: unexpected argument" in rejected
    assert (result.status, result.answer) == ("finished", "42")
    assert result.trajectory.stop_reason == "final answer (final_answer)"


async def test_a_failing_backend_fails_the_rollout_not_the_caller() -> None:
    backend = ScriptedBackend([BackendUnavailable("503 from upstream", backend="scripted")])
    log = EventLog()
    result = await make_agent(backend, events=log).run("t")

    assert result.status == "failed"
    assert result.trajectory.stop_reason is not None
    assert "BackendUnavailable" in result.trajectory.stop_reason
    (step,) = result.trajectory.steps
    assert step.reply is None
    assert step.error is not None
    assert "503 from upstream" in step.error
    (error,) = log.of_type(ErrorRaised)
    assert not error.fatal
    assert "step 0" in error.where


def test_configuration_mistakes_are_config_errors() -> None:
    backend = ScriptedBackend(["x"])
    with pytest.raises(ConfigError, match=r"unknown tools \['grep'\]; available: search"):
        Agent(AgentConfig(name="a", tools=["grep"]), backends=[backend], tools=[search_tool()])
    with pytest.raises(ConfigError, match="'gpt-9', which no backend serves"):
        Agent(AgentConfig(name="a", model="gpt-9"), backends=[backend])
    with pytest.raises(ConfigError, match="neither `model` nor `routing`"):
        Agent(AgentConfig(name="a"), backends=[backend, ScriptedBackend(["y"], name="other")])
    with pytest.raises(ConfigError, match="tool 'search': the name is already registered"):
        Agent(AgentConfig(name="a"), backends=[backend], tools=[search_tool(), search_tool()])


async def test_function_tools_and_built_ins_plug_in() -> None:
    @tool
    async def capital(country: str) -> str:
        """The capital city of a country."""
        return {"france": "Paris"}.get(country.lower(), "unknown")

    backend = ScriptedBackend(
        [
            [
                ScriptedToolCall("capital", {"country": "France"}),
                ScriptedToolCall("calculator", {"expression": "6 * 7"}),
            ],
            "Paris, 42",
        ]
    )
    result = await make_agent(backend, capital, Calculator()).run("capital of France; 6*7")

    assert [r.content for r in result.trajectory.steps[0].tool_results] == ["Paris", "42"]
    assert (result.status, result.answer) == ("finished", "Paris, 42")


async def test_events_flow_through_a_bounded_stream() -> None:
    send, receive = anyio.create_memory_object_stream[Event](1)
    backend = ScriptedBackend([ScriptedToolCall("search", {"query": "q"}), "found"])
    agent = make_agent(backend, search_tool())
    agent.emitter.sink = stream_sink(send)
    seen: list[Event] = []

    async def consume() -> None:
        async with receive:
            async for event in receive:
                seen.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        async with send:
            result = await agent.run("q")

    assert result.status == "finished"
    assert [type(e).__name__ for e in seen] == [
        "RolloutStarted",
        "ToolCalled",
        "StepRecorded",
        "StepRecorded",
        "RolloutFinished",
    ]


async def test_a_tool_that_finds_the_budget_spent_ends_the_rollout() -> None:
    async def delegate(args: Mapping[str, Any]) -> str:
        raise BudgetExceeded("budget 'run': the max_usd cap would be crossed", limit="max_usd")

    backend = ScriptedBackend([ScriptedToolCall("delegate"), "never reached"])
    result = await make_agent(backend, FnTool("delegate", delegate)).run("t")

    assert result.status == "exhausted"
    assert result.trajectory.stop_reason == (
        "budget: budget 'run': the max_usd cap would be crossed"
    )
    (error,) = result.trajectory.steps[0].tool_results
    assert error.is_error
    assert "the budget is spent" in error.content
    assert len(backend.requests) == 1


async def test_a_single_tool_call_runs_in_the_rollouts_own_task() -> None:
    # No task group (and no task) for one call; several still run concurrently.
    tasks: list[int] = []

    @tool
    async def where() -> str:
        """Which task runs the call."""
        tasks.append(anyio.get_current_task().id)
        return "here"

    backend = ScriptedBackend([ScriptedToolCall("where", {}), "done"])
    agent = make_agent(backend, where)
    rollout_task: list[int] = []

    async def run() -> None:
        rollout_task.append(anyio.get_current_task().id)
        await agent.run("where")

    await run()
    assert tasks == rollout_task

    tasks.clear()
    backend = ScriptedBackend(
        [[ScriptedToolCall("where", {}), ScriptedToolCall("where", {})], "ok"]
    )
    await make_agent(backend, where).run("where twice")
    assert len(tasks) == 2
    assert rollout_task[0] not in tasks


async def test_a_function_tools_arguments_are_checked_by_the_function_tool_only() -> None:
    @tool
    async def double(n: int) -> int:
        """Twice n."""
        return 2 * n

    backend = ScriptedBackend(
        [ScriptedToolCall("double", {"n": "many"}), ScriptedToolCall("double", {"n": 4}), "8"]
    )
    result = await make_agent(backend, double).run("double 4")

    wrong = result.trajectory.steps[0].tool_results[0]
    assert wrong.is_error
    assert wrong.content.startswith("error: Invalid arguments for tool 'double':\n- n: ")
    assert "'many'" in wrong.content  # pydantic's message, per argument
    assert result.trajectory.steps[1].tool_results[0].content == "8"


class DeadlineBackend(ForwardingBackend[ScriptedBackend]):
    """A scripted backend that says it bounds its own calls, as
    ``OpenAIBackend`` does (``call_deadline_s``)."""

    call_deadline_s = 0.05


async def test_a_backend_that_bounds_its_calls_is_not_timed_twice() -> None:
    limits = AgentLimits(model_timeout_s=0.05)
    slow = ScriptedBackend(["late"], latency_s=5.0)
    result = await make_agent(slow, limits=limits).run("t")
    assert result.trajectory.steps[0].error == "no reply within 0.05 s"  # the loop's timer

    # A backend whose own deadline is within the loop's: only the backend's
    # timer runs (here it never fires: the reply comes after 0.2 s).
    bounded = DeadlineBackend(ScriptedBackend(["in time"], latency_s=0.2), opens_inner=False)
    agent = Agent(AgentConfig(name="tester", limits=limits), backends=[bounded])
    result = await agent.run("t")
    assert (result.status, result.answer) == ("finished", "in time")


async def test_events_no_sink_takes_are_not_built() -> None:
    built: list[str] = []
    log = EventLog()

    async def counting(event: Event) -> None:
        built.append(type(event).__name__)
        await log(event)

    backend = ScriptedBackend([ScriptedToolCall("add", {"a": 1, "b": 2}), "3"])
    agent = make_agent(backend, add_tool())
    agent.emitter.sink = counting
    agent.emitter.kinds = frozenset({StepRecorded})
    assert agent.emitter.wants(StepRecorded)
    assert not agent.emitter.wants(ToolCalled)
    result = await agent.run("1 + 2")

    assert result.answer == "3"
    assert set(built) == {"StepRecorded"}
    assert len(log.of_type(StepRecorded)) == 2
    # An event emitted but not delivered still takes its number (RolloutStarted:
    # 1); the ToolCalled events were never built, so they take none.
    assert [e.seq for e in log.of_type(StepRecorded)] == [2, 3]
