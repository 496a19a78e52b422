"""``FrameChannel``: one end of a local worker process's socket to its
driver, as whole length-prefixed MessagePack frames.  An asyncio protocol
on the socket's transport: the frames that arrive are split as they come
and handed over together (``receive_queued``); the frames sent in one
turn of the loop are written together at its end, in order.  Must not know what the
frames say.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Final, cast, final

import anyio
import msgspec

from agentrt.runtime.placement._worker_wire import ENCODER

#: A frame's length prefix.
HEADER: Final = 4
#: The largest frame either side accepts (a bound on a bad peer's claim).
MAX_FRAME: Final = 1 << 30
#: Whole frames held for the reader, in bytes, beyond which the socket is
#: not read until it takes them (the peer then waits on its own socket).
HELD: Final = 1 << 22
#: Bytes the transport buffers for a slow peer before ``send`` waits for it
#: to read (a frame is always buffered whole first).
WRITE_HIGH: Final = 1 << 20


@final
class FrameChannel(asyncio.Protocol):
    """One end of a worker's socket: whole frames in, whole frames out.

    ``receive`` / ``receive_queued`` (one reader at a time) return what
    arrived, ``anyio.EndOfStream`` once the peer closed and every frame it
    sent was taken, ``anyio.BrokenResourceError`` when the socket failed
    (or the peer claimed a frame over ``MAX_FRAME``),
    ``anyio.ClosedResourceError`` after ``aclose``.  ``send`` writes a
    frame whole, in the order of the calls (a cancelled caller cannot cut
    one), and waits only while the peer leaves ``WRITE_HIGH`` bytes unread
    (a failed write shows at the next ``send``)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._partial = bytearray()
        """The start of a frame whose end has not arrived."""
        self._frames: deque[bytes] = deque()
        self._out = bytearray()
        """Frames sent in this turn of the loop, to write at its end."""
        self._held = 0
        """The bytes of ``_frames``."""
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._closed = False

    @classmethod
    async def of(cls, sock: socket.socket) -> FrameChannel:
        """The channel on ``sock`` (a connected stream socket; it is the
        channel's from now on)."""
        loop = asyncio.get_running_loop()
        _, channel = await loop.connect_accepted_socket(cls, sock)
        return channel

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.set_write_buffer_limits(high=WRITE_HIGH)

    def data_received(self, data: bytes) -> None:
        if self._partial:
            self._partial += data
            self._split(self._partial)
        else:
            self._split(data)
        if self._held >= HELD and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # half-closed: what we still send goes out

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self._error is None:
            self._error = exc
        self._eof = True
        self._wake()
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- the channel -----------------------------------------------------------------

    async def send(self, frame: msgspec.Struct) -> None:
        """Send ``frame``, behind the frames sent before it: the frames
        sent in one turn of the loop go out in one write, at its end (the
        driver's acknowledgements and the rollouts it places, a worker's
        batch and its rollouts' outcomes)."""
        transport = self._transport
        if self._closed:
            raise anyio.ClosedResourceError
        if transport is None or transport.is_closing():
            raise anyio.BrokenResourceError(self._error)
        data = ENCODER.encode(frame)
        if not self._out:
            asyncio.get_running_loop().call_soon(self._write)
        self._out += len(data).to_bytes(HEADER, "big")
        self._out += data
        if self._drained is not None:
            await asyncio.shield(self._drained)

    async def receive(self) -> bytes:
        """The next frame."""
        await self._arrived()
        frame = self._frames.popleft()
        self._taken(len(frame))
        return frame

    async def receive_queued(self) -> list[bytes]:
        """The frames that arrived (at least one), in order."""
        await self._arrived()
        frames = list(self._frames)
        self._frames.clear()
        self._taken(self._held)
        return frames

    async def aclose(self) -> None:
        """Close the socket (what is not written yet is dropped)."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        self._wake()

    async def _arrived(self) -> None:
        while not self._frames:
            if self._closed:
                raise anyio.ClosedResourceError
            if isinstance(self._error, anyio.BrokenResourceError):
                raise self._error
            if self._error is not None:
                raise anyio.BrokenResourceError from self._error
            if self._eof:
                raise anyio.EndOfStream
            if self._waiter is not None:
                raise anyio.BusyResourceError("reading from")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _write(self) -> None:
        out, self._out = self._out, bytearray()  # the transport may hold on to it
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out)

    def _taken(self, size: int) -> None:
        self._held -= size
        if self._paused and self._held < HELD and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _split(self, data: bytes | bytearray) -> None:
        """The whole frames at the start of ``data`` to ``_frames``; the
        rest is kept as ``_partial``."""
        start, end = 0, len(data)
        while end - start >= HEADER:
            size = int.from_bytes(data[start : start + HEADER], "big")
            if size > MAX_FRAME:
                self._error = anyio.BrokenResourceError(
                    f"a frame of {size} bytes (at most {MAX_FRAME})"
                )
                self._partial.clear()
                if self._transport is not None:
                    self._transport.abort()
                return
            stop = start + HEADER + size
            if stop > end:
                break
            self._frames.append(bytes(data[start + HEADER : stop]))
            self._held += size
            start = stop
        if data is self._partial:
            del self._partial[:start]
        elif start < end:
            self._partial += data[start:]


__all__ = ["FrameChannel"]
