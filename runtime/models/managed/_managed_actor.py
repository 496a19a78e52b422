"""Managed model servers as supervised actors: ``ManagedServerActor``, its
requests and status, ``spawn_managed_server``.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import anyio
import msgspec
from anyio.abc import TaskStatus

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorCrashed
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.models.managed._managed_config import (
    ManagedServerConfig,
    ManagedServerError,
    ServerState,
)
from agentrt.runtime.models.managed._managed_server import ManagedServer
from agentrt.runtime.observe._log import get_logger

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

_log = get_logger(__name__)

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
    #: Times the actor itself was restarted (a bug in it, not a server crash).
    actor_restarts: int
    last_exit_code: int | None
    #: Why the server gave up (state ``failed``), with its last output lines.
    error: str | None = None


class ManagedServerActor(Actor[ManagedServerRequest, ManagedServerStatus]):
    """Runs ``server`` as a service of its incarnation and answers
    ``Status``, ``Restart`` (replace the process now, not counted as a
    crash; ends a backoff; starts a failed server again) and ``Stop`` (for
    good); the last two reply at once.  A crashed process is restarted by
    the server itself; once its policy gives up it is ``failed`` until a
    ``Restart``, and the actor stays up to say so.  The supervisor restarts
    the actor only for a bug in it.  Stopping the actor stops the server's
    process group promptly (SIGTERM, SIGKILL after ``stop_grace_s``)."""

    __slots__ = ("_server", "_serving")

    def __init__(self, server: ManagedServer) -> None:
        self._server = server
        #: A ``_serve`` service is running (inside ``server.run``).
        self._serving = False

    async def on_started(self) -> None:
        # Ready when the server is healthy; a failed first start raises here.
        await self.context.start_service(self._serve, name="server")

    async def on_restarted(self, error: Exception) -> None:
        # Not waiting for health: the supervisor waits for this hook.
        self.context.start_soon_service(self._serve_again, name="server")

    async def _serve(self, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the server; once it gave up, keep it failed (no crash)."""
        status = _Reported(task_status)
        self._serving = True
        try:
            await self._server.run(task_status=status)
        except ManagedServerError as exc:
            if not status.reported:
                raise  # the first start failed: the caller of start_service hears it
            _log.error("managed server gave up", server=self._server.name, error=str(exc))
        finally:
            self._serving = False

    async def _serve_again(self) -> None:
        try:
            await self._serve()
        except ManagedServerError as exc:  # stays failed; Status says why
            _log.error("managed server did not start", server=self._server.name, error=str(exc))

    async def receive(self, message: ManagedServerRequest) -> ManagedServerStatus:
        match message:
            case Status():
                return self._status()
            case Restart():
                if not self._server.request_restart() and not self._serving:
                    # Failed, or stopped from outside: run it again.
                    self.context.start_soon_service(self._serve_again, name="server")
                return self._status()
            case Stop():
                # The incarnation ends after this message; that cancels the
                # service, which stops the process group.
                self.context.stop()
                return msgspec.structs.replace(self._status(), state=ServerState.STOPPING)

    def _status(self) -> ManagedServerStatus:
        server = self._server
        failed = server.state is ServerState.FAILED and server.failure is not None
        return ManagedServerStatus(
            name=server.name,
            state=server.state,
            base_url=server.base_url,
            pid=server.pid,
            restarts=server.restarts,
            actor_restarts=self.context.incarnation,
            last_exit_code=server.last_exit_code,
            error=str(server.failure) if failed else None,
        )


class _Reported:
    """A ``task_status`` that forwards ``started`` and remembers it was called."""

    __slots__ = ("_status", "reported")

    def __init__(self, status: TaskStatus[Any]) -> None:
        self._status = status
        self.reported = False

    def started(self, value: str | None = None) -> None:
        self.reported = True
        self._status.started(value)


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
        gone (or the system's stop timeout passed twice).  Shielded: a
        cancelled owner still stops its server process."""
        with anyio.CancelScope(shield=True):
            await self.system.stop(self.ref)


async def spawn_managed_server(
    system: ActorSystem,
    config: ManagedServerConfig,
    *,
    name: str | None = None,
    parent: SupervisorRef | None = None,
) -> ManagedServerHandle:
    """Spawn a :class:`ManagedServerActor` for ``config`` and return once the
    server is healthy.

    ``name`` is the actor's name (default: ``config.name``; an actor name,
    ``[A-Za-z0-9_.:@+-]``), ``parent`` the supervisor it lives under
    (default: the system's ``/user``).  A first start that fails raises its
    :class:`ManagedServerError` here and leaves no actor behind; a start
    that outlives ``startup_timeout_s`` (plus the stop grace and some slack)
    raises ``TimeoutError``; an invalid name raises ``ValueError``."""
    server = ManagedServer(config)
    try:
        with anyio.fail_after(config.startup_timeout_s + config.stop_grace_s + _SPAWN_SLACK_S):
            ref: ActorRef[ManagedServerRequest, ManagedServerStatus] = await system.spawn(
                lambda: ManagedServerActor(server),
                name=name or config.name,
                parent=parent,
                mailbox_capacity=_MAILBOX_CAPACITY,
            )
    except ActorCrashed as exc:
        if isinstance(exc.cause, ManagedServerError):
            raise exc.cause from None  # the server's own error, not the kernel's wrapper
        raise
    return ManagedServerHandle(ref=ref, server=server, system=system)
