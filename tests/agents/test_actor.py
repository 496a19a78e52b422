"""The agent as a supervised actor: prompt cancellation, tool crashes stay
data, loop bugs reach the supervisor."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from agentrt.agents import Agent, AgentConfig, EventLog, SignalTracker, spawn_agent
from agentrt.protocols import ErrorRaised, RolloutFinished, StepRecorded, ToolSpec
from agentrt.runtime.actors import ActorCrashed, ActorSystem
from agentrt.runtime.errors import ToolCrashed
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.base import ToolContext, ToolOutput

pytestmark = pytest.mark.anyio


class SleepyTool:
    """Sleeps 30 s; counts how many calls are running right now."""

    def __init__(self) -> None:
        self.running = 0
        self.started = anyio.Event()

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="sleep", description="sleeps for a long time")

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.running += 1
        self.started.set()
        try:
            await anyio.sleep(30)
        finally:
            self.running -= 1
        return ToolOutput.of_text("woke up")


class CrashingTool:
    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="explode", description="always raises")

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        raise RuntimeError("the tool has a bug")


async def test_cancelling_a_rollout_stops_it_and_its_tool_calls_promptly() -> None:
    tool = SleepyTool()
    backend = ScriptedBackend([[ScriptedToolCall("sleep"), ScriptedToolCall("sleep")]])
    log = EventLog()
    agent = Agent(AgentConfig(name="sleeper"), backends=[backend], tools=[tool], events=log)
    async with ActorSystem() as system:
        handle = await spawn_agent(system, agent)
        results = []

        async def ask() -> None:
            results.append(await handle.run("sleep twice", timeout=60))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(5):
                await tool.started.wait()
            await anyio.sleep(0.05)
            assert tool.running == 2
            cancelled_at = time.perf_counter()
            handle.cancel()
        elapsed = time.perf_counter() - cancelled_at

        assert elapsed < 1.0
        (result,) = results
        assert result.status == "cancelled"
        assert tool.running == 0
        assert backend.in_flight == 0
        assert handle.control.running is None
        finished = log.of_type(RolloutFinished)
        assert [e.status for e in finished] == ["cancelled"]
        # The interrupted step is recorded as such.
        (step,) = result.trajectory.steps
        assert step.reply is not None
        assert step.error == "cancelled"
        # The actor is still alive and serves the next rollout.
        second = await handle.run("again", timeout=5)
        assert second.status == "failed"  # the script ran out: a backend failure
        assert system.root.failures == ()


async def test_cancelling_the_caller_cancels_the_rollout() -> None:
    tool = SleepyTool()
    backend = ScriptedBackend([ScriptedToolCall("sleep")])
    agent = Agent(AgentConfig(name="sleeper"), backends=[backend], tools=[tool])
    async with ActorSystem() as system:
        handle = await spawn_agent(system, agent)
        started = time.perf_counter()
        with anyio.move_on_after(0.3):
            await handle.run("sleep", timeout=60)
        with anyio.fail_after(1.0):
            while tool.running or handle.control.running is not None:  # noqa: ASYNC110 - polled
                await anyio.sleep(0.01)
        assert time.perf_counter() - started < 1.3
        assert backend.in_flight == 0


async def test_a_crashing_tool_crashes_the_rollout_for_its_supervisor() -> None:
    """A tool that raises an unexpected exception has a bug: the step is not
    committed, the actor crashes and its supervisor restarts it (the engine
    then resumes the rollout from its committed steps)."""
    backend = ScriptedBackend([ScriptedToolCall("explode"), "gave the tool a rest"])
    log = EventLog()
    agent = Agent(
        AgentConfig(name="careful"), backends=[backend], tools=[CrashingTool()], events=log
    )
    async with ActorSystem() as system:
        handle = await spawn_agent(system, agent)
        with pytest.raises(ActorCrashed) as caught:
            await handle.run("explode it", timeout=5)
        assert isinstance(caught.value.cause, ToolCrashed)
        assert "RuntimeError: the tool has a bug" in str(caught.value.cause)
        with anyio.fail_after(2):
            while not system.root.failures:  # noqa: ASYNC110 - nothing to wait on
                await anyio.sleep(0.01)
        assert system.root.failures[0].action == "restart"
    reported = log.of_type(ErrorRaised)
    assert "tool 'explode'" in reported[0].where
    assert not reported[0].fatal
    assert reported[-1].fatal
    assert not log.of_type(StepRecorded)


async def test_a_bug_in_the_loop_reaches_the_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: SignalTracker, *args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in the signal code")

    monkeypatch.setattr(SignalTracker, "observe", broken)
    backend = ScriptedBackend(["hello"])
    log = EventLog()
    agent = Agent(AgentConfig(name="buggy"), backends=[backend], events=log)
    async with ActorSystem() as system:
        handle = await spawn_agent(system, agent)
        with pytest.raises(ActorCrashed) as caught:
            await handle.run("hi", timeout=5)
        assert isinstance(caught.value.cause, ZeroDivisionError)
        # The asker hears first; the supervisor once the incarnation has ended.
        with anyio.fail_after(2):
            while not system.root.failures:  # noqa: ASYNC110 - nothing to wait on
                await anyio.sleep(0.01)
        failures = system.root.failures
        assert len(failures) == 1
        assert isinstance(failures[0].error, ZeroDivisionError)
        assert failures[0].action == "restart"
    (error,) = log.of_type(ErrorRaised)
    assert error.fatal
    assert "ZeroDivisionError: a bug in the signal code" in error.message
    assert [e.status for e in log.of_type(RolloutFinished)] == ["failed"]
