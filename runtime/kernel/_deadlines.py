"""Ask deadlines, batched: one event-loop timer per millisecond of deadlines.

Every ``ask`` has a deadline (but one whose caller's scope bounds it:
``timeout=None``).  A loop timer (or a cancel scope) per ask costs
a heap push and pop per request, a quarter of an ask's round trip on plain
asyncio.  Instead, asks whose deadlines fall in the same millisecond share
one timer: an ask files its reply future in that millisecond's bucket and
takes it out when it completes; when the bucket's timer fires, whatever is
still unanswered gets :class:`AskTimeout`.  Deadlines therefore fire up to
one millisecond late, never early.  A bucket holds only asks in flight, and
the last one out cancels its timer (a long deadline leaves nothing behind).

Timers are loop callbacks, not tasks; the owning system cancels them when it
closes.  This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Final

from agentrt.runtime.kernel._actor_errors import ActorStopped, AskTimeout
from agentrt.runtime.kernel._address import ActorAddress

#: Timer granularity in seconds.
RESOLUTION: Final = 0.001

_Pending = dict["asyncio.Future[Any]", tuple[ActorAddress, object, float]]


class AskDeadlines:
    """The pending ask deadlines of one actor system."""

    __slots__ = ("_buckets", "_timers")

    def __init__(self) -> None:
        self._buckets: dict[int, _Pending] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}

    def watch(
        self,
        loop: asyncio.AbstractEventLoop,
        reply: asyncio.Future[Any],
        timeout: float,
        address: ActorAddress,
        message: object,
    ) -> int:
        """Fail ``reply`` with ``AskTimeout`` unless done within ``timeout``;
        returns the bucket's slot to :meth:`unwatch` from."""
        slot = math.ceil((loop.time() + timeout) / RESOLUTION)
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = {}
            self._timers[slot] = loop.call_at(slot * RESOLUTION, self._expire, slot)
        bucket[reply] = (address, message, timeout)
        return slot

    def unwatch(self, slot: int, reply: asyncio.Future[Any]) -> None:
        bucket = self._buckets.get(slot)
        if bucket is None:  # expired, or the system closed
            return
        bucket.pop(reply, None)
        if not bucket:
            del self._buckets[slot]
            timer = self._timers.pop(slot, None)
            if timer is not None:
                timer.cancel()

    def _expire(self, slot: int) -> None:
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
        """Loop timers pending: one per bucket of asks in flight."""
        return len(self._timers)

    def __len__(self) -> int:
        """Asks in flight."""
        return sum(len(bucket) for bucket in self._buckets.values())
