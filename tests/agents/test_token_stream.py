"""Token events out of the agent loop (issue 15, item 2): made only while
someone reads them, coalesced, in order, numbered with no seq of their own."""

from __future__ import annotations

import pytest

from agentrt.agents import EventEmitter, EventLog, TokenBuffer, TokenPacer
from agentrt.protocols import Event, RunFinished, StepRecorded, TokenDelta
from agentrt.runtime.engine._runtime import Runtime
from agentrt.testing import ScriptedBackend

pytestmark = pytest.mark.anyio

ANSWER = " ".join(f"word{i}" for i in range(40))


def backend(token_delay_s: float = 0.005) -> ScriptedBackend:
    return ScriptedBackend([ANSWER], token_delay_s=token_delay_s, on_exhausted="repeat_last")


def tokens_of(events: list[Event]) -> list[TokenDelta]:
    return [e for e in events if isinstance(e, TokenDelta)]


async def test_tokens_are_made_only_when_asked_for() -> None:
    model = backend()
    async with Runtime(backends=[model]) as rt:
        log = EventLog()
        await rt.run("task", events=log)  # events, but no tokens asked for
        assert tokens_of(log.events) == []
        await rt.run("task", events=log, tokens=lambda: False)  # nobody listening now
        assert tokens_of(log.events) == []
        streamed = EventLog()
        result = await rt.run("task", events=streamed, tokens=True)
    assert result.answer == ANSWER
    pieces = tokens_of(streamed.events)
    assert "".join(p.text for p in pieces) == ANSWER
    assert all(p.step == 0 and p.rollout_id.endswith("-r0") for p in pieces)
    # Before the step that carries the whole reply.
    step_at = next(i for i, e in enumerate(streamed.events) if isinstance(e, StepRecorded))
    assert all(streamed.events.index(p) < step_at for p in pieces)


async def test_tokens_take_no_number_of_their_own() -> None:
    async with Runtime(backends=[backend()]) as rt:
        log = EventLog()
        await rt.run("task", events=log, tokens=True)
    numbered = [e.seq for e in log.events if not isinstance(e, TokenDelta)]
    assert numbered == list(range(1, len(numbered) + 1))
    assert isinstance(log.events[-1], RunFinished)
    for i, event in enumerate(log.events):
        if isinstance(event, TokenDelta):
            assert event.seq == log.events[i - 1].seq  # the event before it


async def test_pieces_are_coalesced_by_the_window() -> None:
    async with Runtime(backends=[backend(token_delay_s=0.002)]) as rt:
        log = EventLog()
        await rt.run("task", events=log, tokens=True)
    tokens = tokens_of(log.events)
    # 80 pieces (words and spaces) over ~0.16 s at one event per 50 ms.
    assert 2 <= len(tokens) <= 8
    assert "".join(t.text for t in tokens) == ANSWER


def test_the_window_widens_with_the_rollouts_streaming() -> None:
    pacer = TokenPacer(window_s=0.05, max_events_per_s=200)
    assert pacer.window() == 0.05
    pacer.streaming = 1000  # a 1,000-rollout run: 200 events/s in all
    assert pacer.window() == 5.0
    with pytest.raises(ValueError, match="window_s"):
        TokenPacer(window_s=-1)
    with pytest.raises(ValueError, match="max_events_per_s"):
        TokenPacer(max_events_per_s=0)


async def test_a_restarted_call_drops_the_text_not_yet_sent() -> None:
    log = EventLog()
    emitter = EventEmitter(log)
    pacer = TokenPacer(window_s=60)
    async with TokenBuffer(pacer, emitter, run_id="run", rollout_id="run-r0", step=0) as buffer:
        await buffer.add("Let ")  # the first piece goes at once
        await buffer.add("me")  # held: inside the window
        buffer.restart()  # the stream was cut and the call retried
        await buffer.add("The answer")
    assert [t.text for t in tokens_of(log.events)] == ["Let ", "The answer"]
