"""Services: background tasks owned by one actor incarnation."""

from __future__ import annotations

import asyncio

import anyio
import msgspec
import pytest
from anyio.abc import TaskStatus

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped
from agentrt.runtime.kernel._actor_spec import RestartIntensity
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.kernel._system import ActorSystem
from tests._support.polling import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


class Beats(msgspec.Struct, tag=True, frozen=True):
    pass


class Crash(msgspec.Struct, tag=True, frozen=True):
    pass


class Hang(msgspec.Struct, tag=True, frozen=True):
    pass


class TryStart(msgspec.Struct, tag=True, frozen=True):
    pass


Msg = Beats | Crash | Hang | TryStart


class Heart(Actor[Msg, int | str]):
    """Starts a beating service; records lifecycle events in ``events``."""

    def __init__(self, events: list[str], *, fail_with: Exception | None = None) -> None:
        self.events = events
        self.fail_with = fail_with
        self.beats = 0
        self.start_value: object = None
        self.hanging = anyio.Event()

    async def beat(self, *, task_status: TaskStatus[str]) -> None:
        incarnation = self.context.incarnation
        task_status.started(f"ready {incarnation}")
        try:
            while True:
                self.beats += 1
                if self.fail_with is not None and self.hanging.is_set():
                    raise self.fail_with
                await anyio.sleep(0.005)
        finally:
            self.events.append(f"service {incarnation} ended")

    async def on_started(self) -> None:
        self.start_value = await self.context.start_service(self.beat, name="beat")

    async def on_restarted(self, error: Exception) -> None:
        self.events.append(f"restarted {self.context.incarnation}")
        await self.on_started()

    async def on_stopping(self) -> None:
        self.events.append(f"stopping {self.context.incarnation}")

    async def receive(self, message: Msg) -> int | str:
        match message:
            case Beats():
                return self.beats
            case Crash():
                raise ValueError("handler crash")
            case Hang():
                self.hanging.set()
                await anyio.sleep_forever()
            case TryStart():

                async def unready(*, task_status: TaskStatus[None]) -> None:
                    raise LookupError("not ready")

                try:
                    await self.context.start_service(unready)
                except LookupError as exc:
                    return f"caller got {exc}"
        return 0


async def beats(ref: ActorRef[Msg, int | str]) -> int:
    """The beat count the actor reports (an ask it answers at once)."""
    value = await ref.ask(Beats(), timeout=5)
    assert isinstance(value, int)
    return value


def task_names() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks()}


async def test_start_service_returns_the_start_value_and_the_actor_keeps_answering() -> None:
    events: list[str] = []
    instances: list[Heart] = []

    def build() -> Heart:
        instances.append(Heart(events))
        return instances[-1]

    async with ActorSystem() as system:
        ref = await system.spawn(build, name="heart")
        assert instances[0].start_value == "ready 0"
        assert "/user/heart#beat" in task_names()
        first = await beats(ref)
        await eventually(lambda: instances[0].beats > first + 2)
        assert await beats(ref) > first


async def test_stopping_ends_services_first_promptly_and_leaves_no_task() -> None:
    events: list[str] = []
    before = asyncio.all_tasks()
    async with ActorSystem(stop_timeout=5.0) as system:
        ref = await system.spawn(lambda: Heart(events), name="heart")
        began = anyio.current_time()
        await system.stop(ref)
        assert anyio.current_time() - began < 1.0  # not the 5 s stop timeout
        assert events == ["service 0 ended", "stopping 0"]
        assert "/user/heart#beat" not in task_names()
        assert system.root.failures == ()
    assert asyncio.all_tasks() == before


async def test_services_end_before_the_replacement_runs_on_restarted() -> None:
    events: list[str] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Heart(events), name="heart")
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash(), timeout=5)
        assert await beats(ref) >= 1  # the new incarnation's service
        assert events == ["service 0 ended", "stopping 0", "restarted 1"]
        assert [f.action for f in system.root.failures] == ["restart"]


async def test_a_failing_service_crashes_the_actor_with_its_exact_exception() -> None:
    error = KeyError("the service broke")
    events: list[str] = []
    async with ActorSystem(intensity=RestartIntensity(max_restarts=1, within=60.0)) as system:
        ref = await system.spawn(lambda: Heart(events, fail_with=error), name="heart")
        # The request in hand is interrupted: its caller learns why.
        with pytest.raises(ActorCrashed) as caught:
            await ref.ask(Hang(), timeout=5)
        assert caught.value.cause is error
        assert await beats(ref) >= 0  # restarted, serving again
        (failure,) = system.root.failures
        assert failure.error is error
        assert failure.action == "restart"
        assert failure.incarnation == 0
        assert failure.address == ref.address
        assert events[:3] == ["service 0 ended", "stopping 0", "restarted 1"]
        assert system.failure is None


