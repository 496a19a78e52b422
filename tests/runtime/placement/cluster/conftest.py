"""A 3-node Ray cluster on loopback (run inside a network namespace by
``tests/runtime/placement/test_ray_cluster.py``): a head without CPUs and two
worker nodes of one CPU each, so each rollout worker has a node of its own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

PORT = 26379
ADDRESS = f"127.0.0.1:{PORT}"
RAY = str(Path(sys.executable).with_name("ray"))
#: A killed node is declared dead within about 3 s (Ray's default: 30 s).
ENV = {
    **os.environ,
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"use_uvloop": True})


def _ray(*args: str, attempts: int = 1) -> None:
    """``ray ARGS``; a node's start is tried again on a loaded machine
    (its GCS connection times out after 30 s)."""
    for attempt in range(attempts):
        done = subprocess.run(
            [RAY, *args], capture_output=True, text=True, timeout=180, check=False, env=ENV
        )
        if done.returncode == 0:
            return
        if attempt + 1 < attempts:
            time.sleep(2)
    raise AssertionError(f"ray {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}")


@dataclass(frozen=True)
class Cluster:
    address: str

    def add_worker_node(self) -> None:
        """Start one more worker node (one CPU)."""
        _ray("start", f"--address={self.address}", "--num-cpus=1", attempts=3)

    def kill_node(self, node_id: str) -> int:
        """SIGKILL the raylet of node ``node_id`` and every process it
        started (its workers: the rollout worker and its MCP servers die
        with it, as when a machine goes away); returns the raylet's pid."""
        flag = f"--node_id={node_id}"
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if "raylet" in (proc.info["name"] or "") and flag in cmdline:
                victims = [proc, *proc.children(recursive=True)]
                for victim in victims:
                    victim.kill()
                return int(proc.pid)
        raise AssertionError(f"no raylet with {flag}")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    assert os.environ.get("AGENTRT_RAY_NETNS") == "1", "run through test_ray_cluster.py"
    # This pytest is the first process of a PID namespace of its own
    # (test_ray_cluster.py): every other process in it is the cluster's.
    assert os.getpid() == 1, "run through test_ray_cluster.py (a PID namespace of its own)"
    try:
        _ray(
            "start",
            "--head",
            f"--port={PORT}",
            "--num-cpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
        )
        # The two worker nodes join at once (each `ray start` is seconds of
        # imports and waiting for its raylet to register).
        with ThreadPoolExecutor(2) as pool:
            joined = [pool.submit(Cluster(ADDRESS).add_worker_node) for _ in range(2)]
            for node in joined:
                node.result()
        yield Cluster(ADDRESS)
    finally:
        # SIGKILL every node and worker at once, not ``ray stop`` (11 s here:
        # its own imports, then its grace period, waiting on the processes it
        # killed, which stay zombies of this namespace's first process,
        # pytest, which does not reap them; they go when the namespace does).
        for proc in psutil.process_iter():
            if proc.pid != 1:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
