"""A rollout worker on a Ray cluster: ``RolloutWorker``, the Ray actor a
``RayPlacement`` starts; its methods run on Ray's event loop and drive a
``HostedWorker`` (the rollouts, on a loop of their own).  The driver
drains the worker's outbox with ``exchange``.  Must not know how rollouts
are chosen or aggregated.
"""

from __future__ import annotations

import os
from typing import Final

import anyio
import ray

from agentrt._version import __version__
from agentrt.runtime.placement._worker_host import HostedWorker
from agentrt.runtime.placement._worker_wire import (
    ENCODER,
    PLACED,
    REPLIES,
    WorkerReady,
    WorkerSpec,
)

#: How long an exchange waits, once an item is posted, for more to join
#: it: each exchange is a Ray call that costs the driver hundreds of
#: microseconds, and a step's acknowledgement can wait a few milliseconds.
EXCHANGE_GATHER_S: Final = 0.005


class RolloutWorker:
    """The Ray actor (``ray.remote``-wrapped by the driver): builds its
    ``HostedWorker`` and runs what the driver sends."""

    def __init__(self, spec: WorkerSpec) -> None:
        self._hosted = HostedWorker(spec)
        self._outbox = self._hosted.outbox

    async def ready(self) -> bytes:
        """Where this worker runs, or why it could not start."""
        return ENCODER.encode(
            WorkerReady(
                node_id=ray.get_runtime_context().get_node_id(),
                pid=os.getpid(),
                version=__version__,
                error=self._hosted.error,
            )
        )

    async def run(self, data: bytes) -> bytes:
        """Run a ``PlacedRollout``; its ``RolloutOutcome``."""
        return ENCODER.encode(await self._hosted.run(PLACED.decode(data)))

    async def deliver(self, data: bytes) -> None:
        """Take replies the driver sends between exchanges (bank answers)."""
        self._outbox.deliver(REPLIES.decode(data))

    async def exchange(self, data: bytes) -> bytes:
        """Take the driver's replies; give it what was posted since."""
        self._outbox.deliver(REPLIES.decode(data))
        return ENCODER.encode(await self._outbox.take(EXCHANGE_GATHER_S))

    async def close(self) -> None:
        """Stop the rollouts and close the ``Runtime`` (MCP servers too);
        in a thread, so that the rollouts' last events still reach the driver."""
        await anyio.to_thread.run_sync(self._hosted.close)


__all__ = ["RolloutWorker"]
