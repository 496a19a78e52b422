"""The embedding surface: ``Runtime.run``/``stream`` and the synchronous ``agentrt.run``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import agentrt
from agentrt.agents import AgentConfig, EventLog
from agentrt.protocols import (
    Budget,
    BudgetUpdated,
    ModelReply,
    ModelRequest,
    RolloutFinished,
    RolloutId,
    RolloutRestarted,
    RolloutStarted,
    RunFinished,
    RunStarted,
    ScalingSpec,
    Step,
    StepRecorded,
    SummaryWritten,
    SystemMessage,
    TokenDelta,
    ToolMessage,
    Usage,
    UserMessage,
    VoteCast,
)
from agentrt.runtime.engine._runtime import RolloutCheckpoint, RunCheckpoint, Runtime, RuntimeConfig
from agentrt.runtime.kernel._errors import UserError
from agentrt.runtime.models._backend import StreamDelta
from agentrt.testing import ScriptedBackend, ScriptedReply, ScriptedToolCall
from tests._support.backends import ForwardingBackend
from tests._support.specs import solve_then_check

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]

ANSWERS = ["42", "41", "42", "42"]
_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


def script(request: ModelRequest) -> str | ScriptedReply | BaseException:
    """Warm-up, rollouts (answer by index; index 9 crashes) and the judge
    (picks the attempt that says 42)."""
    rid = request.request_id or ""
    if rid.endswith("-warm"):
        return "ok"
    found = _ROLLOUT.search(rid)
    if found:
        i = int(found.group(1))
        if i >= len(ANSWERS):
            return RuntimeError("backend fell over")
        return ScriptedReply(content=ANSWERS[i], delay_s=0.001 * i)
    first = request.messages[0]
    assert isinstance(first, SystemMessage)
    assert "judge" in first.content
    user = request.messages[-1]
    assert isinstance(user, UserMessage)
    assert isinstance(user.content, str)
    blocks = re.split(r"Attempt (\d+):", user.content)[1:]
    for number, text in zip(blocks[::2], blocks[1::2], strict=True):
        if "42" in text:
            return number
    return "1"


class Recording(ForwardingBackend[ScriptedBackend]):
    """A backend recording the usage every reply reports (a test may run it
    more than once, so it leaves ``inner`` open)."""

    def __init__(self, inner: ScriptedBackend) -> None:
        super().__init__(inner, opens_inner=False)
        self.usage = Usage()
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        reply = await self.inner.complete(request)
        self.usage = self.usage + reply.usage
        self.calls += 1
        return reply

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        # A run that may stop its rollouts early streams their calls.
        async for delta in self.inner.stream(request):
            if delta.reply is not None:
                self.usage = self.usage + delta.reply.usage
                self.calls += 1
            yield delta


def runtime(backend: Recording, **config: object) -> Runtime:
    return Runtime(
        RuntimeConfig.model_validate({"early_stop": False, **config}), backends=[backend]
    )


async def test_four_rollouts_and_majority() -> None:
    backend = Recording(ScriptedBackend(script))
    log = EventLog()
    async with runtime(backend) as rt:
        result = await rt.run("What is 6 x 7?", scaling=ScalingSpec(rollouts=4), events=log)
    assert result.status == "succeeded"
    assert result.answer == "42"
    assert sorted(s.answer or "" for s in result.summaries) == sorted(ANSWERS)
    assert len(log.of_type(SummaryWritten)) == 4
    assert backend.calls == 4  # one step per rollout (no warm-up by default)
    assert result.cost.usage == backend.usage
    assert result.cost.model_calls == backend.calls
    votes = log.of_type(VoteCast)
    assert votes
    assert votes[-1].winner is not None


async def test_rtv_bracket_is_complete_and_usage_exact() -> None:
    backend = Recording(ScriptedBackend(script))
    log = EventLog()
    async with runtime(backend) as rt:
        result = await rt.run(
            "What is 6 x 7?",
            # Judge agreeing answers too, so the whole bracket has its calls.
            scaling=ScalingSpec(
                rollouts=4, aggregate="rtv", options={"g": 2, "v": 1, "skip_agreeing": False}
            ),
            events=log,
        )
    assert result.answer == "42"
    assert len(result.summaries) == 4
    comparisons = log.of_type(VoteCast)
    assert len(comparisons) == 3  # N - 1 comparisons for G = 2
    assert len(result.aggregation_trace) == 3
    assert result.cost.usage == backend.usage  # rollouts + judge calls
    assert result.cost.model_calls == backend.calls == 4 + 3


async def test_a_crashing_rollout_is_left_out_and_aggregation_continues() -> None:
    global ANSWERS  # noqa: PLW0603 - the script reads it
    saved, ANSWERS = ANSWERS, ["42", "42", "7"]
    try:
        backend = Recording(ScriptedBackend(script))
        log = EventLog()
        async with runtime(backend, agents={"solver": {"name": "solver"}}) as rt:
            result = await rt.run("q", agent="solver", scaling=ScalingSpec(rollouts=4), events=log)
    finally:
        ANSWERS = saved
    assert result.answer == "42"
    assert len(result.summaries) == 4
    crashed = [s for s in result.summaries if s.answer is None]
    assert [s.rollout_id[-3:] for s in crashed] == ["-r3"]
    (why,) = crashed[0].failure_modes
    assert why.endswith(
        "crashed 4 times and was not restarted again; the last error: "
        "RuntimeError('backend fell over')"
    )
    # Its supervisor restarted it three times (rollout_restarts), then gave up.
    restarts = log.of_type(RolloutRestarted)
    assert [r.incarnation for r in restarts] == [1, 2, 3]
    assert {r.rollout_id for r in restarts} == {crashed[0].rollout_id}
    failed = [e for e in log.of_type(RolloutFinished) if e.status == "failed"]
    assert {e.rollout_id for e in failed} == {crashed[0].rollout_id}


def slow_tail(request: ModelRequest) -> str | ScriptedReply:
    """Rollouts 0-2 answer 42 at once; the others would take 5 s."""
    found = _ROLLOUT.search(request.request_id or "")
    assert found is not None
    return "42" if int(found.group(1)) < 3 else ScriptedReply(content="7", delay_s=5.0)


async def test_majority_stops_early_once_certain(anyio_backend: str) -> None:
    import asyncio

    before = set(asyncio.all_tasks())
    backend = Recording(ScriptedBackend(slow_tail))
    log = EventLog()
    async with Runtime(RuntimeConfig(warm_prefix=False), backends=[backend]) as rt:
        with anyio.fail_after(3):
            result = await rt.run("q", scaling=ScalingSpec(rollouts=5), events=log)
    assert result.answer == "42"
    assert len(result.summaries) == len(log.of_type(SummaryWritten)) == 3
    assert backend.inner.in_flight == 0
    assert set(asyncio.all_tasks()) == before


async def test_stream_yields_events_in_order() -> None:
    backend = Recording(ScriptedBackend(script))
    async with runtime(backend) as rt, rt.stream("q", scaling=ScalingSpec(rollouts=2)) as stream:
        events = [e async for e in stream]
    assert isinstance(events[0], RunStarted)
    assert isinstance(events[-1], RunFinished)
    assert events[-1].answer is not None
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    # Token events take the seq of the event before them (they are not stored).
    seqs = [e.seq for e in events if not isinstance(e, TokenDelta)]
    assert len(set(seqs)) == len(seqs)
    assert any(isinstance(e, BudgetUpdated) for e in events)
    assert sum(isinstance(e, SummaryWritten) for e in events) == 2


async def test_budget_caps_the_run() -> None:
    backend = Recording(ScriptedBackend(script))
    async with runtime(backend, warm_prefix=False) as rt:
        result = await rt.run(
            "q",
            agent=AgentConfig(name="capped"),
            scaling=ScalingSpec(rollouts=4),
            budget=Budget(max_model_calls=2),
        )
    assert result.cost.model_calls <= 2


async def test_sync_run_and_its_refusal_inside_a_loop() -> None:
    backend = Recording(ScriptedBackend(script))
    with pytest.raises(UserError, match="running event loop"):
        agentrt.run("q", backends=[backend])

    def call() -> agentrt.protocols.RunResult:
        return agentrt.run(
            "q", backends=[backend], scaling=ScalingSpec(rollouts=3), config={"warm_prefix": False}
        )

    result = await anyio.to_thread.run_sync(call)
    assert result.answer == "42"
    assert backend.calls == 3


async def test_an_agent_by_yaml_spec_path(tmp_path: Path) -> None:
    spec = tmp_path / "solver.yaml"
    spec.write_text("name: solver\ninstructions: Answer with a number.\n")
    backend = Recording(ScriptedBackend(script))
    log = EventLog()
    async with runtime(backend, agents={"solver": str(spec)}) as rt:
        result = await rt.run("q", agent="solver", scaling=ScalingSpec(rollouts=4), events=log)
    assert result.answer == "42"
    assert log.of_type(RunStarted)[0].agent == "solver"
    assert len(result.summaries) == 4
    assert backend.calls == 4


LEAD_AND_HELPER = """
entry: lead
agents:
  lead:
    description: Delegates.
    instructions: You are the lead. Ask the helper.
    sub_agents: [helper]
  helper:
    description: Answers.
    instructions: You are the helper.
