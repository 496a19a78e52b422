"""Managed model servers as supervised actors.

:class:`ManagedServerActor` owns one :class:`ManagedServer` for as long as it
lives: it runs the server's service loop as its one long message (it sends
itself ``_Serve`` on start), so the server's process, output pumps and
watchers all live inside the actor's incarnation, and the kernel's
supervision applies:

- a crash of the server process is restarted by the service itself, with
  capped exponential backoff (``ManagedServerConfig``);
- when the service gives up (first start failed, or too many crashes in a
  row) the actor fails with the :class:`ManagedServerError`, and its
  supervisor restarts it within its restart intensity; the fresh incarnation
  waits ``backoff_max_s`` before starting the server again;
- stopping the actor, its supervisor or the system stops the server's whole
  process group (SIGTERM, SIGKILL after ``stop_grace_s``).

The actor answers no requests (its mailbox is busy with ``_Serve``); read
state from the :class:`ManagedServer` handle, which outlives incarnations.
:func:`spawn_managed_server` starts one and returns once it is healthy.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import anyio
import msgspec

from agentrt.runtime.actors import Actor, ActorRef, ActorSystem, SupervisorRef
from agentrt.runtime.models.managed import ManagedServer
from agentrt.runtime.models.managed_config import ManagedServerConfig

__all__ = ["ManagedServerActor", "ManagedServerHandle", "spawn_managed_server"]

#: Extra seconds, beyond the startup timeout and the stop grace, that
#: ``spawn_managed_server`` waits before declaring the start hung.
_SPAWN_SLACK_S: Final = 10.0


class _Serve(msgspec.Struct, tag=True, frozen=True):
    """Run the server (the actor sends this to itself when it starts)."""

    delay_s: float = 0.0


class ManagedServerActor(Actor[_Serve, None]):
    """Runs ``server`` until stopped; fails when the server gives up."""

    __slots__ = ("_server",)

    def __init__(self, server: ManagedServer) -> None:
        self._server = server

    async def on_started(self) -> None:
        self.context.ref.tell_nowait(_Serve())

    async def on_restarted(self, error: Exception) -> None:
        # Not a sleep here: the supervisor awaits this hook before it goes on.
        self.context.ref.tell_nowait(_Serve(delay_s=self._server.config.backoff_max_s))

    async def receive(self, message: _Serve) -> None:
        if message.delay_s > 0:
            await anyio.sleep(message.delay_s)
        await self._server.run()


@dataclass(frozen=True, slots=True)
class ManagedServerHandle:
    """A managed server spawned as an actor: its ref and its state."""

    ref: ActorRef[_Serve, None]
    server: ManagedServer
    system: ActorSystem

    @property
    def base_url(self) -> str:
        return self.server.base_url

    async def stop(self) -> None:
        """Stop the server and the actor for good (no restart)."""
        self.server.request_stop()  # the service returns; the actor goes idle
        await self.system.stop(self.ref)


async def spawn_managed_server(
    system: ActorSystem,
    config: ManagedServerConfig,
    *,
    name: str,
    parent: SupervisorRef | None = None,
) -> ManagedServerHandle:
    """Spawn a :class:`ManagedServerActor` for ``config`` and return once the
    server is healthy.  A first start that fails raises its
    :class:`ManagedServerError` here (and the actor is stopped)."""
    server = ManagedServer(config)
    ref: ActorRef[_Serve, None] = await system.spawn(
        lambda: ManagedServerActor(server), name=name, parent=parent, mailbox_capacity=2
    )
    handle = ManagedServerHandle(ref=ref, server=server, system=system)
    try:
        with anyio.fail_after(config.startup_timeout_s + config.stop_grace_s + _SPAWN_SLACK_S):
            await server.wait_healthy()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await handle.stop()
        raise
    return handle
