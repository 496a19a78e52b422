"""Behaviour signals: computed per trajectory, emitted as events, read by the
router and by early stopping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentrt.agents import Agent, AgentConfig, EventEmitter, EventLog, SignalConfig, SignalTracker
from agentrt.protocols import (
    AssistantMessage,
    FunctionCall,
    SignalRaised,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from agentrt.runtime.budget._ledger import Headroom
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput


class Echo:
    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="lookup",
            parameters={"type": "object", "properties": {"key": {"type": "string"}}},
        )

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.of_text("the same page again")


def calling(name: str, arguments: str, call_id: str = "c") -> AssistantMessage:
    return AssistantMessage(
        tool_calls=[ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))]
    )


def result(content: str, *, error: bool = False, call_id: str = "c") -> ToolResult:
    return ToolResult(call_id=call_id, name="lookup", content=content, is_error=error)


@pytest.mark.anyio
async def test_a_loop_fires_a_signal_and_stops_the_rollout() -> None:
    backend = ScriptedBackend(
        [ScriptedToolCall("lookup", {"key": "k"})], on_exhausted="repeat_last"
    )
    log = EventLog()
    agent = Agent(AgentConfig(name="looper"), backends=[backend], tools=[Echo()], events=log)
    result = await agent.run("find k")

    assert result.status == "failed"
    assert result.trajectory.stop_reason is not None
    assert result.trajectory.stop_reason.startswith("signal: loop")
    assert len(result.trajectory.steps) == 3  # loop_repeats defaults to 3
    loop = [e for e in log.of_type(SignalRaised) if e.signal == "loop"]
    assert len(loop) == 1
    assert (loop[0].step, loop[0].value) == (2, 3.0)
    assert 'lookup({"key": "k"}) called 3 times with the same result' in loop[0].detail
    assert result.signals == log.of_type(SignalRaised)


class Suite:
    """A test suite that fails less on each run, then passes (for good)."""

    def __init__(self) -> None:
        self.runs = 0

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="run_tests", parameters={"type": "object", "properties": {}})

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.runs += 1
        failing = max(0, 4 - self.runs)
        return ToolOutput.of_text(f"{failing} failed" if failing else "all passed")


@pytest.mark.anyio
async def test_rerunning_tests_whose_results_change_is_not_stopped_as_a_loop() -> None:
    # Issue 10: the default stop_on ended an agent that re-ran its tests
    # between edits, although every run told it something new.
    backend = ScriptedBackend([ScriptedToolCall("run_tests", {})] * 4 + ["the tests pass now"])
    runner = Suite()
    log = EventLog()
    agent = Agent(AgentConfig(name="fixer"), backends=[backend], tools=[runner], events=log)
    fixed = await agent.run("make the tests pass")

    assert (fixed.status, fixed.answer) == ("finished", "the tests pass now")
    assert runner.runs == 4
    assert [e.signal for e in log.of_type(SignalRaised) if e.signal == "loop"] == []


@pytest.mark.anyio
async def test_give_up_is_detected_and_configurable() -> None:
    text = "I'm sorry, but I cannot complete this task with these tools."
    stopped = await Agent(AgentConfig(name="quitter"), backends=[ScriptedBackend([text])]).run(
        "impossible"
    )
    assert stopped.status == "failed"
    assert stopped.answer is None
    assert [s.signal for s in stopped.signals] == ["give_up"]
    assert "cannot complete" in stopped.signals[0].detail

    kept = await Agent(
        AgentConfig(name="quitter", stop_on=[]), backends=[ScriptedBackend([text])]
    ).run("impossible")
    assert (kept.status, kept.answer) == ("finished", text)
    assert [s.signal for s in kept.signals] == ["give_up"]


def test_stagnation_and_failure_rate_fire_once_when_crossed() -> None:
    tracker = SignalTracker(
        SignalConfig(stagnation_steps=2, failure_min_calls=3, failure_rate=0.3), max_steps=50
    )
    assert tracker.observe(0, calling("lookup", '{"key": "a"}'), [result("page")]) == []
    assert tracker.observe(1, calling("lookup", '{"key": "b"}'), [result(" page ")]) == []
    fired = tracker.observe(2, calling("lookup", '{"key": "c"}'), [result("page")])
    assert [f.signal for f in fired] == ["stagnation"]
    assert fired[0].detail == "no new tool result in 2 consecutive steps"
    # Still stagnating: active, but it does not fire again.
    assert tracker.observe(3, calling("lookup", '{"key": "d"}'), [result("page")]) == []
    assert "stagnation" in tracker.active
    assert tracker.routing_signals().repeated_action  # stuck: cascade escalates
    # New information clears it; failures then push the rate over 50%.
    tracker.observe(4, calling("lookup", '{"key": "e"}'), [result("fresh", error=True)])
    assert "stagnation" not in tracker.active
    fired = tracker.observe(5, calling("lookup", '{"key": "f"}'), [result("no", error=True)])
    assert [f.signal for f in fired] == ["tool_failure_rate"]
    assert fired[0].value == pytest.approx(2 / 6)
    assert tracker.routing_signals().last_tool_failed


def test_failure_rate_threshold() -> None:
    tracker = SignalTracker(SignalConfig(failure_min_calls=2, failure_rate=0.5), max_steps=50)
    assert tracker.observe(0, calling("lookup", "{}"), [result("x", error=True)]) == []
    fired = tracker.observe(1, calling("lookup", '{"k": 1}'), [result("y")])
    assert [(f.signal, f.value) for f in fired] == [("tool_failure_rate", 0.5)]
    assert fired[0].detail == "1 of 2 tool calls failed (50%)"


def test_loops_are_seen_through_key_order_interleaving_and_whitespace() -> None:
    tracker = SignalTracker(SignalConfig(loop_repeats=3, loop_window=5), max_steps=50)
    assert tracker.observe(0, calling("lookup", '{"a": 1, "b": 2}'), [result("page 1")]) == []
    assert tracker.observe(1, calling("lookup", '{"other": 1}'), [result("page 2")]) == []
    assert tracker.observe(2, calling("lookup", '{"b": 2,  "a": 1}'), [result("page  1")]) == []
    fired = tracker.observe(3, calling("lookup", '{"b":2,"a":1}'), [result("page 1\n")])
    assert [f.signal for f in fired] == ["loop"]
    assert fired[0].detail == (
        'lookup({"a": 1, "b": 2}) called 3 times with the same result in the last 4 steps'
    )


def test_a_repeated_call_whose_result_changes_is_not_a_loop() -> None:
    tracker = SignalTracker(SignalConfig(loop_repeats=3, loop_window=6), max_steps=50)
    tests = calling("run_tests", "{}")
    for step, output in enumerate(["3 failed", "2 failed", "1 failed", "all passed"]):
        assert tracker.observe(step, tests, [result(output)]) == []
    assert "loop" not in tracker.active
    # The same outcome again and again is a loop, whatever came before it.
    assert tracker.observe(4, tests, [result("all passed")]) == []
    fired = tracker.observe(5, tests, [result("all passed")])
    assert [(f.signal, f.value) for f in fired] == [("loop", 3.0)]


def test_a_failing_and_a_succeeding_result_with_the_same_text_differ() -> None:
    tracker = SignalTracker(SignalConfig(loop_repeats=2, loop_window=4), max_steps=50)
    assert tracker.observe(0, calling("lookup", "{}"), [result("timeout", error=True)]) == []
    assert tracker.observe(1, calling("lookup", "{}"), [result("timeout")]) == []
    fired = tracker.observe(2, calling("lookup", "{}"), [result("timeout")])
    assert [f.signal for f in fired] == ["loop"]


def test_parallel_calls_are_compared_with_their_own_results() -> None:
    tracker = SignalTracker(SignalConfig(loop_repeats=2, loop_window=4), max_steps=50)
    both = AssistantMessage(
        tool_calls=[
            ToolCall(id="a", function=FunctionCall(name="lookup", arguments='{"key": "a"}')),
            ToolCall(id="b", function=FunctionCall(name="lookup", arguments='{"key": "b"}')),
        ]
    )
    first = [result("alpha", call_id="a"), result("beta", call_id="b")]
    swapped = [result("beta", call_id="a"), result("alpha", call_id="b")]
    assert tracker.observe(0, both, first) == []
    # The same two texts, but each call got the other's: the results changed.
    assert tracker.observe(1, both, swapped) == []
    fired = tracker.observe(2, both, swapped)
    assert [f.signal for f in fired] == ["loop"]


def test_exhaustion_fires_on_steps_and_on_budget() -> None:
    steps = SignalTracker(SignalConfig(exhaustion_fraction=0.5), max_steps=4)
    assert steps.observe(0, AssistantMessage(content="thinking"), []) == []
    fired = steps.observe(1, AssistantMessage(content="still thinking"), [])
    assert [(f.signal, f.detail) for f in fired] == [("exhaustion", "2 of 4 steps used")]
    assert steps.exhausted(3, "max steps") == []  # already raised

    budget = SignalTracker(SignalConfig(budget_fraction_left=0.25), max_steps=100)
    assert budget.observe_budget(0, Headroom(fraction=0.5)) == []
    fired = budget.observe_budget(1, Headroom(fraction=0.2))
    assert [(f.signal, f.value) for f in fired] == [("exhaustion", 0.2)]


@pytest.mark.anyio
async def test_signals_are_computed_only_for_a_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody reads them (no stop rule, a fixed router, no sink of their
    events, the result's list off): no tracker is built.  Each reader on its
    own brings them back."""
    built: list[int] = []
    real_init = SignalTracker.__init__

    def counting(self: SignalTracker, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(SignalTracker, "__init__", counting)

    async def run(*, stop_on: bool, report: bool, sink: bool) -> tuple[int, list[str], list[str]]:
        backend = ScriptedBackend([ScriptedToolCall("lookup", {"key": "k"})] * 4 + ["done"])
        log = EventLog()
        events = EventEmitter(log, kinds=[SignalRaised]) if sink else None
        config = AgentConfig(name="quiet") if stop_on else AgentConfig(name="quiet", stop_on=[])
        agent = Agent(config, backends=[backend], tools=[Echo()], events=events)
        agent.report_signals = report
        built.clear()
        result = await agent.run("find k")
        emitted = [e.signal for e in log.of_type(SignalRaised)]
        return len(built), [e.signal for e in result.signals], emitted

    assert await run(stop_on=False, report=False, sink=False) == (0, [], [])
    trackers, listed, emitted = await run(stop_on=False, report=True, sink=False)
    assert (trackers, emitted) == (1, [])
    assert "loop" in listed
    trackers, listed, emitted = await run(stop_on=False, report=False, sink=True)
    assert trackers == 1
    assert "loop" in emitted
    # The default stop rules read them: the loop ends the rollout, as ever.
    trackers, listed, emitted = await run(stop_on=True, report=False, sink=False)
    assert (trackers, listed, emitted) == (1, ["loop"], [])
