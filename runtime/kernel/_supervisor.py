"""Supervisors: own a task group of children and decide what a failure means
(Erlang/OTP semantics; see ``RestartStrategy`` and ``RestartIntensity``).

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar, final

import anyio
from anyio import TaskHandle
from anyio.abc import TaskGroup, TaskStatus

from agentrt.runtime.kernel._actor_errors import (
    ActorCrashed,
    ActorError,
    ActorNameTaken,
    ActorStopped,
    SupervisionEscalated,
)
from agentrt.runtime.kernel._actor_spec import ChildSpec, RestartStrategy, SupervisorSpec
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._cell import ActorCell
from agentrt.runtime.kernel._mailbox import Mailbox
from agentrt.runtime.observe._log import get_logger

if TYPE_CHECKING:
    from agentrt.runtime.kernel._directory import Directory
    from agentrt.runtime.kernel._system import ActorSystem
    from agentrt.runtime.kernel._timers import AskDeadlines

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")

#: Failures kept per supervisor for inspection; older ones are only in the log.
FAILURE_HISTORY: Final = 64

_RUNNING: Final = (TaskHandle.Status.PENDING, TaskHandle.Status.CANCELLING)


class Child(Protocol):
    """What a supervisor needs from a child, worker or supervisor alike."""

    address: ActorAddress
    handle: TaskHandle[None, None] | None
    incarnation: int
    stopping: bool

    @property
    def parent(self) -> FailureSink: ...

    async def launch(
        self, tg: TaskGroup, restart_error: Exception | None
    ) -> TaskHandle[None, None]: ...

    def child_at(self, path: str) -> Child | None: ...

    def request_stop(self, reason: str) -> None: ...

    def close(self, reason: str) -> None: ...


class FailureSink(Protocol):
    """The parent side of a child: a supervisor, or the system for the root."""

    def child_failed(self, child: Child, incarnation: int, error: Exception) -> None: ...

    def child_exited(self, child: Child) -> None: ...


@dataclass(frozen=True, slots=True)
class ChildFailure:
    """One failure a supervisor saw, and what it did about it."""

    address: ActorAddress
    error: Exception
    incarnation: int
    at: float
    action: Literal["restart", "restart-all", "escalate", "give-up", "ignored"]


_Report = tuple[Child, int, Exception]


@final
class _Reports:
    """A supervisor's failure reports, read by its own task alone.

    Unbounded on purpose, and bounded in fact: each child incarnation
    reports at most twice (its hook, its end) and is only restarted after
    the report was read, so a child can never flood its supervisor.  A
    report must never block: the reporter is a task that is ending.  (A
    list and a future: docs/design/performance.md, "The idle actor".)"""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[_Report] = []
        self._waiter: asyncio.Future[None] | None = None

    def send_nowait(self, report: _Report) -> None:
        self._items.append(report)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> _Report:
        while not self._items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._items.pop(0)

    def drain(self) -> list[_Report]:
        drained, self._items = self._items, []
        return drained


class Supervisor:
    """A running supervision node.  Every child (worker or supervisor)
    runs as a task in its task group, so stopping it stops the subtree.
    Failures are reported to it, never raised into the group, and handled
    one at a time: recorded in ``failures``, then the child (or all, for
    ``ONE_FOR_ALL``) restarted within the restart intensity, else the
    children stopped and ``SupervisionEscalated`` reported to the parent.
    A restarted child is a fresh instance at the same address that keeps
    its mailbox; its ``on_restarted`` past the restart timeout counts as a
    failure."""

    def __init__(
        self,
        address: ActorAddress,
        spec: SupervisorSpec,
        *,
        parent: FailureSink,
        system: ActorSystem,
        directory: Directory,
        deadlines: AskDeadlines,
    ) -> None:
        self.address = address
        self.spec = spec
        self.parent = parent
        self.system = system
        self.directory = directory
        self.deadlines = deadlines
        self.handle: TaskHandle[None, None] | None = None
        self.incarnation = 0
        self.stopping = False
        #: The most recent failures of children (bounded), oldest first.
        self.failures: deque[ChildFailure] = deque(maxlen=FAILURE_HISTORY)
        # Keyed by path: the address already holds that string, so an idle
        # child costs no extra key (and the task name below reuses it too).
        self._children: dict[str, Child] = {}
        self._restarts: deque[float] = deque()
        # on_exhausted="stop_child": restart times per child path.
        self._child_restarts: dict[str, deque[float]] = {}
        self._tg: TaskGroup | None = None
        self._reports: _Reports | None = None
        for child_spec in spec.children:
            self._adopt(self._build(child_spec))

    @property
    def stop_timeout(self) -> float:
        return self.system.stop_timeout

    @property
    def restart_timeout(self) -> float:
        return self.system.restart_timeout

    def running_group(self) -> TaskGroup:
        """The task group children (and their services) run in, while running."""
        tg = self._tg
        if tg is None or self.stopping:
            raise ActorStopped(str(self.address), "the supervisor is not running")
        return tg

    @property
    def children(self) -> tuple[Child, ...]:
        return tuple(self._children.values())

    def child_at(self, path: str) -> Child | None:
        return self._children.get(path)

    # -- the supervisor's own task ------------------------------------------------

    async def launch(
        self, tg: TaskGroup, restart_error: Exception | None
    ) -> TaskHandle[None, None]:
        """Start an incarnation as a task of ``tg``; returns once its children
        started (raises the first one's start failure)."""
        handle: TaskHandle[None, None] = await tg.start(
            self.run, restart_error, name=self.address.path, return_handle=True
        )
        return handle

    async def run(self, restart_error: Exception | None, *, task_status: TaskStatus[None]) -> None:
        """One incarnation: start the children, then handle their failures."""
        incarnation = self.incarnation
        self._restarts.clear()
        reports = self._reports = _Reports()
        start_error: Exception | None = None
        escalation: SupervisionEscalated | None = None
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                children = list(self._children.values())
                if restart_error is None:
                    start_error = await self._start_fresh(tg, children)
                else:
                    await self._restart(tg, children, restart_error)
                if start_error is None:
                    task_status.started()
                    del task_status  # its future, held for the supervisor's life otherwise
                    escalation = await self._supervise(tg, reports)
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._reports = None
            # Reports that arrived while the subtree was going down (an
            # on_stopping that failed, say) are recorded, never lost.
            for child, child_incarnation, error in reports.drain():
                self._record(child, child_incarnation, error, "ignored")
            if self.stopping:  # stopped for good (possibly from inside)
                self.parent.child_exited(self)
        if start_error is not None:
            raise start_error
        if escalation is not None:
            self.parent.child_failed(self, incarnation, escalation)

    async def _start_fresh(self, tg: TaskGroup, children: list[Child]) -> Exception | None:
        for child in children:
            try:
                child.handle = await child.launch(tg, None)
            except Exception as exc:
                return exc if isinstance(exc, ActorError) else ActorCrashed(str(child.address), exc)
        return None

    async def _restart(self, tg: TaskGroup, children: list[Child], error: Exception) -> None:
        for child in children:
            child.incarnation += 1
            child.handle = None
            try:
                child.handle = await child.launch(tg, error)
            except Exception as exc:
                # The new incarnation failed in its start hook: a failure like
                # any other, counted against the intensity.
                self.child_failed(child, child.incarnation, exc)

    async def _supervise(self, tg: TaskGroup, reports: _Reports) -> SupervisionEscalated:
        while True:
            child, incarnation, error = await reports.receive()
            escalation = await self._on_failure(tg, child, incarnation, error)
            if escalation is not None:
                return escalation

    async def _on_failure(
        self, tg: TaskGroup, child: Child, incarnation: int, error: Exception
    ) -> SupervisionEscalated | None:
        current = self._children.get(child.address.path) is child
        if not current or child.stopping or child.incarnation != incarnation:
            # Stale: that incarnation was already replaced, or it is going away.
            self._record(child, incarnation, error, "ignored")
            if current and child.stopping:
                self._forget(child, "stopped")
            return None
        now = anyio.current_time()
        intensity = self.spec.intensity
        per_child = self.spec.on_exhausted == "stop_child"
        restarts = (
            self._child_restarts.setdefault(child.address.path, deque())
            if per_child
            else self._restarts
        )
        while restarts and now - restarts[0] > intensity.within:
            restarts.popleft()
        if len(restarts) >= intensity.max_restarts:
            if per_child:
                self._record(child, incarnation, error, "give-up")
                self._child_restarts.pop(child.address.path, None)
                self._forget(child, f"gave up after {intensity.max_restarts} restarts: {error!r}")
                return None
            self._record(child, incarnation, error, "escalate")
            return SupervisionEscalated(
                str(self.address), error, intensity.max_restarts, intensity.within
            )
        restarts.append(now)
        if self.spec.strategy is RestartStrategy.ONE_FOR_ONE:
            self._record(child, incarnation, error, "restart")
            await self._restart(tg, [child], error)
            return None
        self._record(child, incarnation, error, "restart-all")
        # Siblings being stopped for good are left to finish stopping.
        running = [
            c
            for c in self._children.values()
            if c is not child and c.handle is not None and not c.stopping
        ]
        for sibling in running:
            if sibling.handle is not None:
                sibling.handle.cancel()
        for sibling in running:
            if sibling.handle is not None:
                await sibling.handle.wait()
        again = [c for c in self._children.values() if c is child or c in running]
        await self._restart(tg, again, error)
        return None

    def _record(
        self,
        child: Child,
        incarnation: int,
        error: Exception,
        action: Literal["restart", "restart-all", "escalate", "give-up", "ignored"],
    ) -> None:
        self.failures.append(
            ChildFailure(child.address, error, incarnation, anyio.current_time(), action)
        )
        # Looked up per use, not at import: a bound logger keeps the logging
        # configuration in force when it was made, and the CLI or daemon
        # configures logging after importing us.
        get_logger(__name__).warning(
            "actor failed",
            actor=str(child.address),
            supervisor=str(self.address),
            incarnation=incarnation,
            action=action,
            error=f"{type(error).__name__}: {error}",
        )

    # -- FailureSink: called by children ----------------------------------------

    def child_failed(self, child: Child, incarnation: int, error: Exception) -> None:
        reports = self._reports
        if reports is None:  # not running: nobody will restart it, keep the record
            self._record(child, incarnation, error, "ignored")
        else:
            reports.send_nowait((child, incarnation, error))

    def child_exited(self, child: Child) -> None:
        self._forget(child, "stopped")

    # -- children -----------------------------------------------------------------

    def _build(self, spec: ChildSpec[Any, Any] | SupervisorSpec) -> Child:
        address = self.directory.new_address(self.address, spec.name)
        if isinstance(spec, SupervisorSpec):
            return Supervisor(
                address,
                spec,
                parent=self,
                system=self.system,
                directory=self.directory,
                deadlines=self.deadlines,
            )
        capacity = spec.mailbox_capacity or self.system.mailbox_capacity
        return ActorCell(address, spec.factory, Mailbox(address, capacity), self)

    def _adopt(self, child: Child) -> None:
        self._children[child.address.path] = child

    def _forget(self, child: Child, reason: str) -> None:
        if self._children.get(child.address.path) is child:
            del self._children[child.address.path]
            self._child_restarts.pop(child.address.path, None)
        child.close(reason)

    async def start_child(self, spec: ChildSpec[Any, Any] | SupervisorSpec) -> Child:
        """Adopt and start a new child; its start-hook error raises here."""
        tg = self._tg
        if tg is None or self.stopping:
            raise ActorStopped(str(self.address), "the supervisor is not running")
        if f"{self.address.path}/{spec.name}" in self._children:
            raise ActorNameTaken(str(self.address.child(spec.name)))
        child = self._build(spec)
        self._adopt(child)
        started = False
        try:
            child.handle = await child.launch(tg, None)
            started = True
        except ActorError:
            raise
        except Exception as exc:
            raise ActorCrashed(str(child.address), exc) from exc
        finally:
            if not started:
                self._forget(child, "the actor failed to start")
        return child

    async def stop_child(self, child: Child) -> None:
        """Stop ``child`` for good: gracefully, then by cancellation after the
        stop timeout; its subtree goes with it.

        Called from inside that subtree (an actor stopping itself or an
        ancestor), it only requests the stop and returns: waiting for the
        caller's own task to end would never finish.
        """
        path = child.address.path
        if self._children.get(path) is not child:
            return
        reason = f"stopped by {self.address}"
        child.request_stop(reason)
        handle = child.handle
        # Child tasks are named by path, their services "<path>#<name>".
        caller = anyio.get_current_task().name or ""
        if handle is None or caller == path or caller.startswith((path + "/", path + "#")):
            if handle is None:
                self._forget(child, reason)
            return
        ended = False
        try:
            with anyio.move_on_after(self.stop_timeout):
                await handle.wait()
                ended = True
        finally:
            if not ended:  # past the timeout, or the caller was cancelled
                handle.cancel()
                # Bounded: on_stopping hooks are, and so is anything shielded here.
                with anyio.move_on_after(self.stop_timeout, shield=True):
                    await handle.wait()
            self._forget(child, reason)
            if child.handle is handle and handle.status not in _RUNNING:
                # The ended task's handle keeps its exception, whose traceback
                # holds the child: let go, or only a collection frees the cycle.
                child.handle = None

    # -- as a child of its own parent ---------------------------------------------

    def request_stop(self, reason: str) -> None:
        self.stopping = True
        if self.handle is not None:
            self.handle.cancel()

    def close(self, reason: str) -> None:
        """Let the whole subtree go: every mailbox below closes."""
        self.stopping = True
        for child in list(self._children.values()):
            self._forget(child, reason)
