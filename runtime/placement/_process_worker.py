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
from concurrent.futures import Future
from typing import Final

import anyio
from anyio.abc import TaskGroup

from agentrt._version import __version__
from agentrt.runtime.kernel._parent_death import die_with
from agentrt.runtime.placement._frame_channel import FrameChannel
from agentrt.runtime.placement._worker_host import HostedWorker, has_uvloop
from agentrt.runtime.placement._worker_wire import (
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

#: How long a closing worker may take to end its rollouts and its Runtime.
CLOSE_S: Final = 10.0
#: How long the worker waits, once an item is posted, for more to join it
#: in one frame: each frame costs the driver a read, a loop turn and an
#: acknowledgement, and a step's acknowledgement can wait a few milliseconds.
GATHER_S: Final = 0.005


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


__all__ = ["worker_main"]
