"""A run's rollouts as supervised actors, through the public API: cancelling
a run stops its rollouts and their tool calls at once; a rollout that
crashes (a bug) is restarted from its committed steps, and past its restart
intensity it is recorded failed while the run goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import anyio
import msgspec
import pytest

from agentrt import Runtime
from agentrt.agents import EventLog, SignalTracker
from agentrt.protocols import (
    Budget,
    ErrorRaised,
    Event,
    ModelRequest,
    RolloutFinished,
    RolloutRestarted,
    RolloutStarted,
    RunFinished,
    ScalingSpec,
    StepRecorded,
    ToolMessage,
    ToolSpec,
)
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


class SleepyTool:
    """Sleeps 30 s; counts the calls running right now."""

    def __init__(self) -> None:
        self.running = 0

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="sleep", description="sleeps for a long time")

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.running += 1
        try:
            await anyio.sleep(30)
        finally:
            self.running -= 1
        return ToolOutput.of_text("woke up")


class NoteTool:
    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="note", description="takes a note")

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.of_text("noted")


class FlakyTool:
    """Raises an unexpected exception on the calls ``crashes`` picks."""

    def __init__(self, crashes: Any) -> None:
        self.crashes = crashes
        self.calls = 0

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="flaky", description="sometimes has a bug")

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls += 1
        if self.crashes(self.calls, context):
            raise RuntimeError("the tool has a bug")
        return ToolOutput.of_text("fine")


def sleep_twice(request: ModelRequest) -> ReplySpec:
    """Two sleeping calls at once; answers a task that says "answer now"."""
    if request.messages[1].content == "answer now":
        return "done"
    return [ScriptedToolCall("sleep"), ScriptedToolCall("sleep")]


def tool_turns(request: ModelRequest) -> int:
    return sum(isinstance(m, ToolMessage) for m in request.messages)


async def wait_until_running(tool: SleepyTool, calls: int) -> None:
    with anyio.fail_after(5):
        while tool.running < calls:  # noqa: ASYNC110 - the tool has no event to wait on
            await anyio.sleep(0.01)


def tasks_now() -> set[asyncio.Task[Any]]:
    """Every task of the loop but the test's own."""
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def settled(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """The tasks that exist now and did not before (given a moment to end)."""
    with anyio.move_on_after(1):
        while tasks_now() - before:  # noqa: ASYNC110 - polled: no event says "all ended"
            await anyio.sleep(0.01)
    return tasks_now() - before


# -- cancellation ---------------------------------------------------------------


async def test_cancelling_the_caller_stops_the_rollouts_and_their_tool_calls() -> None:
    tool = SleepyTool()
    backend = ScriptedBackend(sleep_twice)
    log = EventLog()
    async with Runtime(backends=[backend], tools=[tool]) as rt:
        before = tasks_now()
        with anyio.fail_after(5):  # the tools sleep 30 s: cancelling does not wait for them
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await rt.run("sleep", scaling=ScalingSpec(rollouts=2), events=log)
                    pytest.fail("the run was cancelled; it cannot return")

                tg.start_soon(run)
                await wait_until_running(tool, 4)  # two rollouts, two calls each
                tg.cancel_scope.cancel()
        assert tool.running == 0
        assert backend.in_flight == 0
        assert await settled(before) == set()
    finished = log.of_type(RolloutFinished)
    assert len({e.rollout_id for e in log.of_type(RolloutStarted)}) == 2
    assert [e.status for e in finished] == ["cancelled", "cancelled"]
    # The interrupted steps were never committed.
    assert not log.of_type(StepRecorded)
    assert not log.of_type(RunFinished)


async def test_leaving_the_stream_early_cancels_the_run() -> None:
    tool = SleepyTool()
    backend = ScriptedBackend(sleep_twice)
    async with Runtime(backends=[backend], tools=[tool]) as rt:
        before = tasks_now()
        seen: list[Event] = []
        with anyio.fail_after(5):
            async with rt.stream("sleep", scaling=ScalingSpec(rollouts=2)) as events:
                async for event in events:
                    seen.append(event)
                    if len({e.rollout_id for e in seen if isinstance(e, RolloutStarted)}) == 2:
                        break
                await wait_until_running(tool, 4)
        assert tool.running == 0
        assert backend.in_flight == 0
        assert await settled(before) == set()
        # The Runtime is unharmed: the next run works.
        result = await rt.run("answer now")
    assert (result.status, result.answer) == ("succeeded", "done")


async def test_the_runs_wall_clock_cap_stops_its_tool_calls() -> None:
    tool = SleepyTool()
    backend = ScriptedBackend(sleep_twice)
    log = EventLog()
    async with Runtime(backends=[backend], tools=[tool]) as rt:
        with anyio.fail_after(5):
            result = await rt.run(
                "sleep",
                scaling=ScalingSpec(rollouts=2),
                budget=Budget(max_wall_seconds=0.3),
                events=log,
            )
    assert tool.running == 0
    assert backend.in_flight == 0
    assert (result.status, result.answer) == ("failed", None)
    assert [e.status for e in log.of_type(RolloutFinished)] == ["cancelled"] * 2
    (finished,) = log.of_type(RunFinished)
    assert finished.status == "failed"


# -- crashes ----------------------------------------------------------------------


@pytest.mark.parametrize("restarts", [0, 2])
async def test_a_bug_in_the_loop_is_restarted_then_recorded_failed(
    monkeypatch: pytest.MonkeyPatch, restarts: int
) -> None:
    def broken(self: SignalTracker, *args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in the signal code")

    monkeypatch.setattr(SignalTracker, "observe", broken)
    backend = ScriptedBackend(lambda request: "hello")
    log = EventLog()
    async with Runtime({"rollout_restarts": restarts}, backends=[backend]) as rt:
        with anyio.fail_after(10):
            result = await rt.run("hi", events=log)

    # Every incarnation crashed; its supervisor restarted it `restarts` times.
    restarted = log.of_type(RolloutRestarted)
    assert [e.incarnation for e in restarted] == list(range(1, restarts + 1))
    (rollout_id,) = {e.rollout_id for e in log.of_type(RolloutStarted)}
    assert {e.rollout_id for e in restarted} <= {rollout_id}
    for event in restarted:
        assert "ZeroDivisionError: a bug in the signal code" in event.error
        # The first incarnation committed its step before the bug hit.
        assert event.resumed_steps == 1
        wire = msgspec.json.encode(event)
        assert msgspec.json.decode(wire, type=Event) == event
    assert len(backend.requests) == 1  # the committed step is never asked for again
    errors = log.of_type(ErrorRaised)
    assert errors[0].fatal
    assert "ZeroDivisionError: a bug in the signal code" in errors[0].message
    gave_up = [e for e in errors if e.where == "rollout 0"]
    assert len(gave_up) == 1
    assert f"crashed {restarts + 1} times" in gave_up[0].message
    # The run still finished, failed: no rollout answered.
    assert (result.status, result.answer) == ("failed", None)
    (summary,) = result.summaries
    (why,) = summary.failure_modes
    assert "ZeroDivisionError" in why
    assert log.of_type(RunFinished)[-1].status == "failed"


async def test_a_tool_crash_resumes_the_rollout_from_its_committed_steps() -> None:
    turns: list[ReplySpec] = [ScriptedToolCall("note"), ScriptedToolCall("flaky"), "done"]

    def script(request: ModelRequest) -> ReplySpec:
        return turns[tool_turns(request)]

    backend = ScriptedBackend(script)
    flaky = FlakyTool(lambda calls, context: calls == 1)
    log = EventLog()
    async with Runtime(backends=[backend], tools=[NoteTool(), flaky]) as rt:
        with anyio.fail_after(10):
            result = await rt.run("take notes", events=log)

    assert (result.status, result.answer) == ("succeeded", "done")
    (restarted,) = log.of_type(RolloutRestarted)
    assert restarted.incarnation == 1
    assert restarted.resumed_steps == 1
    assert "ToolCrashed" in restarted.error
    assert "RuntimeError: the tool has a bug" in restarted.error
    # Step 0 was committed before the crash and is not asked for again; the
    # crashed step 1 is (it was never committed).
    steps = [(request.request_id or "").rsplit("-", 1)[1] for request in backend.requests]
    assert steps == ["0", "1", "1", "2"]
    assert [e.step.index for e in log.of_type(StepRecorded)] == [0, 1, 2]
    assert flaky.calls == 2
    # Every request the backend saw is in the cost, the redone one included.
    assert result.cost.model_calls == len(backend.requests) == 4
    assert [e.status for e in log.of_type(RolloutFinished)] == ["failed", "finished"]


async def test_a_rollout_crashing_past_its_intensity_is_left_out_of_the_aggregation() -> None:
    def script(request: ModelRequest) -> ReplySpec:
        return ScriptedToolCall("flaky") if tool_turns(request) == 0 else "42"

    backend = ScriptedBackend(script)
    # Only rollout 1's calls crash, every time.
    flaky = FlakyTool(lambda calls, context: context.rollout_id.endswith("-r1"))
    log = EventLog()
    config = {"rollout_restarts": 1, "early_stop": False}
    async with Runtime(config, backends=[backend], tools=[flaky]) as rt:
        with anyio.fail_after(10):
            result = await rt.run("q", scaling=ScalingSpec(rollouts=3), events=log)

    assert (result.status, result.answer) == ("succeeded", "42")
    answers = {s.rollout_id.rsplit("-", 1)[1]: s.answer for s in result.summaries}
    assert answers == {"r0": "42", "r1": None, "r2": "42"}
    crashed = next(s for s in result.summaries if s.answer is None)
    (why,) = crashed.failure_modes
    assert "crashed 2 times and was not restarted again" in why
    assert "the tool has a bug" in why
    restarted = log.of_type(RolloutRestarted)
    assert [(e.rollout_id, e.incarnation) for e in restarted] == [(crashed.rollout_id, 1)]
    assert result.cost.model_calls == len(backend.requests)
