"""Bounded work per turn of an event loop (``Turns``): the daemon's API
loop takes its bursts (requests arriving together, answers coming back
from the run loop together) a slice at a time, so that it keeps reading
sockets and running timers in between.  Nothing of runs, HTTP or the store.

The roof: may import every layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Final, final

#: Wall time one turn of the API's loop spends on a burst (requests arriving,
#: answers returning) before the rest wait for a later turn (its pause target: 50 ms).
TURN_SLICE_S: Final = 0.005


@final
class Turns:
    """Bounded work per turn of the calling event loop for work that comes
    in bursts: a task's ``await turns.take()``, or a callback's
    ``turns.run(work)``, goes on at once while the current turn has spent
    less than ``slice_s`` (wall time) since its first taker went on, and
    nobody waits; past that, it waits for a later turn, first come first
    served (the first taker of a turn always goes on).  Between those turns
    the loop reads sockets and runs timers, so a burst holds it for little
    more than ``slice_s`` plus one taker's work at a time.

    What it is for: the API loop gets work in bursts.  500 clients posting
    runs at once: their requests arrive together (the HTTP protocol parses
    them through ``run``); the run store commits the 500 runs in one
    transaction, so the answers come back together (``ManagerBridge``
    resumes each through ``take``).  Each burst, handled in one turn, held
    the API loop for 100+ ms, every other request waiting behind it.

    One loop only (the one it is used on); not thread-safe."""

    def __init__(self, slice_s: float = TURN_SLICE_S, *, most: int = 256) -> None:
        if slice_s < 0 or most < 1:
            raise ValueError(f"slice_s must be >= 0 and most >= 1 (got {slice_s}, {most})")
        self.slice_s = slice_s
        self.most = most
        self._started = 0.0
        """When (``time.perf_counter``) the current turn's first taker went on."""
        self._fresh = True
        """The loop has turned since: the next taker starts a new slice."""
        self._went_on = 0
        """Takers that went on in the current turn."""
        self._waiting: deque[asyncio.Future[None]] = deque()
        """The waiting takers, in order; a release sets their futures."""
        self._woken_pending = 0
        """Takers woken that have not run yet (a newcomer goes after them)."""
        self._requeued = 0
        """Woken takers sent back to the front in the current turn (order kept)."""
        self._wake = 1
        """Takers the next release wakes: what fitted in a turn, doubled while all fit."""
        self._woken = 0
        self._pumping = False
        """A release is due (a batch wakes the next at the end of its turn)."""
        self.turns = 0
        """Turns in which a taker went on (for tests and benches)."""
        self.waits = 0
        """Times a taker had to wait for a later turn."""

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def take(self) -> None:
        """Return in a turn with room (this one, if it has)."""
        if self._free() and self._go_on():
            return
        loop = asyncio.get_running_loop()
        self.waits += 1
        woken = self._enqueue(loop)
        while True:
            try:
                await woken
            except asyncio.CancelledError:
                self._forget(woken)
                raise
            self._woken_pending -= 1
            if self._go_on():
                return
            woken = self._enqueue(loop, front=True)  # woken, but this turn is spent

    def run(self, work: Callable[[], None]) -> None:
        """``work()`` now if this turn has room, else in a later turn (in
        order with every other taker)."""
        if self._free() and self._go_on():
            work()
            return
        self.waits += 1
        self._later(asyncio.get_running_loop(), work)

    def _later(
        self, loop: asyncio.AbstractEventLoop, work: Callable[[], None], *, front: bool = False
    ) -> None:
        def go(_: asyncio.Future[None]) -> None:  # a done callback: the turn after its wake-up
            self._woken_pending -= 1
            if self._go_on():
                work()
            else:
                self._later(loop, work, front=True)

        self._enqueue(loop, front=front).add_done_callback(go)

    def _enqueue(
        self, loop: asyncio.AbstractEventLoop, *, front: bool = False
    ) -> asyncio.Future[None]:
        woken: asyncio.Future[None] = loop.create_future()
        if front:
            self._waiting.insert(self._requeued, woken)
            self._requeued += 1
            self._wake = max(1, self._went_on)
        else:
            self._waiting.append(woken)
        if not self._pumping:  # else the batch running now releases the next one
            self._pumping = True
            loop.call_soon(self._release)
        return woken

    def _free(self) -> bool:
        return not self._waiting and not self._woken_pending

    def _go_on(self) -> bool:
        now = time.perf_counter()
        if self._fresh:
            self._fresh = False
            self._started = now
            self._went_on = 0
            self.turns += 1
            asyncio.get_running_loop().call_soon(self._turned)
        elif now - self._started >= self.slice_s:
            return False
        self._went_on += 1
        return True

    def _turned(self) -> None:
        self._fresh = True
        self._requeued = 0

    def _release(self) -> None:
        """Wake the first waiters: they go on in the next turn, and
        ``_after`` runs after them there."""
        woken = 0
        while self._waiting and woken < self._wake:
            future = self._waiting.popleft()
            if not future.done():  # not cancelled
                future.set_result(None)
                woken += 1
        self._woken = woken
        self._woken_pending += woken
        asyncio.get_running_loop().call_soon(self._after)

    def _after(self) -> None:
        """The end of a turn the woken ran in: wake the next ones (for the
        next turn), more of them if all of these fitted."""
        if self._woken and not self._requeued:
            self._wake = min(self.most, 2 * self._wake)
        if self._waiting:
            self._release()
        else:
            self._pumping = False

    def _forget(self, future: asyncio.Future[None]) -> None:
        """A waiting task was cancelled: out of the queue, or, woken
        already, no longer expected."""
        if future.done() and not future.cancelled():
            self._woken_pending -= 1
            return
        with contextlib.suppress(ValueError):
            self._waiting.remove(future)


__all__ = ["TURN_SLICE_S", "Turns"]
