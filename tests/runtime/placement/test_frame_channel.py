"""A worker process's socket as whole frames: frames cut anywhere by the
reads, or many in one, come out whole and in order; what the peer sent
before it closed is read before the end; a claimed frame over the bound
breaks the channel; a reader that does not take what arrived stops the
socket from being read, and it is read again once the frames are taken;
a closed channel says so."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec
import pytest

from agentrt.runtime.placement import _frame_channel
from agentrt.runtime.placement._frame_channel import HEADER, MAX_FRAME, FrameChannel
from agentrt.runtime.placement._worker_wire import TO_WORKER, Cancel, Close
from tests._support.polling import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


def _framed(frame: msgspec.Struct) -> bytes:
    data = msgspec.msgpack.encode(frame)
    return len(data).to_bytes(HEADER, "big") + data


@pytest.fixture
async def pair() -> AsyncIterator[tuple[FrameChannel, socket.socket]]:
    """A channel, and the raw socket at the other end (blocking, short writes)."""
    mine, theirs = socket.socketpair()
    channel = await FrameChannel.of(mine)
    try:
        yield channel, theirs
    finally:
        await channel.aclose()
        theirs.close()


async def test_frames_cut_anywhere_come_out_whole_and_in_order(
    pair: tuple[FrameChannel, socket.socket],
) -> None:
    channel, theirs = pair
    frames = [Cancel(id=n) for n in range(1, 41)]
    stream = b"".join(_framed(f) for f in frames)
    for at in range(0, len(stream), 7):  # each read ends inside a frame, or its header
        theirs.sendall(stream[at : at + 7])
        await anyio.lowlevel.checkpoint()
    got: list[msgspec.Struct] = []
    with anyio.fail_after(5):
        while len(got) < len(frames):
            got += [TO_WORKER.decode(f) for f in await channel.receive_queued()]
    assert got == frames
    theirs.sendall(_framed(Close()) * 3)  # many in one read
    with anyio.fail_after(5):
        assert TO_WORKER.decode(await channel.receive()) == Close()
        assert [TO_WORKER.decode(f) for f in await channel.receive_queued()] == [Close()] * 2


async def test_what_was_sent_before_the_peer_closed_is_read_first(
    pair: tuple[FrameChannel, socket.socket],
) -> None:
    channel, theirs = pair
    theirs.sendall(_framed(Cancel(id=1)) + _framed(Cancel(id=2)))
    theirs.close()
    with anyio.fail_after(5):
        await eventually(lambda: len(channel._frames) == 2)
        assert [TO_WORKER.decode(f) for f in await channel.receive_queued()] == [
            Cancel(id=1),
            Cancel(id=2),
        ]
        with pytest.raises(anyio.EndOfStream):
            await channel.receive()
    with pytest.raises(anyio.BrokenResourceError):
        await _send_until_it_fails(channel)


def _receive(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``sock`` (blocking, at most 5 s)."""
    sock.settimeout(5)
    received = b""
    while len(received) < size:
        received += sock.recv(1 << 16)
    return received


async def _send_until_it_fails(channel: FrameChannel) -> None:
    """The peer is gone: a write fails, now or at one of the next."""
    for _ in range(50):
        await channel.send(Close())
        await anyio.sleep(0.01)


async def test_a_frame_claimed_over_the_bound_breaks_the_channel(
    pair: tuple[FrameChannel, socket.socket],
) -> None:
    channel, theirs = pair
    theirs.sendall(_framed(Close()) + (MAX_FRAME + 1).to_bytes(HEADER, "big"))
    with anyio.fail_after(5):
        assert TO_WORKER.decode(await channel.receive()) == Close()
        with pytest.raises(anyio.BrokenResourceError, match="at most"):
            await channel.receive()


async def test_a_reader_that_does_not_take_the_frames_stops_the_reads(
    pair: tuple[FrameChannel, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    channel, theirs = pair
    monkeypatch.setattr(_frame_channel, "HELD", 64)
    theirs.sendall(_framed(Cancel(id=1)) * 40)  # about 200 bytes: past 64
    await eventually(lambda: channel._paused)
    with anyio.fail_after(5):
        frames = await channel.receive_queued()
        assert not channel._paused  # read again
        while len(frames) < 40:
            frames += await channel.receive_queued()
    assert [TO_WORKER.decode(f) for f in frames] == [Cancel(id=1)] * 40


async def test_frames_sent_reach_the_peer_in_order_and_a_closed_channel_says_so(
    pair: tuple[FrameChannel, socket.socket],
) -> None:
    channel, theirs = pair
    for n in range(1, 6):
        await channel.send(Cancel(id=n))
    expected = b"".join(_framed(Cancel(id=n)) for n in range(1, 6))
    assert await anyio.to_thread.run_sync(_receive, theirs, len(expected)) == expected
    await channel.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await channel.send(Close())
    with pytest.raises(anyio.ClosedResourceError):
        await channel.receive()
