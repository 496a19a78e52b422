"""The mailbox on its own: bounds, FIFO, cancellation safety, closing."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from agentrt.runtime.kernel._actor_errors import ActorStopped, MailboxFull
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._mailbox import CLOSED, EMPTY, Ask, Mailbox

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]

ADDRESS = ActorAddress("test", "/user/box", 1)


async def test_put_nowait_respects_the_capacity() -> None:
    box = Mailbox(ADDRESS, capacity=2)
    box.put_nowait("a")
    box.put_nowait("b")
    with pytest.raises(MailboxFull, match="full"):
        box.put_nowait("c")
    assert [box.take_nowait(), box.take_nowait(), box.take_nowait()] == ["a", "b", EMPTY]


async def test_parked_senders_are_served_in_order() -> None:
    box = Mailbox(ADDRESS, capacity=1)
    box.put_nowait(0)
    async with anyio.create_task_group() as tg:
        for i in (1, 2, 3):
            tg.start_soon(box.put, i)
            await anyio.wait_all_tasks_blocked()
        assert len(box) == 4
        got = [await box.take() for _ in range(4)]
    assert got == [0, 1, 2, 3]


async def test_a_cancelled_sender_withdraws_its_message() -> None:
    box = Mailbox(ADDRESS, capacity=1)
    box.put_nowait("kept")
    with anyio.move_on_after(0.01):
        await box.put("withdrawn")
    assert len(box) == 1
    assert box.take_nowait() == "kept"
    assert box.take_nowait() is EMPTY


async def test_a_receiver_cancelled_after_a_handoff_does_not_lose_the_message() -> None:
    box = Mailbox(ADDRESS)
    # Drive take() by hand to land a cancellation between the hand-off and
    # the receiver running again (anyio avoids this window; a bare
    # task.cancel() does not).
    taking = box.take()
    parked_on = taking.send(None)
    assert isinstance(parked_on, asyncio.Future)
    box.put_nowait("handed over")  # the receiver's future gets it ...
    assert parked_on.done()
    with pytest.raises(asyncio.CancelledError):
        taking.throw(asyncio.CancelledError())  # ... but it is cancelled instead
    assert box.take_nowait() == "handed over"


async def test_a_cancelled_idle_receiver_leaves_nothing_behind() -> None:
    box = Mailbox(ADDRESS)
    with anyio.move_on_after(0.01):
        await box.take()
    box.put_nowait("next")  # not handed to the dead receiver
    assert box.take_nowait() == "next"


async def test_closing_wakes_everyone_and_fails_requests() -> None:
    box = Mailbox(ADDRESS, capacity=1)
    loop = asyncio.get_running_loop()
    queued = Ask("question", loop.create_future())
    box.offer_ask(queued)
    parked = Ask("later question", loop.create_future())
    box.offer_ask(parked)  # full: parked, its caller waits on the reply
    outcomes: list[BaseException] = []

    async def blocked_sender() -> None:
        try:
            await box.put("tell")
        except ActorStopped as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked_sender)
        await anyio.wait_all_tasks_blocked()
        assert box.close("shutting down") == 0  # the parked tell is refused, not dropped
    assert len(outcomes) == 1
    for envelope in (queued, parked):
        with pytest.raises(ActorStopped, match="shutting down"):
            envelope.reply.result()
    assert box.take_nowait() is CLOSED
    with pytest.raises(ActorStopped):
        box.put_nowait("after close")


async def test_closing_wakes_an_idle_receiver() -> None:
    box = Mailbox(ADDRESS)
    got: list[object] = []

    async def receiver() -> None:
        got.append(await box.take())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await anyio.wait_all_tasks_blocked()
        box.close("bye")
    assert got == [CLOSED]


async def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        Mailbox(ADDRESS, capacity=0)
