"""The daemon for tests: ``agentrt serve`` as a process, for tests that
drive it from outside (a documented command, a CLI against it), and the
daemon app over a ``RunManager`` in this process, for tests that also hold
the manager."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx

from agentrt.agents import AgentConfig
from agentrt.runtime.config._config_file import AgentrtConfig, ServerConfig, StoreConfig
from agentrt.runtime.engine._runtime import RuntimeConfig
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.serve._daemon import DaemonEndpoint, serve_manager
from agentrt.runtime.serve._metrics import DaemonMetrics
from agentrt.runtime.serve._run_manager import RunManager


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Return once ``/readyz`` answers 200 on ``port``; fail the test when
    ``proc`` (stderr in ``log``) exits first, or after 60 s."""
    deadline = time.monotonic() + 60
    while not _ready(port):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the daemon was not ready in 60 s"
        time.sleep(0.05)


@contextlib.contextmanager
def serving(
    config: Path, port: int, log: Path, *, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``agentrt serve --config config`` (stderr appended to ``log``), given
    once ``/readyz`` answers 200 on ``port`` (within 60 s); on exit it is
    terminated, and killed if it has not stopped 20 s later."""
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt", "serve", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=cwd,
        )
    try:
        wait_ready(proc, port, log)
        yield proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
        proc.kill()  # nothing when it has stopped
        proc.wait()


def solver_daemon_config(tmp_path: Path, server: ServerConfig | None = None) -> AgentrtConfig:
    """A daemon with one agent, ``solver`` ("Answer briefly."), its run store
    in ``tmp_path``, no prefix warming and no early stop; ``server`` defaults
    to a free port."""
    return AgentrtConfig(
        server=server or ServerConfig(port=0),
        store=StoreConfig(path=tmp_path / "runs.db"),
        runtime=RuntimeConfig(
            agents={"solver": AgentConfig(name="solver", instructions="Answer briefly.")},
            warm_prefix=False,
            early_stop=False,
        ),
    )


@asynccontextmanager
async def serving_manager(
    config: AgentrtConfig,
    backends: Sequence[ModelBackend],
    *,
    metrics: DaemonMetrics | None = None,
) -> AsyncIterator[tuple[DaemonEndpoint, RunManager]]:
    """The daemon app (``serve_manager``: REST, ``/v1`` OpenAI, ``/mcp``) over
    a ``RunManager`` on ``backends`` that the test holds, with ``metrics``
    observing the runs when given; stopped when the block ends."""
    observer = metrics.observe if metrics is not None else None
    async with (
        RunManager(config, backends=backends, observer=observer) as manager,
        anyio.create_task_group() as tg,
    ):
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: serve_manager(manager, metrics=metrics, task_status=task_status)
        )
        try:
            yield endpoint, manager
        finally:
            tg.cancel_scope.cancel()
