"""Services: background tasks owned by one incarnation of an actor
(``ServiceScope``, behind ``ActorContext.start_service``).

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
from anyio import TaskHandle
from anyio.abc import TaskGroup, TaskStatus

from agentrt.runtime.kernel._actor_errors import ActorStopped


class _Readiness:
    """The ``task_status`` a service gets: forwards ``started`` and notes
    that it was called (a failure after it crashes the actor; one before it
    belongs to the caller of ``start_service``)."""

    __slots__ = ("_status", "reported")

    def __init__(self, status: TaskStatus[Any]) -> None:
        self._status = status
        self.reported = False

    def started(self, value: Any = None) -> None:
        self._status.started(value)
        self.reported = True


class ServiceScope:
    """The services of one actor incarnation, created on its first start
    (an actor that never starts one pays nothing).

    Services run in the supervisor's task group, named
    ``<actor path>#<name>``.  When the incarnation ends for any reason they
    are cancelled and waited for, before ``on_stopping`` and before a
    replacement's ``on_restarted``.  One that raises ends the incarnation as
    a crash with that exception (an ask being handled gets ``ActorCrashed``);
    one that returns is simply done."""

    __slots__ = ("_group", "_interrupt", "_tasks", "address", "closing", "failure", "path")

    def __init__(
        self,
        address: str,
        path: str,
        group: TaskGroup | None,
        interrupt: Callable[[], None] | None,
    ) -> None:
        #: The actor's address, for errors; its path prefixes the task names.
        self.address = address
        self.path = path
        self._group = group
        # Cancels the owning incarnation (the cell knows how, at each stage).
        self._interrupt = interrupt
        self._tasks: list[TaskHandle[None, Any]] = []
        #: Set once the incarnation ends: no new services, failures only recorded.
        self.closing = group is None
        #: The first exception a started service raised, if any.
        self.failure: Exception | None = None

    # -- starting --------------------------------------------------------------

    def _require_open(self) -> TaskGroup:
        if self.closing or self._group is None:
            raise ActorStopped(self.address, "its incarnation is ending: no new services")
        return self._group

    def _task_name(self, func: Callable[..., Awaitable[Any]], name: str | None) -> str:
        return f"{self.path}#{name or getattr(func, '__name__', 'service')}"

    async def start(
        self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...], name: str | None
    ) -> Any:
        """Start ``func(*args, task_status=...)`` and return its start value."""
        group = self._require_open()
        handle = await group.start(
            self._run_started, func, args, name=self._task_name(func, name), return_handle=True
        )
        if self.closing:
            # The incarnation ended while this caller (not one of its own
            # tasks, then) waited for readiness: the service must not outlive it.
            handle.cancel()
            with anyio.CancelScope(shield=True):
                await handle.wait()
            raise ActorStopped(self.address, "its incarnation ended while the service started")
        self._track(handle)
        return handle.start_value

    def start_soon(
        self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...], name: str | None
    ) -> None:
        """Start ``func(*args)`` without waiting for it."""
        group = self._require_open()
        self._track(group.start_soon(self._run_soon, func, args, name=self._task_name(func, name)))

    def _track(self, handle: TaskHandle[None, Any]) -> None:
        # Drop finished ones, so an actor that starts services over and over
        # (one per request, say) keeps this list as short as what runs.
        self._tasks = [t for t in self._tasks if t.status in _RUNNING]
        self._tasks.append(handle)

    async def _run_started(
        self,
        func: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        *,
        task_status: TaskStatus[Any],
    ) -> None:
        readiness = _Readiness(task_status)
        try:
            await func(*args, task_status=readiness)
        except Exception as exc:
            if not readiness.reported:
                raise  # not ready yet: TaskGroup.start raises it to the caller
            self._fail(exc)

    async def _run_soon(self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        try:
            await func(*args)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, error: Exception) -> None:
        # Never raised into the supervisor's group: the incarnation ends
        # with it instead (the cell reports it).
        if self.failure is None:
            self.failure = error
            if not self.closing and self._interrupt is not None:
                self._interrupt()
        elif error is not self.failure:
            self.failure.add_note(f"another service of {self.address} failed too: {error!r}")

    # -- ending ----------------------------------------------------------------

    async def close(self) -> None:
        """Cancel every service and wait until all have ended.

        Shielded and not time-bounded: the incarnation is over only once its
        services are, so a replacement never overlaps them.  A service that
        shields its own cleanup must bound it.
        """
        self.closing = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            for task in tasks:
                await task.wait()


_RUNNING: Final = frozenset({TaskHandle.Status.PENDING, TaskHandle.Status.CANCELLING})

#: The services of an incarnation that has ended without starting any: a
#: start between incarnations (from outside the actor) is refused.
ENDED: Final = ServiceScope("", "", None, None)
