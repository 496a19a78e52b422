"""A sim model server in a process of its own, for tests that kill and
restart a daemon while the model server stays up."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from agentrt.testing import SimServerConfig, start_sim_server_process


@contextmanager
def sim_server_process(config: SimServerConfig) -> Iterator[str]:
    """The URL of a sim server process run with ``config``, stopped (and
    its stdout pipe closed) when the block ends."""
    proc, url = start_sim_server_process(config, stderr=subprocess.DEVNULL)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
