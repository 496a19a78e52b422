"""Managed model servers as supervised actors.

:class:`ManagedServerActor` owns one :class:`ManagedServer` and runs it as a
service of its current incarnation (``ActorContext.start_service``), so the
server's process, output pumps and watchers live inside the incarnation
while the actor keeps answering requests:

- ``Status()`` → :class:`ManagedServerStatus` (state, base URL, pid, restarts);
- ``Restart()`` → replace the server process now (no backoff, not counted as
  a crash; during a restart delay, end the delay); replies at once;
- ``Stop()`` → stop the server and the actor for good; replies at once.

Supervision:

- a crash of the server process is restarted by the service itself, with
  capped exponential backoff (``ManagedServerConfig``);
- when the service gives up (too many crashes in a row) the actor crashes
  with the :class:`ManagedServerError`, and its supervisor restarts it within
  its restart intensity; the fresh incarnation waits ``backoff_max_s`` before
  starting the server again (``Status`` says ``backoff`` meanwhile);
- stopping the actor, its supervisor or the system cancels the service,
  which stops the server's whole process group (SIGTERM, SIGKILL after
  ``stop_grace_s``); the actor is idle between requests, so this is prompt,
  during a backoff too.

:func:`spawn_managed_server` starts one and returns once the server is
healthy (the first incarnation's readiness is the server's health).

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import anyio
import msgspec
from anyio.abc import TaskStatus

from agentrt.runtime.actors import Actor, ActorCrashed, ActorRef, ActorSystem, SupervisorRef
from agentrt.runtime.models.managed import ManagedServer
from agentrt.runtime.models.managed_config import (
    ManagedServerConfig,
    ManagedServerError,
    ServerState,
)

__all__ = [
    "ManagedServerActor",
    "ManagedServerHandle",
    "ManagedServerRequest",
    "ManagedServerStatus",
    "Restart",
    "Status",
    "Stop",
    "spawn_managed_server",
]

#: Extra seconds, beyond the startup timeout and the stop grace, that
#: ``spawn_managed_server`` waits before declaring the start hung.
_SPAWN_SLACK_S: Final = 10.0
#: Requests are answered at once (the server runs as a service), so a few
#: slots are plenty; more callers than that wait for room (backpressure).
_MAILBOX_CAPACITY: Final = 8
#: Default deadline of the handle's requests.
_ASK_TIMEOUT_S: Final = 10.0


class Status(msgspec.Struct, tag=True, frozen=True):
    """Report the server's state."""


class Restart(msgspec.Struct, tag=True, frozen=True):
    """Replace the server process now (or end a restart delay)."""


class Stop(msgspec.Struct, tag=True, frozen=True):
    """Stop the server and the actor for good (no restart)."""


ManagedServerRequest = Status | Restart | Stop


class ManagedServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What a :class:`ManagedServerActor` reports (the reply to every request)."""

    name: str
    state: ServerState
    base_url: str
    #: Pid (and process group id) of the running server process.
    pid: int | None
    #: Server processes restarted after a crash, across incarnations.
    restarts: int
    #: Times the actor itself was restarted (the service had given up).
    actor_restarts: int
    last_exit_code: int | None


class ManagedServerActor(Actor[ManagedServerRequest, ManagedServerStatus]):
    """Runs ``server`` as a service and answers requests about it."""

    __slots__ = ("_delaying", "_server", "_serving", "_wake")

    def __init__(self, server: ManagedServer) -> None:
        self._server = server
        #: A ``_serve`` service is running (waiting, or inside ``server.run``).
        self._serving = False
        #: The service waits out the restart delay of a fresh incarnation.
        self._delaying = False
        self._wake: anyio.Event | None = None

    async def on_started(self) -> None:
        # Ready when the server is healthy; a failed first start raises here.
        await self.context.start_service(self._serve, 0.0, name="server")

    async def on_restarted(self, error: Exception) -> None:
        # Not waiting for health: the supervisor waits for this hook.
        delay = self._server.config.backoff_max_s
        self.context.start_soon_service(self._serve, delay, name="server")

    async def _serve(
        self, delay_s: float, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._serving = True
        try:
            if delay_s > 0:
                self._delaying = True
                self._wake = anyio.Event()
                with anyio.move_on_after(delay_s):
                    await self._wake.wait()
                self._delaying = False
            await self._server.run(task_status=task_status)
        finally:
            self._serving = self._delaying = False

    async def receive(self, message: ManagedServerRequest) -> ManagedServerStatus:
        match message:
            case Status():
                return self._status()
            case Restart():
                if self._delaying and self._wake is not None:
                    self._wake.set()
                elif not self._server.request_restart() and not self._serving:
                    # The server had been stopped from outside: run it again.
                    self.context.start_soon_service(self._serve, 0.0, name="server")
                return self._status()
            case Stop():
                # The incarnation ends after this message; that cancels the
                # service, which stops the process group.
                self.context.stop()
                return msgspec.structs.replace(self._status(), state=ServerState.STOPPING)

    def _status(self) -> ManagedServerStatus:
        server = self._server
        return ManagedServerStatus(
            name=server.name,
            state=ServerState.BACKOFF if self._delaying else server.state,
            base_url=server.base_url,
            pid=server.pid,
            restarts=server.restarts,
            actor_restarts=self.context.incarnation,
            last_exit_code=server.last_exit_code,
        )


@dataclass(frozen=True, slots=True)
class ManagedServerHandle:
    """A managed server spawned as an actor: its ref, and requests to it."""

    ref: ActorRef[ManagedServerRequest, ManagedServerStatus]
    #: The server object (outlives incarnations): ``wait_healthy``, output.
    server: ManagedServer
    system: ActorSystem

    @property
    def base_url(self) -> str:
        return self.server.base_url

    async def status(self, *, timeout: float = _ASK_TIMEOUT_S) -> ManagedServerStatus:  # noqa: ASYNC109
        return await self.ref.ask(Status(), timeout=timeout)

    async def restart(self, *, timeout: float = _ASK_TIMEOUT_S) -> ManagedServerStatus:  # noqa: ASYNC109
        """Replace the server process; ``server.wait_healthy()`` then waits
        for the fresh one."""
        return await self.ref.ask(Restart(), timeout=timeout)

    async def stop(self) -> None:
        """Stop the server and the actor for good; returns once both are
        gone (or the system's stop timeout passed twice)."""
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
    :class:`ManagedServerError` here, and leaves no actor behind."""
    server = ManagedServer(config)
    try:
        with anyio.fail_after(config.startup_timeout_s + config.stop_grace_s + _SPAWN_SLACK_S):
            ref: ActorRef[ManagedServerRequest, ManagedServerStatus] = await system.spawn(
                lambda: ManagedServerActor(server),
                name=name,
                parent=parent,
                mailbox_capacity=_MAILBOX_CAPACITY,
            )
    except ActorCrashed as exc:
        if isinstance(exc.cause, ManagedServerError):
            raise exc.cause from None  # the server's own error, not the kernel's wrapper
        raise
    return ManagedServerHandle(ref=ref, server=server, system=system)
