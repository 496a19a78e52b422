"""``ActorSystem``: the root of the supervision tree and its lifetime.

An async context manager with a state, like an httpx client: open it once,
spawn actors inside it, and closing it stops every actor (structured
concurrency: all actor tasks live in task groups below the one the system
opens, so none survives it).  Top-level actors live under the root
supervisor ``/user`` (one-for-one, the system's restart intensity).  If the
root supervisor itself gives up, the system records the
:class:`SupervisionEscalated` error (:attr:`ActorSystem.failure`), cancels the
body of the ``async with`` block like a failing task group would, and raises
the error when the block exits: a crash loop never vanishes silently.

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import anyio
from anyio.abc import TaskGroup

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._actor_errors import ActorNotFound, SystemStateError
from agentrt.runtime.kernel._actor_spec import RestartIntensity, SupervisorSpec
from agentrt.runtime.kernel._address import ActorAddress, validate_name
from agentrt.runtime.kernel._cell import ActorCell
from agentrt.runtime.kernel._directory import Directory
from agentrt.runtime.kernel._mailbox import DEFAULT_MAILBOX_CAPACITY
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.kernel._supervisor import Child, Supervisor
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._timers import AskDeadlines
from agentrt.runtime.observe._log import get_logger

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")

#: How long an actor's ``on_stopping`` (and a graceful stop) may take before
#: it is cut short: long enough to flush a write, short enough that shutdown
#: of a large system stays prompt.
DEFAULT_STOP_TIMEOUT: Final = 5.0
#: How long an actor's ``on_restarted`` hook may take: its supervisor waits
#: for it before handling any other failure, so it must not hang; past it the
#: new incarnation counts as failed (``TimeoutError``).  Long work belongs in a
#: service started from the hook (``context.start_soon_service``).
DEFAULT_RESTART_TIMEOUT: Final = 5.0


class SystemState(enum.Enum):
    UNOPENED = 1
    OPENED = 2
    CLOSED = 3


class ActorSystem:
    """Hosts supervised actors; use as ``async with ActorSystem() as system:``."""

    def __init__(
        self,
        *,
        system_id: str | None = None,
        intensity: RestartIntensity | None = None,
        mailbox_capacity: int = DEFAULT_MAILBOX_CAPACITY,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        restart_timeout: float = DEFAULT_RESTART_TIMEOUT,
    ) -> None:
        if mailbox_capacity < 1:
            raise ValueError(f"mailbox capacity must be >= 1, got {mailbox_capacity}")
        if restart_timeout <= 0:
            raise ValueError(f"restart timeout must be > 0, got {restart_timeout}")
        self.system_id = validate_name(system_id) if system_id else uuid.uuid4().hex[:12]
        self.mailbox_capacity = mailbox_capacity
        self.stop_timeout = stop_timeout
        self.restart_timeout = restart_timeout
        self._directory = Directory(self.system_id)
        self._deadlines = AskDeadlines()
        root_spec = SupervisorSpec("user", intensity=intensity or RestartIntensity())
        self._root = Supervisor(
            self._directory.new_address(None, "user"),
            root_spec,
            parent=self,
            system=self,
            directory=self._directory,
            deadlines=self._deadlines,
        )
        self._state = SystemState.UNOPENED
        self._tg: TaskGroup | None = None
        self._failure: Exception | None = None

    @property
    def state(self) -> SystemState:
        return self._state

    @property
    def failure(self) -> Exception | None:
        """Why the system failed (the root supervisor escalated), if it did."""
        return self._failure

    @property
    def root(self) -> SupervisorRef:
        """The ``/user`` supervisor that top-level actors live under."""
        return SupervisorRef(self._root)

    # -- lifetime -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is SystemState.OPENED:
            raise SystemStateError("The actor system is already open.")
        if self._state is SystemState.CLOSED:
            raise SystemStateError("Cannot reopen an actor system once it has been closed.")
        self._state = SystemState.OPENED
        tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            self._root.handle = await self._root.launch(tg, None)
        except BaseException as exc:
            self._state = SystemState.CLOSED
            await tg.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._tg = tg
        self._directory.root = self._root
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg = self._tg
        if tg is None:
            return
        self._state = SystemState.CLOSED
        self._tg = None
        tg.cancel_scope.cancel()
        # Only a cancellation goes into the group: it may be the group's own
        # (after a failure), which the group must see to absorb it and which
        # is then replaced by the failure below.  Anything else the body
        # raised propagates unchanged instead of inside an ExceptionGroup.
        cancelled = exc if isinstance(exc, anyio.get_cancelled_exc_class()) else None
        try:
            await tg.__aexit__(
                type(cancelled) if cancelled else None,
                cancelled,
                cancelled.__traceback__ if cancelled else None,
            )
        finally:
            self._root.close("the actor system is closed")
            self._directory.root = None
            self._deadlines.close(self._root.address)
        if self._failure is not None:
            raise self._failure

    # -- FailureSink for the root supervisor --------------------------------------

    def child_failed(self, child: Child, incarnation: int, error: Exception) -> None:
        if self._failure is None:
            self._failure = error
            get_logger(__name__).error(
                "actor system failed", system=self.system_id, error=str(error)
            )
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    def child_exited(self, child: Child) -> None:
        """The root only ends by cancellation; nothing to do."""

    # -- spawning, stopping, resolving -------------------------------------------

    def _require_open(self) -> None:
        if self._state is not SystemState.OPENED:
            raise SystemStateError(
                f"The actor system is {self._state.name.lower()}; use `async with` to open it."
            )

    async def spawn(
        self,
        factory: Callable[[], Actor[MsgT, ReplyT]],
        *,
        name: str,
        parent: SupervisorRef | None = None,
        mailbox_capacity: int | None = None,
    ) -> ActorRef[MsgT, ReplyT]:
        """Start an actor (under ``parent``, default ``/user``) and return its
        ref once ``on_started`` has run; a start-hook error raises
        ``ActorCrashed`` here."""
        self._require_open()
        return await (parent or self.root).spawn(
            factory, name=name, mailbox_capacity=mailbox_capacity
        )

    async def spawn_supervisor(
        self, spec: SupervisorSpec, *, parent: SupervisorRef | None = None
    ) -> SupervisorRef:
        """Start a supervisor and its children (in spec order)."""
        self._require_open()
        return await (parent or self.root).spawn_supervisor(spec)

    async def stop(self, ref: ActorRef[Any, Any] | SupervisorRef) -> None:
        """Stop an actor or a supervisor subtree for good (no restart).

        A worker finishes the message in hand (its queued requests get
        ``ActorStopped``), its services are cancelled, then it runs
        ``on_stopping``; past the stop timeout it is cancelled.  Stopping an
        actor that is already gone does nothing.
        """
        self._require_open()
        try:
            node = self._directory.resolve(ref.address)
        except ActorNotFound:
            return
        parent = node.parent
        if not isinstance(parent, Supervisor):
            raise SystemStateError("The root supervisor stops with the system.")
        await parent.stop_child(node)

    def ref(self, address: ActorAddress) -> ActorRef[Any, Any]:
        """Resolve an address (e.g. decoded from JSON) to a live actor ref."""
        node = self._directory.resolve(address)
        if not isinstance(node, ActorCell):
            raise ActorNotFound(str(address), "this address is a supervisor, not an actor")
        cell: ActorCell[Any, Any] = node
        return cell.ref

    def supervisor(self, address: ActorAddress) -> SupervisorRef:
        """Resolve an address to a supervisor ref."""
        node = self._directory.resolve(address)
        if not isinstance(node, Supervisor):
            raise ActorNotFound(str(address), "this address is an actor, not a supervisor")
        return SupervisorRef(node)

    def __repr__(self) -> str:
        return f"<ActorSystem {self.system_id} {self._state.name.lower()}>"