"""


def lead_then_helper(request: ModelRequest) -> ScriptedReply | ScriptedToolCall:
    system = request.messages[0]
    if isinstance(system, SystemMessage) and "the lead" in system.content:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedReply(content="42")
        return ScriptedToolCall("helper", {"task": "the answer"})
    return ScriptedReply(content="42")


def solver_then_checker(request: ModelRequest) -> ScriptedReply:
    system = request.messages[0]
    if isinstance(system, SystemMessage) and "the solver" in system.content:
        return ScriptedReply(content="42")
    return ScriptedReply(content="looks right")


async def test_a_resumed_pipeline_takes_up_the_stages_it_finished(tmp_path: Path) -> None:
    """A pipeline's rollout interrupted after its first stage finished runs
    again as ``<id>~1`` without running that stage again: its answer feeds
    the next stage, and its cost is counted once."""
    spec = tmp_path / "pipe.yaml"
    spec.write_text(solve_then_check())
    backend = Recording(ScriptedBackend(solver_then_checker))
    log = EventLog()
    async with runtime(backend, agents={"pipe": str(spec)}, warm_prefix=False) as rt:
        first = await rt.run("q", agent="pipe", events=log, run_id="run-p")
        assert first.answer == "42"
        ended = {e.rollout_id: e for e in log.of_type(RolloutFinished)}
        steps: dict[str, list[Step]] = {}
        for event in log.of_type(StepRecorded):
            steps.setdefault(event.rollout_id, []).append(event.step)
        solve = "run-p-r0.solve.1"
        assert set(steps) == {solve, "run-p-r0.check.1"}
        # Committed before the interruption: the pipeline's start and its
        # finished first stage; the check had not started.
        checkpoint = RunCheckpoint(
            next_seq=len(log.events) + 1,
            rollouts={
                RolloutId.parse("run-p", "run-p-r0"): RolloutCheckpoint(),
                RolloutId.parse("run-p", solve): RolloutCheckpoint(
                    steps=steps[solve], finished=ended[solve]
                ),
            },
        )
        calls = backend.calls
        again_log = EventLog()
        again = await rt.run(
            "q", agent="pipe", run_id="run-p", checkpoint=checkpoint, events=again_log
        )
    assert again.answer == "42"
    assert backend.calls == calls + 1  # the checker's call alone
    started = [e.rollout_id for e in again_log.of_type(RolloutStarted)]
    assert started == ["run-p-r0~1", "run-p-r0~1.check.1"]
    assert again.cost.model_calls == first.cost.model_calls
    assert again.cost.usage == first.cost.usage


async def test_an_ended_hierarchy_rollout_is_restored_with_its_sub_agents_cost(
    tmp_path: Path,
) -> None:
    """Resuming a run whose hierarchy rollout ended (its summary not yet
    written) runs nothing again, and the run's cost still counts the
    sub-agent's model calls, not only the entry agent's."""
    spec = tmp_path / "lead.yaml"
    spec.write_text(LEAD_AND_HELPER)
    backend = Recording(ScriptedBackend(lead_then_helper))
    log = EventLog()
    async with runtime(backend, agents={"lead": str(spec)}, warm_prefix=False) as rt:
        first = await rt.run("q", agent="lead", events=log, run_id="run-h")
        assert first.cost.model_calls == 3  # the lead twice, the helper once
        steps: dict[str, list[Step]] = {}
        for event in log.of_type(StepRecorded):
            steps.setdefault(event.rollout_id, []).append(event.step)
        ended = {e.rollout_id: e for e in log.of_type(RolloutFinished)}
        assert len(steps) == 2  # the lead's rollout and the helper's
        checkpoint = RunCheckpoint(
            next_seq=len(log.events) + 1,
            rollouts={
                RolloutId.parse("run-h", r): RolloutCheckpoint(steps=s, finished=ended.get(r))
                for r, s in steps.items()
            },
        )
        calls = backend.calls
        again = await rt.run("q", agent="lead", run_id="run-h", checkpoint=checkpoint)
    assert backend.calls == calls
    assert again.answer == "42"
    assert again.cost.model_calls == first.cost.model_calls
    assert again.cost.usage == first.cost.usage
