"""What an actor is: ``Actor`` (typed ``receive`` plus lifecycle hooks) and
``ActorContext``, what a running instance may know about its place.

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, TypeVarTuple

from agentrt.runtime.kernel._deferred import Deferred

if TYPE_CHECKING:
    from agentrt.runtime.kernel._address import ActorAddress
    from agentrt.runtime.kernel._cell import ActorCell
    from agentrt.runtime.kernel._ref import ActorRef
    from agentrt.runtime.kernel._system import ActorSystem

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")
PosArgsT = TypeVarTuple("PosArgsT")


class ActorContext(Generic[MsgT, ReplyT]):
    """What a running actor may know about its place in the system."""

    __slots__ = ("_cell",)

    def __init__(self, cell: ActorCell[MsgT, ReplyT]) -> None:
        self._cell = cell

    @property
    def address(self) -> ActorAddress:
        return self._cell.address

    @property
    def ref(self) -> ActorRef[MsgT, ReplyT]:
        """A ref to this actor (to hand to others, or to subscribe to topics)."""
        return self._cell.ref

    @property
    def incarnation(self) -> int:
        """0 for the first instance at this address, +1 per restart."""
        return self._cell.incarnation

    @property
    def system(self) -> ActorSystem:
        """The system, to spawn or resolve other actors."""
        return self._cell.system

    async def start_service(
        self, func: Callable[..., Awaitable[Any]], *args: object, name: str | None = None
    ) -> Any:
        """Start ``func(*args, task_status=...)`` as a service of the running
        incarnation and return what it passes to ``task_status.started()``.

        Like ``TaskGroup.start``: an exception before readiness is raised
        here (and does not crash the actor).  After readiness the service runs
        until it returns, or until the incarnation ends (stop, crash,
        restart), which cancels it; if it raises, the actor crashes with that
        exception.  Call it from the actor's hooks, handlers or services;
        ``ActorStopped`` when the actor is stopping or between incarnations.
        ``name`` names the task (``<actor path>#<name>``) in logs and dumps.
        """
        return await self._cell.service_scope().start(func, args, name)

    def start_soon_service(
        self,
        func: Callable[[*PosArgsT], Awaitable[Any]],
        *args: *PosArgsT,
        name: str | None = None,
    ) -> None:
        """Start ``func(*args)`` as a service without waiting for it (same
        ownership and failure rules as :meth:`start_service`); usable in
        hooks that must return promptly, such as ``on_restarted``."""
        self._cell.service_scope().start_soon(func, args, name)

    def defer(
        self,
        func: Callable[[*PosArgsT], Awaitable[ReplyT]],
        *args: *PosArgsT,
        name: str | None = None,
    ) -> Deferred[ReplyT]:
        """Answer the request being handled from a service: start
        ``func(*args)`` as a service of the running incarnation and return a
        :class:`Deferred` for ``receive`` to return at once.  What ``func``
        returns is the reply; if it raises, the asker gets ``ActorCrashed``
        and the actor crashes; if the asker gives up, ``func`` is cancelled;
        if the incarnation ends first, the asker gets ``ActorStopped``.
        Requests answered this way run side by side, so ``func`` must not
        assume it has the actor to itself.  ``ActorStopped`` when the actor
        is stopping or between incarnations."""
        scope = self._cell.service_scope()
        deferred: Deferred[ReplyT] = Deferred(scope)
        scope.start_soon(deferred.run, (func, args), name or "reply")
        return deferred

    def stop(self) -> None:
        """Stop this actor once the current message is handled.

        The mailbox closes at once: queued requests get ``ActorStopped``,
        queued tells are dropped, and the supervisor does not restart it.
        """
        self._cell.request_stop("the actor stopped itself")

    def stop_when_answered(self) -> None:
        """Stop this actor (as ``stop`` does) once the message in hand is
        handled and its reply given, but not before: the mailbox stays open
        while it is handled, and a crash before the reply is restarted as
        ever.  For a ``receive`` that is a plain method returning the
        awaitable doing the work, and can say only before the work that it
        is the actor's last.  A deferred
        reply is cancelled by the stop: call ``stop`` from its service."""
        self._cell.stop_answered = True


class Actor(Generic[MsgT, ReplyT]):
    """Base of user actors: override ``receive`` and, if needed, the hooks.

    Subclass ``Actor[Msg, Reply]`` with the message union it accepts (tagged
    msgspec structs, dispatched with ``match``) and the reply type
    ``receive`` returns (``ask`` gets it; ``tell`` discards it).  Work that
    must go on while the actor answers messages runs as a service
    (``context.start_service``); a long request is answered from one
    (``receive`` returns ``context.defer(...)``)."""

    __slots__ = ("_context",)

    _context: ActorContext[MsgT, ReplyT]

    @property
    def context(self) -> ActorContext[MsgT, ReplyT]:
        """This actor's context; set by the system before ``on_started``."""
        try:
            return self._context
        except AttributeError:
            raise RuntimeError(
                f"{type(self).__name__} has no context yet: it is set when the "
                "system spawns the actor, before on_started"
            ) from None

    async def receive(self, message: MsgT) -> ReplyT | Deferred[ReplyT]:
        """Handle one message; the return value is the reply to an ``ask``
        (or ``context.defer(...)``: a service produces it later)."""
        raise NotImplementedError(f"{type(self).__name__} must implement receive()")

    async def on_started(self) -> None:
        """Runs before the first message of a freshly spawned instance."""

    async def on_restarted(self, error: Exception) -> None:
        """Runs on the fresh instance that replaces a failed one (instead of
        ``on_started``); ``error`` is the failure that caused the restart.
        Bounded by the system's restart timeout; by default calls
        ``on_started``."""
        await self.on_started()

    async def on_stopping(self) -> None:
        """Runs when this instance goes away (stop, crash, restart of a
        sibling, shutdown); shielded and bounded by the system's stop timeout."""


def attach_context(actor: Actor[MsgT, ReplyT], context: ActorContext[MsgT, ReplyT]) -> None:
    """Give a fresh instance its context (the kernel calls this, once)."""
    actor._context = context
