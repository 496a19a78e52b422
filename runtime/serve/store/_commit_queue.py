"""The run store's group commit (``CommitQueue``): writes queued on the run
loop, committed in order by one writer task, a batch (every write queued
since the last one, up to a limit) per transaction on a worker thread; each
write is then told it is durable, in the order it was queued.

A write is either awaited (its writer waits for the commit) or only told
(``Write.then``): the run loop's event sinks queue most events without
waiting, and a later awaited write of the same run, committed after them,
makes them durable too.  An awaited write waits on a bare asyncio future,
not an anyio ``Event`` fed by a memory stream: with a thousand rollouts
each writing a few events per model call, those objects' checkpoints and
allocations cost more than the commit itself (docs/design/performance.md).
asyncio only, like the actor kernel.  Nothing of runs or events.

The roof: may import every layer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, final

import anyio

from agentrt.runtime.serve.store._store_sql import Statement


@dataclass(slots=True)
class Write:
    """One write: its statements (committed together, or not at all), what
    it is (for errors), who waits for it and who is told."""

    statements: list[Statement]
    what: str | tuple[str, int]
    """What the write is, for its error: a description, or (run id, event seq)."""
    waiter: asyncio.Future[None] | None = None
    """Resolved once the write is committed (or failed); ``None``: nobody waits."""
    then: Callable[[Any], None] | None = None
    """Called on the loop once the write is committed (``None``) or failed
    (``failure(write)``), before any later write is reported: in queue order."""
    error: BaseException | None = None


@final
class CommitQueue:
    """Writes in queue order, committed by ``run`` (the writer task, started
    by the store) through ``commit(batch)`` on a worker thread, at most
    ``batch`` writes a transaction.  ``commit`` sets ``error`` on a write
    that failed alone; raising fails the whole batch.  At most ``capacity``
    writes wait: past that, ``put`` waits for the writer (backpressure on
    the event sinks).  ``close`` lets the writer finish what is queued, then
    ``run`` returns; ``put`` after ``close`` raises ``anyio.ClosedResourceError``.
    ``failure(write)``: what a failed write's ``then`` is told."""

    def __init__(
        self,
        commit: Callable[[Sequence[Write]], None],
        failure: Callable[[Write], BaseException],
        *,
        batch: int,
        capacity: int,
    ) -> None:
        self._commit = commit
        self._failure = failure
        self._batch = batch
        self._capacity = capacity
        self._queued: deque[Write] = deque()
        self._wake: asyncio.Future[None] | None = None
        """The idle writer's wake-up call."""
        self._room: anyio.Event | None = None
        """Set when the writer takes a batch (made only when a writer waits for room)."""
        self._closed = False
        self._thread = anyio.CapacityLimiter(1)

    @property
    def depth(self) -> int:
        """Writes queued and not yet taken by the writer."""
        return len(self._queued)

    def offer(self, write: Write) -> bool:
        """Queue ``write`` now if there is room; ``False`` (nothing queued)
        when ``capacity`` writes wait or the queue is closed (``put`` waits,
        or raises).  No checkpoint: the run loop's events that nobody waits
        for are queued without a coroutine each."""
        if self._closed or len(self._queued) >= self._capacity:
            return False
        self._queued.append(write)
        wake = self._wake
        if wake is not None:
            self._wake = None
            if not wake.done():
                wake.set_result(None)
        return True

    async def put(self, write: Write) -> None:
        """Queue ``write`` (returns at once unless ``capacity`` writes wait)."""
        while not self.offer(write):
            if self._closed:
                raise anyio.ClosedResourceError
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()

    async def commit(self, write: Write) -> None:
        """Queue ``write`` and wait until it is committed or failed (its ``error``)."""
        write.waiter = asyncio.get_running_loop().create_future()
        await self.put(write)
        await write.waiter

    def close(self) -> None:
        self._closed = True
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)
        if self._room is not None:
            self._room.set()

    async def run(self) -> None:
        """Commit batches until closed and drained."""
        loop = asyncio.get_running_loop()
        queued = self._queued
        while True:
            if not queued:
                if self._closed:
                    return
                self._wake = loop.create_future()
                await self._wake
                continue
            batch = [queued.popleft() for _ in range(min(len(queued), self._batch))]
            if self._room is not None:
                self._room.set()
                self._room = None
            try:
                await anyio.to_thread.run_sync(self._commit, batch, limiter=self._thread)
            except BaseException as exc:  # the whole batch failed: tell every writer
                for write in batch:
                    write.error = write.error or exc
                self._report(batch)
                if not isinstance(exc, Exception):
                    raise
                continue
            self._report(batch)

    def _report(self, batch: Sequence[Write]) -> None:
        for write in batch:
            then = write.then
            if then is not None:
                try:
                    then(None if write.error is None else self._failure(write))
                except Exception as exc:  # the waiter (if any) raises it; the writer goes on
                    write.error = write.error or exc
            waiter = write.waiter
            if waiter is not None and not waiter.done():  # (a cancelled writer's is)
                waiter.set_result(None)


__all__ = ["CommitQueue", "Write"]
