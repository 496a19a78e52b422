"""``TaskDeadlines``: the deadline of one hot await (a model call, a tool
call) as one event-loop timer that cancels the awaiting task.

The rule is ``asyncio.timeout``'s (the loop is asyncio's): when the timer
fires it cancels the task, and the cancellation that reaches the awaiting
code is the deadline's only if ``uncancel`` brings the task back to the
count it had when the deadline was armed.  What it saves per call, against
``asyncio.timeout`` and anyio's ``move_on_after``: no object of its own
alive while the call waits besides the loop's timer (the callback is bound
once per owner and runs in one shared empty context: no ``contextvars``
context copied per timer), and none of a cancel scope's bookkeeping.
anyio's cancellation keeps working around it: when a cancel scope enclosing
the call is cancelled at the same moment the deadline fires, anyio holds
its cancellation back (the task is being cancelled already); ``expired``
then lets it arrive, so the scope wins.

Use, in the task that awaits::

    task = current_task()
    timer = deadlines.arm(task, seconds)    # None: no limit
    try:
        result = await call()
    except asyncio.CancelledError:
        if not await deadlines.expired(task, timer):
            raise                           # not ours: a cancellation
        ...                                 # the deadline passed
    finally:
        deadlines.disarm(task, timer)

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from typing import Any, final

import anyio

_CONTEXT = contextvars.Context()
"""The timers' context: empty and shared (the callback reads no variable)."""


def current_task() -> asyncio.Task[Any]:
    """The running asyncio task (a deadline cancels it)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("a deadline needs a running asyncio task")
    return task


@final
class TaskDeadlines:
    """Deadlines for the awaits of one owner (a backend, a toolbox), any
    number at once in as many tasks, and nested in one task (a tool that
    runs the same agent again): each cancellation is told to the deadline
    that sent it."""

    __slots__ = ("_armed", "_expire", "_expire_nested", "_fired", "_nested", "_timers")

    def __init__(self) -> None:
        #: Tasks with an armed deadline -> their cancellation count when
        #: armed (the outermost deadline of each task).
        self._armed: dict[asyncio.Task[Any], int] = {}
        #: ... and that deadline's timer.
        self._timers: dict[asyncio.Task[Any], asyncio.TimerHandle] = {}
        #: Tasks whose outermost deadline fired (and cancelled them).
        self._fired: set[asyncio.Task[Any]] = set()
        #: A nested deadline's timer -> (the count when armed, its fired flag).
        self._nested: dict[asyncio.TimerHandle, tuple[int, list[bool]]] = {}
        self._expire = self._expire_task  # bound once, not per timer
        self._expire_nested = self._expire_nested_task

    def arm(self, task: asyncio.Task[Any], seconds: float | None) -> asyncio.TimerHandle | None:
        """A deadline ``seconds`` from now for ``task``, the current task
        (``None`` or infinity: no timer)."""
        if seconds is None or seconds == math.inf:
            return None
        loop = task.get_loop()
        when = loop.time() + max(0.0, seconds)
        if task not in self._timers:
            self._armed[task] = task.cancelling()
            timer = self._timers[task] = loop.call_at(when, self._expire, task, context=_CONTEXT)
            return timer
        # Nested in another deadline of this owner and task: a flag of its
        # own, so that each cancellation is told to its own deadline.
        fired = [False]
        timer = loop.call_at(when, self._expire_nested, task, fired, context=_CONTEXT)
        self._nested[timer] = (task.cancelling(), fired)
        return timer

    def disarm(self, task: asyncio.Task[Any], timer: asyncio.TimerHandle | None) -> bool:
        """Stop ``task``'s timer; whether it had fired and the cancellation
        it sent is the only one (then it is taken back with ``uncancel``).
        Only the first call after ``arm`` says so."""
        if timer is None:
            return False
        timer.cancel()
        if self._timers.get(task) is timer:
            del self._timers[task]
            cancelling = self._armed.pop(task)
            if task not in self._fired:
                return False
            self._fired.discard(task)
            return task.uncancel() <= cancelling
        nested = self._nested.pop(timer, None) if self._nested else None
        if nested is None:
            return False  # disarmed already
        count, fired = nested
        return fired[0] and task.uncancel() <= count

    async def expired(self, task: asyncio.Task[Any], timer: asyncio.TimerHandle | None) -> bool:
        """Called on a ``CancelledError`` from the awaited call: whether it
        is the deadline's (the caller then reports its timeout).  When a
        cancel scope around the call was cancelled at the same moment, its
        cancellation is let through instead (this raises it)."""
        if not self.disarm(task, timer):
            return False
        if anyio.current_effective_deadline() == -math.inf:
            await anyio.lowlevel.checkpoint()
        return True

    def _expire_task(self, task: asyncio.Task[Any]) -> None:
        self._fired.add(task)
        task.cancel()

    @staticmethod
    def _expire_nested_task(task: asyncio.Task[Any], fired: list[bool]) -> None:
        fired[0] = True
        task.cancel()


__all__ = ["TaskDeadlines", "current_task"]
