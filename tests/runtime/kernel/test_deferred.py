"""Deferred replies: requests answered by a service, side by side."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import msgspec
import pytest

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped, AskTimeout
from agentrt.runtime.kernel._deferred import Deferred
from agentrt.runtime.kernel._system import ActorSystem

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


class Slow(msgspec.Struct, tag=True, frozen=True):
    key: str


class Quick(msgspec.Struct, tag=True, frozen=True):
    pass


class Boom(msgspec.Struct, tag=True, frozen=True):
    pass


Msg = Slow | Quick | Boom


class Desk(Actor[Msg, str]):
    """Answers ``Slow(key)`` once ``gates[key]`` is set, from a service."""

    def __init__(self, gates: dict[str, anyio.Event], log: list[str]) -> None:
        self.gates = gates
        self.log = log

    async def receive(self, message: Msg) -> str | Deferred[str]:
        match message:
            case Slow():
                return self.context.defer(self._slow, message.key)
            case Quick():
                return f"quick from incarnation {self.context.incarnation}"
            case Boom():
                return self.context.defer(self._boom)

    async def _slow(self, key: str) -> str:
        try:
            await self.gates[key].wait()
        except anyio.get_cancelled_exc_class():
            self.log.append(f"cancelled {key}")
            raise
        self.log.append(f"answered {key}")
        return f"done {key}"

    async def _boom(self) -> str:
        await anyio.lowlevel.checkpoint()
        raise LookupError("no such thing")


async def test_deferred_requests_overlap_and_the_actor_keeps_answering() -> None:
    gates = {"a": anyio.Event(), "b": anyio.Event()}
    log: list[str] = []
    replies: dict[str, str] = {}
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Desk(gates, log), name="desk")

        async def ask(key: str) -> None:
            replies[key] = await ref.ask(Slow(key), timeout=5)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "a")
            tg.start_soon(ask, "b")
            # Both slow requests are in flight; a quick one is not held up.
            assert await ref.ask(Quick(), timeout=1) == "quick from incarnation 0"
            gates["b"].set()  # the second finishes first
            with anyio.fail_after(5):
                while "b" not in replies:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert "a" not in replies
            gates["a"].set()
    assert replies == {"a": "done a", "b": "done b"}
    assert log == ["answered b", "answered a"]


async def test_an_asker_that_gives_up_cancels_its_service() -> None:
    gates = {"a": anyio.Event()}
    log: list[str] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Desk(gates, log), name="desk")
        with pytest.raises(AskTimeout):
            await ref.ask(Slow("a"), timeout=0.2)
        with anyio.fail_after(5):
            while log != ["cancelled a"]:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        with anyio.move_on_after(0.2):
            await ref.ask(Slow("a"), timeout=5)
        with anyio.fail_after(5):
            while len(log) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert log == ["cancelled a", "cancelled a"]
        assert system.root.failures == ()  # giving up is no failure of the actor


async def test_a_failing_deferred_reply_crashes_the_actor_and_tells_the_asker() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Desk({}, []), name="desk")
        with pytest.raises(ActorCrashed) as caught:
            await ref.ask(Boom(), timeout=5)
        assert isinstance(caught.value.cause, LookupError)
        # Restarted by its supervisor, like a handler that raised.
        assert await ref.ask(Quick(), timeout=5) == "quick from incarnation 1"
        (failure,) = system.root.failures
        assert isinstance(failure.error, LookupError)
        assert failure.action == "restart"


async def test_stopping_the_actor_answers_pending_requests() -> None:
    gates = {"a": anyio.Event()}
    log: list[str] = []
    async with ActorSystem(stop_timeout=1.0) as system:
        ref = await system.spawn(lambda: Desk(gates, log), name="desk")
        outcome: list[BaseException] = []

        async def ask() -> None:
            try:
                await ref.ask(Slow("a"), timeout=5)
            except ActorStopped as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()  # the slow one is being served
            await ref.ask(Quick(), timeout=1)
            await system.stop(ref)
        assert len(outcome) == 1
        assert "stopped while handling this request" in str(outcome[0])
        assert log == ["cancelled a"]


async def test_a_told_deferred_message_runs_and_its_reply_is_dropped() -> None:
    gates = {"a": anyio.Event()}
    log: list[str] = []
    gates["a"].set()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Desk(gates, log), name="desk")
        await ref.tell(Slow("a"))
        with anyio.fail_after(5):
            while log != ["answered a"]:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert system.root.failures == ()
