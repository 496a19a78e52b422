"""The daemon for tests: ``agentrt serve`` as a process, for tests that
drive it from outside (a documented command, a CLI against it), and the
daemon app over a ``RunManager`` in this process, for tests that also hold
the manager."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import openai

from agentrt.agents import AgentConfig
from agentrt.runtime.config._config_file import AgentrtConfig, ServerConfig, StoreConfig
from agentrt.runtime.engine._runtime import RuntimeConfig
from agentrt.runtime.kernel._parent_death import guarded_argv
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


def start_serve(
    config: Path,
    port: int,
    log: Path,
    *,
    cwd: Path | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.Popen[bytes]:
    """``agentrt serve --config config`` in a session of its own (stderr
    appended to ``log``; ``preexec_fn`` run in the child before it starts),
    returned once ``/readyz`` answers 200 on ``port`` (within 60 s; stopped
    when it does not).  It is gone with pytest, even when pytest is killed."""
    argv = guarded_argv([sys.executable, "-m", "agentrt", "serve", "--config", str(config)], 10)
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=preexec_fn,  # noqa: PLW1509 - a plain fork of the test process
        )
    try:
        wait_ready(proc, port, log)
    except BaseException:
        _stop(proc)
        raise
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminated, and killed if it has not stopped 20 s later."""
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(20)
    proc.kill()  # nothing when it has stopped
    proc.wait()


@contextlib.contextmanager
def serving(
    config: Path, port: int, log: Path, *, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``start_serve`` for the block; then stopped (terminated, and killed
    if it has not stopped 20 s later)."""
    proc = start_serve(config, port, log, cwd=cwd)
    try:
        yield proc
    finally:
        _stop(proc)


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


@dataclass(frozen=True)
class ServedManager:
    """The daemon app serving ``manager`` at ``endpoint``, and clients of it."""

    endpoint: DaemonEndpoint
    manager: RunManager

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def port(self) -> int:
        return self.endpoint.port

    @property
    def mcp_url(self) -> str:
        return f"{self.endpoint.url}/mcp"

    @asynccontextmanager
    async def openai(self, retries: int = 0) -> AsyncIterator[openai.AsyncOpenAI]:
        """The OpenAI SDK's client of the daemon's ``/v1`` (20 s per request)."""
        async with openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key="x", max_retries=retries, timeout=20.0
        ) as client:
            yield client

    @asynccontextmanager
    async def http(self) -> AsyncIterator[httpx.AsyncClient]:
        """A plain HTTP client of the daemon (20 s per request)."""
        async with httpx.AsyncClient(base_url=self.url, timeout=20.0) as client:
            yield client


@asynccontextmanager
async def serving_manager(
    config: AgentrtConfig,
    backends: Sequence[ModelBackend],
    *,
    metrics: DaemonMetrics | None = None,
) -> AsyncIterator[ServedManager]:
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
            yield ServedManager(endpoint, manager)
        finally:
            tg.cancel_scope.cancel()
