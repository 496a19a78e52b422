"""The system's lifetime, task hygiene, addresses, and the loop runner."""

from __future__ import annotations

import asyncio
import sys

import anyio
import msgspec
import pytest

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorNameTaken, ActorNotFound, SystemStateError
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._event_loop import run, uvloop_available
from agentrt.runtime.kernel._system import ActorSystem, SystemState

pytestmark = pytest.mark.uvloop


class Echo(msgspec.Struct, tag=True, frozen=True):
    text: str


class Echoer(Actor[Echo, str]):
    async def receive(self, message: Echo) -> str:
        match message:
            case Echo(text=text):
                return text


@pytest.mark.anyio
async def test_closing_the_system_leaves_no_task_running() -> None:
    before = asyncio.all_tasks()
    async with ActorSystem() as system:
        refs = [await system.spawn(Echoer, name=f"e{i}") for i in range(50)]
        assert len(asyncio.all_tasks() - before) >= 50
        assert await refs[-1].ask(Echo("hi"), timeout=5) == "hi"
    assert asyncio.all_tasks() == before
    assert system.state is SystemState.CLOSED


@pytest.mark.anyio
async def test_a_closed_system_cannot_reopen_and_refuses_work() -> None:
    system = ActorSystem()
    assert system.state is SystemState.UNOPENED
    with pytest.raises(SystemStateError, match="unopened"):
        await system.spawn(Echoer, name="early")
    async with system:
        with pytest.raises(SystemStateError, match="already open"):
            await system.__aenter__()
    with pytest.raises(SystemStateError, match="Cannot reopen an actor system once it has been"):
        async with system:
            pass
    with pytest.raises(SystemStateError, match="closed"):
        await system.spawn(Echoer, name="late")


@pytest.mark.anyio
async def test_an_error_in_the_block_propagates_unwrapped() -> None:
    with pytest.raises(LookupError, match="mine"):  # noqa: PT012 - raised as the block exits
        async with ActorSystem() as system:
            await system.spawn(Echoer, name="e")
            raise LookupError("mine")


@pytest.mark.anyio
async def test_an_address_survives_json_and_resolves_to_its_ref() -> None:
    async with ActorSystem(system_id="node-a") as system:
        ref = await system.spawn(Echoer, name="echo")
        assert ref.address.system == "node-a"
        assert ref.address.path == "/user/echo"
        assert ref.address.name == "echo"
        assert str(ref.address) == "actor://node-a/user/echo"

        wire = ref.address.to_json()
        assert msgspec.json.decode(wire) == {
            "system": "node-a",
            "path": "/user/echo",
            "uid": ref.address.uid,
        }
        decoded = ActorAddress.from_json(wire)
        assert decoded == ref.address
        resolved = system.ref(decoded)
        assert resolved == ref
        assert await resolved.ask(Echo("via json"), timeout=5) == "via json"
        # uid 0 means "whatever lives at this path now".
        assert system.ref(ActorAddress("node-a", "/user/echo")) == ref

        with pytest.raises(ActorNotFound, match="not 'node-a'"):
            system.ref(ActorAddress("node-b", "/user/echo"))
        with pytest.raises(ActorNotFound, match="no live actor"):
            system.ref(decoded.child("nobody"))
        with pytest.raises(ActorNotFound, match="supervisor"):
            system.ref(system.root.address)

        with pytest.raises(ActorNameTaken, match="/user/echo already exists"):
            await system.spawn(Echoer, name="echo")
        await system.stop(ref)
        with pytest.raises(ActorNotFound):
            system.ref(decoded)
        newer = await system.spawn(Echoer, name="echo")
        with pytest.raises(ActorNotFound, match=f"uid {decoded.uid} is gone"):
            system.ref(decoded)
        assert system.ref(ActorAddress("node-a", "/user/echo")) == newer


def test_invalid_names_are_refused() -> None:
    with pytest.raises(ValueError, match="invalid actor name"):
        ActorAddress("s", "/user").child("a/b")
    with pytest.raises(ValueError, match="invalid actor name"):
        ActorAddress("s", "/user").child("")


def test_run_uses_uvloop_when_installed() -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    if uvloop_available():
        assert run(loop_module).startswith("uvloop")
    assert run(loop_module, use_uvloop=False).startswith("asyncio")


def test_run_passes_arguments_and_returns_the_result() -> None:
    async def echo_through_an_actor(text: str) -> str:
        async with ActorSystem() as system:
            ref = await system.spawn(Echoer, name="e")
            return await ref.ask(Echo(text), timeout=5)

    assert run(echo_through_an_actor, "round trip") == "round trip"
    assert "uvloop" in sys.modules or not uvloop_available()


@pytest.mark.anyio
async def test_many_actors_stop_promptly() -> None:
    with anyio.fail_after(10):
        async with ActorSystem() as system:
            for i in range(2000):
                await system.spawn(Echoer, name=f"e{i}")
