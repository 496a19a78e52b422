"""tell / tell_nowait / ask between callers and actors, and topics."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped, AskTimeout, MailboxFull
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.kernel._topic import Topic

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


class Put(msgspec.Struct, tag=True, frozen=True):
    value: int


class Items(msgspec.Struct, tag=True, frozen=True):
    pass


class Hang(msgspec.Struct, tag=True, frozen=True):
    pass


class Fail(msgspec.Struct, tag=True, frozen=True):
    reason: str


Msg = Put | Items | Hang | Fail


class Collector(Actor[Msg, list[int] | None]):
    """Keeps what it is told; ``Hang`` blocks until ``release`` is set."""

    def __init__(self, release: anyio.Event | None = None) -> None:
        self.items: list[int] = []
        self.release = release

    async def receive(self, message: Msg) -> list[int] | None:
        match message:
            case Put(value=value):
                self.items.append(value)
            case Items():
                return list(self.items)
            case Hang():
                if self.release is None:
                    await anyio.sleep_forever()
                else:
                    await self.release.wait()
            case Fail(reason=reason):
                raise RuntimeError(reason)
        return None


async def test_tell_then_ask_sees_messages_in_order() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Collector, name="collector")
        for i in range(200):  # > capacity: tell waits for room instead of failing
            await ref.tell(Put(i))
        assert await ref.ask(Items(), timeout=5) == list(range(200))


async def test_full_mailbox_parks_the_sender_until_drained() -> None:
    release = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Collector(release), name="slow", mailbox_capacity=2)
        await ref.tell(Hang())  # the actor takes it and blocks on it
        await anyio.wait_all_tasks_blocked()
        ref.tell_nowait(Put(1))
        ref.tell_nowait(Put(2))  # the mailbox (capacity 2) is now full
        with pytest.raises(MailboxFull, match=r"mailbox of .*/user/slow is full \(2 messages\)"):
            ref.tell_nowait(Put(3))

        sent: list[int] = []

        async def sender() -> None:
            await ref.tell(Put(3))
            sent.append(3)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            await anyio.wait_all_tasks_blocked()
            assert sent == []  # parked: backpressure, not unbounded growth
            with anyio.move_on_after(0.05) as waited:
                await ref.tell(Put(4))
            assert waited.cancelled_caught  # this sender is parked too
            release.set()  # drain
        assert sent == [3]
        assert await ref.ask(Items(), timeout=5) == [1, 2, 3]


async def test_ask_timeout_names_address_message_type_and_deadline() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Collector, name="stuck")
        await ref.tell(Hang())
        with pytest.raises(AskTimeout) as caught:
            await ref.ask(Items(), timeout=0.05)
        text = str(caught.value)
        assert "/user/stuck" in text
        assert "Items" in text
        assert "0.05 s" in text
        assert caught.value.address == str(ref.address)
        assert caught.value.message_type == "Items"


async def test_an_ask_without_a_timeout_sets_no_timer_and_its_callers_scope_bounds_it() -> None:
    async with ActorSystem() as system:
        release = anyio.Event()
        ref = await system.spawn(lambda: Collector(release), name="unbounded")
        await ref.tell(Hang())
        with anyio.move_on_after(0.05) as scope:
            await ref.ask(Items(), timeout=None)
        assert scope.cancelled_caught  # the caller's deadline, not the ask's
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.tell, Put(1))
            replies: list[list[int] | None] = []

            async def ask() -> None:
                replies.append(await ref.ask(Items(), timeout=None))

            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            assert system._deadlines.timers == 0  # no timer for an ask without one
            release.set()
        assert replies == [[1]]  # the cancelled ask was withdrawn, never handled


async def test_ask_to_a_crashing_handler_gets_actor_crashed_with_the_cause() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Collector, name="fragile")
        with pytest.raises(ActorCrashed, match="RuntimeError: bad input") as caught:
            await ref.ask(Fail("bad input"), timeout=5)
        assert isinstance(caught.value.cause, RuntimeError)
        assert caught.value.__cause__ is caught.value.cause


async def test_stopping_an_actor_fails_its_pending_requests_instead_of_hanging() -> None:
    async with ActorSystem(stop_timeout=0.1) as system:
        ref = await system.spawn(Collector, name="busy")
        await ref.tell(Hang())
        outcome: list[BaseException] = []

        async def asker() -> None:
            try:
                await ref.ask(Items(), timeout=30)
            except ActorStopped as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(asker)
            await anyio.wait_all_tasks_blocked()
            with anyio.fail_after(5):
                await system.stop(ref)
        assert len(outcome) == 1
        with pytest.raises(ActorStopped, match="/user/busy"):
            await ref.tell(Put(1))


async def test_publish_delivers_to_every_subscriber() -> None:
    topic: Topic[Put] = Topic("numbers")
    async with ActorSystem() as system:
        refs = [await system.spawn(Collector, name=f"sub-{i}") for i in range(3)]
        for ref in refs:
            topic.subscribe(ref)
        topic.subscribe(refs[0])  # idempotent
        assert await topic.publish(Put(7)) == 3
        assert await topic.publish(Put(8)) == 3
        for ref in refs:
            assert await ref.ask(Items(), timeout=5) == [7, 8]
        await system.stop(refs[1])
        assert await topic.publish(Put(9)) == 2  # the stopped one is dropped
        assert len(topic) == 2
        topic.unsubscribe(refs[2])
        assert await topic.publish(Put(10)) == 1
        assert await refs[0].ask(Items(), timeout=5) == [7, 8, 9, 10]
        assert await refs[2].ask(Items(), timeout=5) == [7, 8, 9]


async def test_a_request_its_caller_gave_up_on_is_dropped_not_handled() -> None:
    release = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Collector(release), name="late", mailbox_capacity=1)
        await ref.tell(Hang())
        await anyio.wait_all_tasks_blocked()
        await ref.tell(Put(1))  # fills the mailbox
        with pytest.raises(AskTimeout):
            await ref.ask(Put(2), timeout=0.01)  # parked for room, then withdrawn
        with pytest.raises(AskTimeout):
            await ref.ask(Items(), timeout=0.01)
        release.set()
        assert await ref.ask(Items(), timeout=5) == [1]  # Put(2) was never handled