async def test_an_error_before_readiness_goes_to_the_caller_only() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Heart([]), name="heart")
        assert await ref.ask(TryStart(), timeout=5) == "caller got not ready"
        assert await beats(ref) >= 0
        assert system.root.failures == ()


async def test_a_service_failing_during_on_started_fails_the_spawn() -> None:
    error = OSError("no device")

    class Doomed(Actor[Beats, int]):
        async def broken(self) -> None:
            raise error

        async def on_started(self) -> None:
            self.context.start_soon_service(self.broken)
            await anyio.sleep(30)  # interrupted by the failing service

        async def receive(self, message: Beats) -> int:
            return 0

    before = asyncio.all_tasks()
    async with ActorSystem() as system:
        with anyio.fail_after(5), pytest.raises(ActorCrashed) as caught:
            await system.spawn(Doomed, name="doomed")
        assert caught.value.cause is error
        assert system.root.children == ()
    assert asyncio.all_tasks() == before


async def test_a_hanging_on_restarted_is_cut_off_and_counted_as_a_failure() -> None:
    restarts: list[int] = []

    class Stuck(Actor[Crash | Beats, int]):
        async def on_restarted(self, error: Exception) -> None:
            restarts.append(self.context.incarnation)
            if len(restarts) == 1:
                await anyio.sleep_forever()  # the first replacement hangs

        async def receive(self, message: Crash | Beats) -> int:
            if isinstance(message, Crash):
                raise ValueError("crash")
            return self.context.incarnation

    intensity = RestartIntensity(max_restarts=5, within=60.0)
    async with ActorSystem(restart_timeout=0.2, intensity=intensity) as system:
        ref = await system.spawn(Stuck, name="stuck")
        began = anyio.current_time()
        await ref.tell(Crash())
        assert await ref.ask(Beats(), timeout=5) == 2  # the second replacement serves
        assert anyio.current_time() - began < 2.0
        errors = [f.error for f in system.root.failures]
        assert [type(e) for e in errors] == [ValueError, TimeoutError]
        assert str(errors[1]) == "on_restarted of actor://" + system.system_id + (
            "/user/stuck did not finish within 0.2 s"
        )
        assert restarts == [1, 2]


async def test_services_start_only_while_an_incarnation_runs() -> None:
    instances: list[Heart] = []

    def build() -> Heart:
        instances.append(Heart([]))
        return instances[-1]

    async with ActorSystem() as system:
        ref = await system.spawn(build, name="heart")
        await system.stop(ref)
        with pytest.raises(ActorStopped, match="no incarnation is running"):
            instances[0].context.start_soon_service(anyio.sleep, 1)
        with pytest.raises(ActorStopped):
            await instances[0].context.start_service(instances[0].beat)


async def test_a_service_can_stop_its_own_actor_without_waiting_on_itself() -> None:
    class Quitter(Actor[Beats, int]):
        async def quit(self) -> None:
            await self.context.system.stop(self.context.ref)

        async def receive(self, message: Beats) -> int:
            self.context.start_soon_service(self.quit)
            return 0

    async with ActorSystem(stop_timeout=5.0) as system:
        ref = await system.spawn(Quitter, name="quitter")
        with anyio.fail_after(2):  # not the 5 s stop timeout
            assert await ref.ask(Beats(), timeout=5) == 0
            await eventually(lambda: system.root.children == ())
        assert system.root.failures == ()


async def test_a_service_failing_before_the_supervisor_holds_the_task_still_crashes_it() -> None:
    # The service's first step runs after on_started returned but before the
    # spawner (and the supervisor) got the incarnation's task handle.
    error = ConnectionError("lost at once")
    failed: list[int] = []

    class Flaky(Actor[Beats, int]):
        async def fail_once(self) -> None:
            if not failed:
                failed.append(self.context.incarnation)
                raise error

        async def on_started(self) -> None:
            self.context.start_soon_service(self.fail_once)

        async def receive(self, message: Beats) -> int:
            return self.context.incarnation

    async with ActorSystem() as system:
        ref = await system.spawn(Flaky, name="flaky")
        await eventually(lambda: len(system.root.failures) == 1)
        assert system.root.failures[0].error is error
        assert await ref.ask(Beats(), timeout=5) == 1
        assert failed == [0]
