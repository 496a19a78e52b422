"""A worker process of the local placement (``[placement] kind = "local",
workers = N``): ``worker_main`` is what the driver starts it with; it
hosts a ``HostedWorker`` and speaks to the driver over one socket
(``FrameChannel``: length-prefixed MessagePack frames, ``ToWorker`` in,
``ToDriver`` out).  It exits when the driver says ``Close``, when the
socket closes, or when the driver's process dies (Linux: the kernel kills
it).  Must not know how rollouts are chosen or aggregated.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections import deque
from concurrent.futures import Future
from typing import Final, final

import anyio
import msgspec
from anyio.abc import SocketStream, TaskGroup

from agentrt._version import __version__
from agentrt.runtime.kernel._parent_death import die_with
from agentrt.runtime.placement._worker_host import HostedWorker, has_uvloop
from agentrt.runtime.placement._worker_wire import (
    ENCODER,
    TO_WORKER,
    Cancel,
    Close,
    Items,
    Outcome,
    Place,
    Replies,
    RolloutOutcome,
    WorkerReady,
    WorkerSpec,
)

#: A frame's length prefix.
HEADER: Final = 4
#: The most one read takes from the socket.
READ: Final = 1 << 20
#: The largest frame either side accepts (a bound on a bad peer's claim).
MAX_FRAME: Final = 1 << 30
#: How long a closing worker may take to end its rollouts and its Runtime.
CLOSE_S: Final = 10.0
#: How long the worker waits, once an item is posted, for more to join it
#: in one frame: each frame costs the driver a read, a loop turn and an
#: acknowledgement, and a step's acknowledgement can wait a few milliseconds.
GATHER_S: Final = 0.005


@final
class FrameChannel:
    """One end of a worker's socket: whole frames in, whole frames out.
    Reads take what the socket holds (up to ``READ``), several frames at a
    time when they queued up; frames sent while another send is writing
    go out together in its next write (a write per loop turn, not per
    frame: the driver's acks and placed rollouts, a worker's batches)."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._frames: deque[bytes] = deque()
        self._out = bytearray()
        """Frames to write, in order (bounded by what the peer is owed:
        replies to its items, the rollouts placed on it, their outcomes)."""
        self._writing = False

    @classmethod
    async def of(cls, sock: socket.socket) -> FrameChannel:
        return cls(await SocketStream.from_socket(sock))

    async def send(self, frame: msgspec.Struct) -> None:
        """Send ``frame``: written now, or by the send writing already
        (returning at once; it raises, if the socket fails)."""
        data = ENCODER.encode(frame)
        self._out += len(data).to_bytes(HEADER, "big")
        self._out += data
        if self._writing:
            return
        self._writing = True
        try:
            while self._out:
                chunk = bytes(self._out)
                self._out.clear()
                # Shielded: a write cancelled half-way would cut a frame.
                with anyio.CancelScope(shield=True):
                    await self._stream.send(chunk)
        finally:
            self._writing = False

    async def receive(self) -> bytes:
        """The next frame; ``anyio.EndOfStream`` when the peer closed."""
        while not self._frames:
            self._buffer += await self._stream.receive(READ)
            self._split()
        return self._frames.popleft()

    async def receive_queued(self) -> list[bytes]:
        """The frames that arrived (at least one), in order;
        ``anyio.EndOfStream`` when the peer closed."""
        while not self._frames:
            self._buffer += await self._stream.receive(READ)
            self._split()
        frames = list(self._frames)
        self._frames.clear()
        return frames

    def _split(self) -> None:
        buffer, start = self._buffer, 0
        while len(buffer) - start >= HEADER:
            size = int.from_bytes(buffer[start : start + HEADER], "big")
            if size > MAX_FRAME:
                raise anyio.BrokenResourceError(f"a frame of {size} bytes (at most {MAX_FRAME})")
            end = start + HEADER + size
            if end > len(buffer):
                break
            self._frames.append(bytes(buffer[start + HEADER : end]))
            start = end
        if start:
            del buffer[:start]

    async def aclose(self) -> None:
        await self._stream.aclose()


def worker_main(sock: socket.socket, spec: WorkerSpec, parent: int) -> None:
    """A worker process's body (the target the driver spawns): die with
    ``parent``, open the ``HostedWorker``, serve the driver until it says
    ``Close`` or goes away."""
    _die_with(parent)
    hosted = HostedWorker(spec)
    closed = False
    try:
        closed = anyio.run(_serve, sock, hosted, backend="asyncio", backend_options=_loop_options())
    finally:
        sock.close()
        if not closed:
            # A Runtime that did not close in time (its driver is gone) must
            # not hold the exit: its thread would.
            os._exit(1)


def _loop_options() -> dict[str, bool]:
    return {"use_uvloop": has_uvloop()}


def _die_with(parent: int) -> None:
    """Be killed when the driver's process dies (Linux), even before the
    socket tells: a SIGKILLed driver leaves no worker behind."""
    if not die_with(parent, signal.SIGKILL):  # it died before we asked
        os._exit(1)


async def _serve(sock: socket.socket, hosted: HostedWorker) -> bool:
    """Serve the driver; whether the worker's Runtime closed."""
    channel = await FrameChannel.of(sock)
    await channel.send(
        WorkerReady(node_id="local", pid=os.getpid(), version=__version__, error=hosted.error)
    )
    if hosted.error is not None:
        return True  # it closed what it had opened
    closed = False
    started: dict[int, int] = {}  # the driver's id -> the host's
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump, channel, hosted)
        # Past the end of the stream, the driver is gone: nobody waits for ours.
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            await _take_orders(channel, hosted, started, tg)
        # Closing stops the rollouts; their last events still go out (the pump runs).
        with anyio.move_on_after(CLOSE_S):
            await anyio.to_thread.run_sync(hosted.close, abandon_on_cancel=True)
            closed = True
        tg.cancel_scope.cancel()
    with contextlib.suppress(Exception):
        await channel.aclose()
    return closed


async def _take_orders(
    channel: FrameChannel,
    hosted: HostedWorker,
    started: dict[int, int],
    tg: TaskGroup,
) -> None:
    while True:
        match TO_WORKER.decode(await channel.receive()):
            case Place(id=rid, placed=placed):
                host_id, done = hosted.submit(placed)
                started[rid] = host_id
                tg.start_soon(_answer, channel, rid, done, started)
            case Cancel(id=rid):
                if (running := started.get(rid)) is not None:
                    hosted.cancel(running)
            case Replies(replies=replies):
                hosted.outbox.deliver(replies)
            case Close():
                return


async def _answer(
    channel: FrameChannel, rid: int, done: Future[RolloutOutcome], started: dict[int, int]
) -> None:
    """Send the driver the outcome of ``Place`` ``rid`` once it ended (a
    cancelled rollout's once its last events and charges are out: they
    precede it on the socket)."""
    outcome: RolloutOutcome | None = None
    try:
        outcome = await asyncio.wrap_future(done)
    except asyncio.CancelledError:
        if not done.done():
            raise  # this task's own cancellation: the worker is closing
    finally:
        started.pop(rid, None)
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await channel.send(Outcome(id=rid, outcome=outcome))


async def _pump(channel: FrameChannel, hosted: HostedWorker) -> None:
    """The outbox to the driver, in order, a batch per frame."""
    while True:
        items = await hosted.outbox.take(GATHER_S)
        if items:
            await channel.send(Items(items=items))


__all__ = ["FrameChannel", "worker_main"]
