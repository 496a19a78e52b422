"""``TaskDeadlines``: the deadline of one hot await (a model call, a tool
call), kept by event-loop timers that cancel the awaiting task.

The rule is ``asyncio.timeout``'s (the loop is asyncio's): when the
deadline passes, the task is cancelled, and the cancellation that reaches
the awaiting code is the deadline's only if ``uncancel`` brings the task
back to the count it had when the deadline was armed.

The timers are shared.  A deadline is rounded up to its slot, a multiple
of a grain between 1/128 and 1/64 of its limit (2 ** -10 s, about 1 ms, at
least), and one loop timer per slot cancels every task armed in it.  So a
deadline fires never early and at most 1/64 of its limit (or that 1 ms)
late, and arming one costs a set insertion instead of a timer of its
own: at 1,000 calls in flight, a timer per call (its handle, libuv's timer
and the heap) was about a tenth of the model client's CPU.  Nothing per call stays alive
while the call waits.  The callbacks run in one shared empty context, so
no ``contextvars`` context is copied per slot.

anyio's cancellation keeps working around it: when a cancel scope enclosing
the call is cancelled at the same moment the deadline fires, anyio holds
its cancellation back (the task is being cancelled already); ``expired``
then lets it arrive, so the scope wins.

Use, in the task that awaits::

    task = current_task()
    armed = deadlines.arm(task, seconds)    # None: no limit
    try:
        result = await call()
    except asyncio.CancelledError:
        if not await deadlines.expired(task, armed):
            raise                           # not ours: a cancellation
        ...                                 # the deadline passed
    finally:
        deadlines.disarm(task, armed)

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


#: What ``arm`` returns: ``None`` (no limit), a task's outermost deadline
#: (its slot's tasks, a set shared with every task armed in the slot), or a
#: nested one (its own timer).
Armed = set[asyncio.Task[Any]] | asyncio.TimerHandle | None

#: A slot's grain is ``2 ** (exponent of the limit - _GRAIN_SHIFT)``: between
#: 1/128 and 1/64 of the limit ...
_GRAIN_SHIFT = 7
#: ... and not under 2 ** -10 s (about 1 ms, the loop's own resolution).
_MIN_GRAIN_EXP = -10


@final
class TaskDeadlines:
    """Deadlines for the awaits of one owner (a backend, a toolbox), any
    number at once in as many tasks, and nested in one task (a tool that
    runs the same agent again): each cancellation is told to the deadline
    that sent it."""

    __slots__ = ("_armed", "_expire_nested", "_fire", "_fired", "_loop", "_nested", "_slots")

    def __init__(self) -> None:
        #: Tasks with an armed deadline -> their cancellation count when
        #: armed and their slot's tasks (the outermost deadline of each task).
        self._armed: dict[asyncio.Task[Any], tuple[int, set[asyncio.Task[Any]]]] = {}
        #: The pending slots of ``_loop``: slot time -> the tasks armed in it.
        self._slots: dict[float, set[asyncio.Task[Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Tasks whose outermost deadline fired (and cancelled them).
        self._fired: set[asyncio.Task[Any]] = set()
        #: A nested deadline's timer -> (the count when armed, its fired flag).
        self._nested: dict[asyncio.TimerHandle, tuple[int, list[bool]]] = {}
        self._fire = self._fire_slot  # bound once, not per slot
        self._expire_nested = self._expire_nested_task

    def arm(self, task: asyncio.Task[Any], seconds: float | None) -> Armed:
        """A deadline ``seconds`` from now for ``task``, the current task
        (``None`` or infinity: no deadline)."""
        if seconds is None or seconds == math.inf:
            return None
        loop = task.get_loop()
        seconds = max(0.0, seconds)
        when = loop.time() + seconds
        if task not in self._armed:
            exponent = math.frexp(seconds)[1] - _GRAIN_SHIFT
            grain = math.ldexp(1.0, exponent if exponent > _MIN_GRAIN_EXP else _MIN_GRAIN_EXP)
            slot = math.ceil(when / grain) * grain
            if loop is not self._loop:  # the slots pending on another loop stay its own
                self._loop, self._slots = loop, {}
            slots = self._slots
            tasks = slots.get(slot)
            if tasks is None:
                tasks = slots[slot] = set()
                loop.call_at(slot, self._fire, slots, slot, context=_CONTEXT)
            tasks.add(task)
            self._armed[task] = (task.cancelling(), tasks)
            return tasks
        # Nested in another deadline of this owner and task: a timer and a
        # flag of its own, so that each cancellation is told to its deadline.
        fired = [False]
        timer = loop.call_at(when, self._expire_nested, task, fired, context=_CONTEXT)
        self._nested[timer] = (task.cancelling(), fired)
        return timer

    def disarm(self, task: asyncio.Task[Any], armed: Armed) -> bool:
        """End ``task``'s deadline; whether it had fired and the cancellation
        it sent is the only one (then it is taken back with ``uncancel``).
        Only the first call after ``arm`` says so."""
        if armed is None:
            return False
        if isinstance(armed, set):
            entry = self._armed.get(task)
            if entry is None or entry[1] is not armed:
                return False  # disarmed already
            del self._armed[task]
            armed.discard(task)
            if task not in self._fired:
                return False
            self._fired.discard(task)
            return task.uncancel() <= entry[0]
        armed.cancel()
        nested = self._nested.pop(armed, None) if self._nested else None
        if nested is None:
            return False  # disarmed already
        count, fired = nested
        return fired[0] and task.uncancel() <= count

    async def expired(self, task: asyncio.Task[Any], armed: Armed) -> bool:
        """Called on a ``CancelledError`` from the awaited call: whether it
        is the deadline's (the caller then reports its timeout).  When a
        cancel scope around the call was cancelled at the same moment, its
        cancellation is let through instead (this raises it)."""
        if not self.disarm(task, armed):
            return False
        if anyio.current_effective_deadline() == -math.inf:
            await anyio.lowlevel.checkpoint()
        return True

    def _fire_slot(self, slots: dict[float, set[asyncio.Task[Any]]], slot: float) -> None:
        tasks = slots.pop(slot, None)
        if tasks:
            fired = self._fired
            for task in tuple(tasks):
                fired.add(task)
                task.cancel()
            # A task disarmed from here on finds itself fired: the set is done.
            tasks.clear()

    @staticmethod
    def _expire_nested_task(task: asyncio.Task[Any], fired: list[bool]) -> None:
        fired[0] = True
        task.cancel()


__all__ = ["Armed", "TaskDeadlines", "current_task"]
