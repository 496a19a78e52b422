"""Supervision: restarts, intensity and escalation, one-for-all, stop cascades."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Coroutine
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped, SupervisionEscalated
from agentrt.runtime.kernel._actor_spec import (
    ChildSpec,
    RestartIntensity,
    RestartStrategy,
    SupervisorSpec,
)
from agentrt.runtime.kernel._system import ActorSystem

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


class Add(msgspec.Struct, tag=True, frozen=True):
    n: int = 1


class Total(msgspec.Struct, tag=True, frozen=True):
    pass


class Crash(msgspec.Struct, tag=True, frozen=True):
    reason: str = "crash"


Msg = Add | Total | Crash


class Counter(Actor[Msg, int | None]):
    """A total that a restart must reset; no lifecycle hook of its own."""

    total = 0

    async def receive(self, message: Msg) -> int | None:
        match message:
            case Add(n=n):
                self.total += n
            case Total():
                return self.total
            case Crash(reason=reason):
                raise ValueError(reason)
        return None


class Accumulator(Counter):
    """A ``Counter`` whose lifecycle hooks are tallied per name."""

    def __init__(self, name: str = "", hooks: Tally[str] | None = None) -> None:
        self.total = 0
        self.name = name
        self.hooks: Tally[str] = Tally() if hooks is None else hooks
        self.last_error: Exception | None = None

    async def on_started(self) -> None:
        self.hooks[f"{self.name}:started"] += 1

    async def on_restarted(self, error: Exception) -> None:
        self.hooks[f"{self.name}:restarted"] += 1
        self.hooks[f"{self.name}:restarted-by:{error}"] += 1

    async def on_stopping(self) -> None:
        self.hooks[f"{self.name}:stopping"] += 1


async def test_crash_restarts_a_fresh_instance_at_the_same_address() -> None:
    hooks: Tally[str] = Tally()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Accumulator("a", hooks), name="acc")
        address = ref.address
        await ref.tell(Add(5))
        assert await ref.ask(Total(), timeout=5) == 5
        await ref.tell(Crash())
        # Sent while the actor restarts: served by the new instance.
        await ref.tell(Add(2))
        assert await ref.ask(Total(), timeout=5) == 2  # state was reset
        assert ref.address == address
        assert system.ref(address) == ref
        assert hooks["a:started"] == 1
        assert hooks["a:restarted"] == 1
        assert hooks["a:stopping"] == 1  # the crashed instance was told


async def test_handler_error_reaches_the_supervisor_as_the_same_object() -> None:
    seen: list[BaseException] = []

    class Raiser(Accumulator):
        async def receive(self, message: Msg) -> int | None:
            if isinstance(message, Crash):
                error = KeyError(message.reason)
                seen.append(error)
                raise error
            return await super().receive(message)

    async with ActorSystem() as system:
        ref = await system.spawn(Raiser, name="raiser")
        await ref.tell(Crash("the key"))
        assert await ref.ask(Total(), timeout=5) == 0
        failures = system.root.failures
        assert len(failures) == 1
        assert failures[0].error is seen[0]
        assert failures[0].address == ref.address
        assert failures[0].action == "restart"
        assert failures[0].incarnation == 0


async def test_three_crashes_are_tolerated_and_the_fourth_escalates() -> None:
    system = ActorSystem(intensity=RestartIntensity(max_restarts=3, within=5.0))
    with pytest.raises(SupervisionEscalated) as caught:  # noqa: PT012 - raised as the block exits
        async with system:
            ref = await system.spawn(Accumulator, name="looper")
            for crash in range(3):
                await ref.tell(Add(1))
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash(f"crash {crash}"), timeout=5)
                assert await ref.ask(Total(), timeout=5) == 0  # restarted, still serving
                assert system.failure is None
            with pytest.raises(ActorCrashed):
                await ref.ask(Crash("crash 3"), timeout=5)
            with anyio.fail_after(5):  # a regression fails fast instead of hanging
                await anyio.sleep_forever()  # the escalation cancels the block
    assert caught.value is system.failure
    assert "/user exceeded 3 restarts in 5 s" in str(caught.value)
    assert isinstance(caught.value.cause, ValueError)
    assert str(caught.value.cause) == "crash 3"
    with pytest.raises(ActorStopped):
        await ref.tell(Add(1))


async def test_a_nested_supervisor_escalates_to_its_parent_which_restarts_it() -> None:
    hooks: Tally[str] = Tally()
    spec = SupervisorSpec(
        "team",
        children=(ChildSpec("w", lambda: Accumulator("w", hooks)),),
        intensity=RestartIntensity(max_restarts=1, within=5.0),
    )
    async with ActorSystem() as system:
        team = await system.spawn_supervisor(spec)
        worker = team.child("w")
        for _ in range(2):
            await worker.tell(Crash("again"))
            assert await worker.ask(Total(), timeout=5) == 0
        actions = [f.action for f in team.failures]
        assert actions == ["restart", "escalate"]
        (escalated,) = system.root.failures
        assert escalated.address == team.address
        assert isinstance(escalated.error, SupervisionEscalated)
        assert escalated.error.cause is team.failures[-1].error
        assert escalated.action == "restart"
        assert hooks["w:restarted"] == 2
        assert system.failure is None


async def test_one_for_all_restarts_every_sibling() -> None:
    hooks: Tally[str] = Tally()
    spec = SupervisorSpec(
        "trio",
        children=tuple(
            ChildSpec(name, partial(Accumulator, name, hooks)) for name in ("a", "b", "c")
        ),
        strategy=RestartStrategy.ONE_FOR_ALL,
    )
    async with ActorSystem() as system:
        trio = await system.spawn_supervisor(spec)
        a, b, c = (trio.child(name) for name in ("a", "b", "c"))
        for ref in (a, b, c):
            await ref.tell(Add(10))
        await b.tell(Crash("b broke"))
        await anyio.wait_all_tasks_blocked()
        for ref in (a, b, c):
            assert await ref.ask(Total(), timeout=5) == 0
        for name in ("a", "b", "c"):
            assert hooks[f"{name}:started"] == 1
            assert hooks[f"{name}:restarted"] == 1
            assert hooks[f"{name}:restarted-by:b broke"] == 1
            assert hooks[f"{name}:stopping"] == 1
        assert [f.action for f in trio.failures] == ["restart-all"]


async def test_one_for_one_leaves_siblings_alone() -> None:
    hooks: Tally[str] = Tally()
    spec = SupervisorSpec(
        "pair",
        children=(
            ChildSpec("a", lambda: Accumulator("a", hooks)),
            ChildSpec("b", lambda: Accumulator("b", hooks)),
        ),
    )
    async with ActorSystem() as system:
        pair = await system.spawn_supervisor(spec)
        a, b = pair.child("a"), pair.child("b")
        await a.tell(Add(3))
        await b.tell(Crash())
        await anyio.wait_all_tasks_blocked()
        assert await a.ask(Total(), timeout=5) == 3
        assert hooks["a:restarted"] == 0
        assert hooks["b:restarted"] == 1


async def test_stopping_a_supervisor_stops_its_children() -> None:
    hooks: Tally[str] = Tally()
    spec = SupervisorSpec(
        "parent",
        children=(
            ChildSpec("x", lambda: Accumulator("x", hooks)),
            SupervisorSpec("inner", children=(ChildSpec("y", lambda: Accumulator("y", hooks)),)),
        ),
    )
    async with ActorSystem() as system:
        parent = await system.spawn_supervisor(spec)
        x = parent.child("x")
        y = system.ref(parent.address.child("inner").child("y"))
        assert await y.ask(Total(), timeout=5) == 0
        await system.stop(parent)
        assert hooks["x:stopping"] == 1
        assert hooks["y:stopping"] == 1
        for ref in (x, y):
            with pytest.raises(ActorStopped):
                await ref.tell(Add(1))
        assert system.root.children == ()


async def test_a_failing_start_hook_raises_at_spawn_and_leaves_nothing_behind() -> None:
    class Unstartable(Accumulator):
        async def on_started(self) -> None:
            raise OSError("no database")

    async with ActorSystem() as system:
        with pytest.raises(ActorCrashed, match="/user/u crashed: OSError: no database"):
            await system.spawn(Unstartable, name="u")
        assert system.root.children == ()
        ref = await system.spawn(Accumulator, name="u")  # the name is free again
        assert await ref.ask(Total(), timeout=5) == 0


class Quit(msgspec.Struct, tag=True, frozen=True):
    via_system: bool


class Quitter(Actor[Quit | Total, int | None]):
    def __init__(self, hooks: Tally[str]) -> None:
        self.hooks = hooks

    async def receive(self, message: Quit | Total) -> int | None:
        match message:
            case Quit(via_system=True):
                await self.context.system.stop(self.context.ref)
            case Quit(via_system=False):
                self.context.stop()
            case Total():
                return 0
        return None

    async def on_stopping(self) -> None:
        self.hooks["stopping"] += 1


@pytest.mark.parametrize("via_system", [False, True], ids=["context.stop", "system.stop"])
async def test_an_actor_can_stop_itself_and_is_not_restarted(via_system: bool) -> None:
    hooks: Tally[str] = Tally()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Quitter(hooks), name="quitter")
        with anyio.fail_after(2):  # no waiting on its own task
            await ref.tell(Quit(via_system=via_system))
            with pytest.raises(ActorStopped):
                await ref.ask(Total(), timeout=5)
        await anyio.wait_all_tasks_blocked()
        assert hooks["stopping"] == 1
        assert system.root.children == ()
        assert system.root.failures == ()


async def test_restarts_older_than_the_window_do_not_count() -> None:
    async with ActorSystem(intensity=RestartIntensity(max_restarts=1, within=0.1)) as system:
        ref = await system.spawn(Accumulator, name="occasional")
        for _ in range(3):
            with pytest.raises(ActorCrashed):
                await ref.ask(Crash(), timeout=5)
            await anyio.sleep(0.15)  # the previous restart leaves the window
        assert await ref.ask(Total(), timeout=5) == 0
        assert [f.action for f in system.root.failures] == ["restart"] * 3
        assert system.failure is None


async def test_stop_child_gives_up_on_one_child_and_keeps_the_others() -> None:
    """``on_exhausted="stop_child"``: each child has its own intensity; the
    one past it is stopped for good, its siblings and the supervisor go on."""
    async with ActorSystem() as system:
        sup = await system.spawn_supervisor(
            SupervisorSpec(
                "run",
                intensity=RestartIntensity(max_restarts=2, within=60.0),
                on_exhausted="stop_child",
            )
        )
        bad = await sup.spawn(Accumulator, name="bad")
        good = await sup.spawn(Accumulator, name="good")
        for _ in range(2):
            with pytest.raises(ActorCrashed):
                await bad.ask(Crash(), timeout=1.0)
        await good.tell(Add(n=5))
        with pytest.raises(ActorCrashed):  # the third crash: past its own intensity
            await bad.ask(Crash(), timeout=1.0)
        with pytest.raises(ActorStopped):
            await bad.ask(Total(), timeout=1.0)
        assert await good.ask(Total(), timeout=1.0) == 5
        # The sibling's restarts were its own: two crashes are still allowed.
        for _ in range(2):
            with pytest.raises(ActorCrashed):
                await good.ask(Crash(), timeout=1.0)
        assert await good.ask(Total(), timeout=1.0) == 0
        assert [f.action for f in sup.failures].count("give-up") == 1
        assert system.failure is None


def test_stop_child_needs_one_for_one() -> None:
    with pytest.raises(ValueError, match="ONE_FOR_ONE"):
        SupervisorSpec("x", strategy=RestartStrategy.ONE_FOR_ALL, on_exhausted="stop_child")


class Plain(Counter):
    """No start hook of its own: ready as soon as it is built."""

    def __init__(self, log: list[str]) -> None:
        self.total = 0
        self.log = log


class AnnouncesRestarts(Plain):
    """Only ``on_restarted`` (the rollout actor's shape): no hook at the first start."""

    async def on_restarted(self, error: Exception) -> None:
        self.log.append(f"restarted by {error}")


async def test_a_failing_factory_of_an_actor_without_hooks_raises_at_spawn() -> None:
    def broken() -> Plain:
        raise OSError("no config")

    async with ActorSystem() as system:
        with pytest.raises(ActorCrashed, match="/user/p crashed: OSError: no config"):
            await system.spawn(broken, name="p")
        assert system.root.children == ()
        log: list[str] = []
        ref = await system.spawn(lambda: Plain(log), name="p")  # the name is free again
        await ref.tell(Add(2))
        assert await ref.ask(Total(), timeout=5) == 2


@pytest.mark.parametrize("actor", [Plain, AnnouncesRestarts])
async def test_an_actor_without_a_start_hook_restarts_fresh_and_keeps_its_mailbox(
    actor: type[Plain],
) -> None:
    log: list[str] = []
    async with ActorSystem() as system:
        ref = await system.spawn(partial(actor, log), name="p")
        # Sent before its task first ran: queued, served in order.
        await ref.tell(Add(5))
        await ref.tell(Crash("boom"))
        await ref.tell(Add(1))  # served by the next incarnation
        assert await ref.ask(Total(), timeout=5) == 1
        (failure,) = system.root.failures
        assert str(failure.error) == "boom"
        assert failure.action == "restart"
        assert log == ([] if actor is Plain else ["restarted by boom"])
        await system.stop(ref)
        with pytest.raises(ActorStopped):
            await ref.ask(Total(), timeout=5)


class AnswersOnce(Actor[Msg, int | None]):
    """Stops once it has answered (``stop_when_answered``), from a plain
    ``receive`` that returns the work's coroutine."""

    def receive(self, message: Msg) -> Coroutine[Any, Any, int | None]:
        self.context.stop_when_answered()
        return self._work(message)

    async def _work(self, message: Msg) -> int | None:
        await anyio.lowlevel.checkpoint()
        match message:
            case Crash(reason=reason):
                raise ValueError(reason)
            case Add(n=n):
                return n
        return None


async def test_stop_when_answered_stops_after_the_reply_and_a_crash_first_restarts() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(AnswersOnce, name="once")
        with pytest.raises(ActorCrashed, match="boom"):
            await ref.ask(Crash("boom"), timeout=5)
        # The crash came before any answer: restarted, and it answers now.
        assert await ref.ask(Add(3), timeout=5) == 3
        with pytest.raises(ActorStopped):
            await ref.ask(Add(4), timeout=5)
        await anyio.wait_all_tasks_blocked()
        assert system.root.children == ()
        (failure,) = system.root.failures
        assert failure.action == "restart"
