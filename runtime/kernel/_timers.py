"""Timers: deadlines on the event loop's monotonic clock, kept by loop timers
shared per slot of time.  The one timer/deadline seam of the package.

What a caller asks for, ``seconds`` from now on the loop's clock:

- "cancel this task then": :class:`TaskDeadlines` (``arm``, ``disarm``,
  ``expired``), for one hot await (a model call, a tool call) in the task
  that awaits it;
- "fail this wait then": :class:`AskDeadlines` (``watch``, ``unwatch``,
  ``close``), for an actor ask's reply future, which fails with
  ``AskTimeout``.

Taking a deadline back is ``disarm``/``unwatch``.  Either way the deadline's
time is rounded up to its slot (:func:`slot_time`) and one loop timer fires
every deadline of a slot: a deadline fires never early and at most one
grain late (1/64 of its limit, for a task; a grain is never under 2 ** -10
s, about 1 ms, the loop's own resolution).

What is asyncio-specific, and why (docs/design/event-loop.md states the
event-loop contract; docs/design/performance.md the figures):

- a task is cancelled from a loop timer (``Task.cancel``) and the
  cancellation told apart by ``Task.cancelling``/``uncancel``, by
  ``asyncio.timeout``'s rule: anyio cancels only cancel scopes, and a scope
  per call is a loop timer per call and more;
- timers are ``loop.call_at`` callbacks run in one shared empty
  ``contextvars`` context: anyio has no timer callbacks, only sleeping tasks;
- an ask's reply is an ``asyncio.Future`` (the mailbox's), failed in place.

anyio's cancellation keeps working around it: when a cancel scope enclosing
the call is cancelled at the same moment the deadline fires, anyio holds its
cancellation back (the task is being cancelled already); ``expired`` then
lets it arrive, so the scope wins.

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
from typing import Any, Final, final

import anyio

from agentrt.runtime.kernel._actor_errors import ActorStopped, AskTimeout
from agentrt.runtime.kernel._address import ActorAddress

__all__ = ["MIN_GRAIN_S", "Armed", "AskDeadlines", "TaskDeadlines", "current_task", "slot_time"]

_CONTEXT = contextvars.Context()
"""The timers' context: empty and shared (no callback reads a variable)."""

#: A slot's grain is ``2 ** (exponent of the limit - _GRAIN_SHIFT)``: between
#: 1/128 and 1/64 of the limit ...
_GRAIN_SHIFT = 7
#: ... and not under 2 ** -10 s (``MIN_GRAIN_S``).
_MIN_GRAIN_EXP = -10
#: The finest grain, about 1 ms: an ask's deadlines share timers at this grain.
MIN_GRAIN_S: Final = math.ldexp(1.0, _MIN_GRAIN_EXP)


def slot_time(when: float, seconds: float) -> float:
    """The slot of a deadline at loop time ``when``, ``seconds`` after it was
    set: ``when`` rounded up to a multiple of a power-of-two grain between
    1/128 and 1/64 of ``seconds``, and at least ``MIN_GRAIN_S`` (exact in
    floating point, so equal slots are equal keys)."""
    # (``frexp(0)`` has exponent 0: a zero limit takes the finest grain.)
    exponent = math.frexp(seconds)[1] - _GRAIN_SHIFT if seconds else _MIN_GRAIN_EXP
    grain = math.ldexp(1.0, exponent if exponent > _MIN_GRAIN_EXP else _MIN_GRAIN_EXP)
    return math.ceil(when / grain) * grain


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


@final
class TaskDeadlines:
    """Deadlines that cancel the awaiting task, for the awaits of one owner
    (a backend, a toolbox): any number at once in as many tasks, and nested
    in one task (a tool that runs the same agent again); each cancellation
    is told to the deadline that sent it.  Nothing per call stays alive
    while the call waits: arming is a set insertion into its slot's tasks."""

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
        """Cancel ``task``, the current task, ``seconds`` from now (``None``
        or infinity: no deadline).  Pass what it returns to ``disarm``."""
        if seconds is None or seconds == math.inf:
            return None
        loop = task.get_loop()
        seconds = max(0.0, seconds)
        when = loop.time() + seconds
        if task not in self._armed:
            slot = slot_time(when, seconds)
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


_Pending = dict["asyncio.Future[Any]", tuple[ActorAddress, object, float]]


@final
class AskDeadlines:
    """The pending ask deadlines of one actor system: a reply not done in
    time fails with ``AskTimeout``.  A slot (``MIN_GRAIN_S``) holds only the
    asks in flight, and the last one out cancels its timer, so a long
    deadline leaves nothing behind.  The owning system closes it."""

    __slots__ = ("_buckets", "_expire", "_timers")

    def __init__(self) -> None:
        self._buckets: dict[float, _Pending] = {}
        self._timers: dict[float, asyncio.TimerHandle] = {}
        self._expire = self._expire_slot  # bound once, not per slot

    def watch(
        self,
        loop: asyncio.AbstractEventLoop,
        reply: asyncio.Future[Any],
        timeout: float,
        address: ActorAddress,
        message: object,
    ) -> float:
        """Fail ``reply`` with ``AskTimeout`` unless done within ``timeout``;
        returns the slot to :meth:`unwatch` from."""
        slot = math.ceil((loop.time() + timeout) / MIN_GRAIN_S) * MIN_GRAIN_S
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = {}
            self._timers[slot] = loop.call_at(slot, self._expire, slot, context=_CONTEXT)
        bucket[reply] = (address, message, timeout)
        return slot

    def unwatch(self, slot: float, reply: asyncio.Future[Any]) -> None:
        """Take ``reply``'s deadline back (answered, or given up)."""
        bucket = self._buckets.get(slot)
        if bucket is None:  # expired, or the system closed
            return
        bucket.pop(reply, None)
        if not bucket:
            del self._buckets[slot]
            timer = self._timers.pop(slot, None)
            if timer is not None:
                timer.cancel()

    def _expire_slot(self, slot: float) -> None:
        self._timers.pop(slot, None)
        for reply, (address, message, timeout) in self._buckets.pop(slot, {}).items():
            if not reply.done():
                reply.set_exception(AskTimeout(str(address), type(message).__name__, timeout))

    def close(self, address: ActorAddress) -> None:
        """Drop every timer: the system (root ``address``) is closing.  Its
        actors failed their pending asks already; anything left fails here,
        so no caller waits on a timer that will never fire."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        buckets, self._buckets = self._buckets, {}
        for bucket in buckets.values():
            for reply, (target, _, _) in bucket.items():
                if not reply.done():
                    reply.set_exception(
                        ActorStopped(str(target), f"the actor system {address.system} is closed")
                    )

    @property
    def timers(self) -> int:
        """Loop timers pending: one per slot of asks in flight."""
        return len(self._timers)

    def __len__(self) -> int:
        """Asks in flight."""
        return sum(len(bucket) for bucket in self._buckets.values())
