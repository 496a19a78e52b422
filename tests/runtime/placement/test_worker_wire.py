"""What crosses between a placement's driver and its rollout workers, and
what it leaves out: a step's prompt travels as what changed since the
rollout's last one and is rebuilt whole on the driver; a result leaves out
the steps the driver committed, and the driver puts them back; a worker is
told the event kinds the run's stream takes."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from agentrt.agents._control import RolloutResult
from agentrt.protocols import Event, RolloutFinished, StepRecorded, ToolCalled, Trajectory
from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._model import Choice, ModelReply
from agentrt.protocols._trajectory import Step
from agentrt.protocols._usage import Usage
from agentrt.runtime.kernel._errors import RuntimeFailure
from agentrt.runtime.placement._worker_books import outcome_result
from agentrt.runtime.placement._worker_host import _done
from agentrt.runtime.placement._worker_wire import (
    ENCODER,
    OUTBOUND,
    EventOut,
    FlushOut,
    Outbound,
    RolloutDone,
    StepOut,
    StepPrompts,
    event_kinds,
    event_tags,
)


def _steps(rollout: str, count: int) -> list[StepRecorded]:
    """``count`` steps of an agent: each prompt is the one before plus the
    step's reply message and the tool's answer (the same message objects,
    as the agent loop builds them)."""
    prompt: tuple[ChatMessage, ...] = (
        SystemMessage(content="Solve it."),
        UserMessage(content=f"task of {rollout}"),
    )
    out = []
    for index in range(count):
        call = ToolCall(id=f"c{index}", function=FunctionCall(name="add", arguments="{}"))
        message = AssistantMessage(content=f"{rollout} step {index}", tool_calls=[call])
        reply = ModelReply(
            model="m", choices=[Choice(message=message)], usage=Usage(), latency_s=0.1
        )
        step = Step(index=index, messages=prompt, reply=reply)
        out.append(StepRecorded(run_id="run-1", rollout_id=rollout, step=step))
        prompt = (*prompt, message, ToolMessage(content=str(index), tool_call_id=f"c{index}"))
    return out


def _wire(item: Outbound) -> Outbound:
    """``item`` as the other end decodes it."""
    (back,) = OUTBOUND.decode(ENCODER.encode([item]))
    return back


def test_a_steps_prompt_crosses_as_what_changed_and_is_rebuilt_whole() -> None:
    worker, driver = StepPrompts(), StepPrompts()
    a, b, sub = _steps("run-1-r0", 4), _steps("run-1-r1", 4), _steps("run-1-r0.call-1", 2)
    interleaved = [a[0], b[0], a[1], sub[0], b[1], a[2], sub[1], a[3], b[2], b[3]]
    sizes: dict[str, list[int]] = {}
    kept: dict[str, list[int]] = {}
    added: dict[str, list[int]] = {}
    rebuilt: dict[str, list[StepRecorded]] = {}
    for ack, event in enumerate(interleaved, start=1):
        out = worker.encode(event, ack)
        sizes.setdefault(event.rollout_id, []).append(len(ENCODER.encode(out)))
        kept.setdefault(event.rollout_id, []).append(out.kept)
        added.setdefault(event.rollout_id, []).append(len(out.added))
        crossed = _wire(out)
        assert isinstance(crossed, StepOut)
        assert crossed.ack == ack
        assert crossed.event.step.messages == ()
        back = driver.decode(crossed)
        assert back == event  # the whole prompt, and the rest of the step
        rebuilt.setdefault(event.rollout_id, []).append(back)
    # Each step sends its tool's answer alone, not its whole prompt, nor
    # the step before's reply message again.
    assert kept["run-1-r0"] == [0, 2, 4, 6]
    assert added["run-1-r0"] == [2, 1, 1, 1]
    assert kept["run-1-r0.call-1"] == [0, 2]
    assert added["run-1-r0.call-1"] == [2, 1]
    assert len(set(sizes["run-1-r0"][1:])) == 1
    # The driver's prompt holds the reply message it decoded, as the
    # agent loop's holds the reply's own (one object, not a copy).
    steps = [event.step for event in rebuilt["run-1-r0"]]
    for before, after in itertools.pairwise(steps):
        assert before.reply is not None
        assert after.messages[len(before.messages)] is before.reply.message


def test_a_rollouts_prompts_are_forgotten_at_its_end_on_both_ends() -> None:
    worker, driver = StepPrompts(), StepPrompts()
    first, sub = _steps("run-1-r0", 2), _steps("run-1-r0.call-1", 1)[0]
    for event in [*first, sub]:
        driver.decode(_wire(worker.encode(event, 0)))  # type: ignore[arg-type]
    worker.forget("run-1-r0")
    driver.forget("run-1-r0")
    out = worker.encode(first[1], 0)  # the same messages, but the rollout ended
    assert out.kept == 0
    assert driver.decode(out) == first[1]
    assert worker.encode(sub, 0).kept == 0  # its sub-agents' are forgotten too
    # A step that keeps more than the driver holds is refused, not made up.
    with pytest.raises(ValueError, match="keeps 4 messages of a prompt of 0"):
        StepPrompts().decode(msgspec.structs.replace(out, kept=4))
    with pytest.raises(ValueError, match="repeats the reply of a step this end does not hold"):
        StepPrompts().decode(msgspec.structs.replace(out, replied=True))


def _trajectory(steps: list[Step]) -> RolloutResult:
    return RolloutResult(
        trajectory=Trajectory(
            run_id="run-1", rollout_id="run-1-r0", agent="a", task="t", steps=steps
        )
    )


def test_a_result_leaves_out_the_committed_steps_and_the_driver_puts_them_back() -> None:
    steps = [event.step for event in _steps("run-1-r0", 4)]
    committed = steps[:3]
    result = _trajectory([*steps[:2], steps[2], steps[3]])
    done = _done(result, committed)
    assert done.committed == 3
    assert done.result.trajectory.steps == [steps[3]]
    crossed = msgspec.msgpack.decode(ENCODER.encode(done), type=RolloutDone)
    back = outcome_result(crossed, "run-1-r0", committed)
    assert back == result
    # A step that is not the one committed (an equal copy) is sent.
    copy = msgspec.structs.replace(steps[0])
    assert _done(_trajectory([copy, *steps[1:]]), committed).committed == 0
    # A driver that holds fewer steps than the worker counted says so.
    with pytest.raises(RuntimeFailure, match="counted 3 committed steps, the driver has 2"):
        outcome_result(crossed, "run-1-r0", committed[:2])


def test_a_worker_is_told_the_event_kinds_the_run_takes() -> None:
    assert event_tags(None) is None
    assert event_kinds(None) is None
    kinds: frozenset[type[Event]] = frozenset({StepRecorded, ToolCalled, RolloutFinished})
    tags = event_tags(kinds)
    assert tags == ["rollout_finished", "step", "tool_call"]
    assert event_kinds(tags) == kinds
    with pytest.raises(ValueError, match=r"unknown event kinds \['nope'\]"):
        event_kinds(["step", "nope"])


def test_a_flush_names_the_rollout_it_ends() -> None:
    assert _wire(FlushOut(ack=3, rollout="run-1-r0")) == FlushOut(ack=3, rollout="run-1-r0")
    assert isinstance(_wire(EventOut(event=_steps("run-1-r0", 1)[0])), EventOut)
