"""``agentrt serve``: the daemon's process, from socket to shutdown.

Owns ``run_daemon``: opens the ``RunManager`` (store, runtime, resumed
runs), binds the socket, builds the app (REST + SSE, OpenAI-compatible,
MCP at ``/mcp``, ``/metrics``, the web page) and serves it with uvicorn
inside the caller's task group, reporting a ``DaemonEndpoint`` once it
accepts connections.  Shutdown, on SIGTERM/SIGINT (``handle_signals``) or
when the caller cancels: stop admitting runs (503), let running runs finish
within ``server.shutdown_grace_s``, checkpoint the rest (their committed
steps stay in the store; the next start resumes them), then stop serving.

The roof: may import every layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, final

import anyio
import msgspec
import uvicorn
from anyio.abc import TaskStatus
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentrt.aggregators._judge import Judge
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.config._daemon_config import DaemonConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.kernel._event_loop import run as run_loop
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._app import allowed_hosts, allowed_origins, build_app
from agentrt.runtime.serve._bridge import ManagerBridge
from agentrt.runtime.serve._governance import governed_http
from agentrt.runtime.serve._metrics import DaemonMetrics, metrics_route
from agentrt.runtime.serve._pauses import GcPauses, IdleCollector, LoopStalls
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve._web import web_routes
from agentrt.runtime.serve.mcp._mcp_server import mcp_asgi
from agentrt.runtime.serve.openai._chat_completions import openai_routes
from agentrt.tools._tool import Tool

log = get_logger(__name__)

_BACKLOG: Final = 1024
_STARTUP_TIMEOUT_S: Final = 30.0


@final
class DaemonEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where the daemon listens."""

    url: str
    host: str
    port: int


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon drains runs
    first, then tells uvicorn to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror}", where="server"
        ) from exc
    return sock


async def run_daemon(
    config: DaemonConfig,
    *,
    backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
    tools: Sequence[Tool] | None = None,
    prices: PriceTable | None = None,
    judge: Judge | None = None,
    handle_signals: bool = False,
    own_gc: bool = False,
    task_status: TaskStatus[DaemonEndpoint] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or SIGTERM/SIGINT with ``handle_signals``);
    reports the ``DaemonEndpoint`` once it accepts connections.  The socket
    is bound before the store is opened, so a taken port fails fast.
    ``own_gc``: the process is the daemon's (``agentrt serve``), which runs
    full garbage collections when no run executes (``IdleCollector``); an
    embedding application leaves it off and keeps its own collector."""
    metrics = DaemonMetrics()
    manager = RunManager(
        config, backends=backends, tools=tools, prices=prices, judge=judge, observer=metrics.observe
    )
    sock = _listen(config.server.host, config.server.port)
    try:
        async with manager:
            await serve_manager(
                manager,
                metrics=metrics,
                sock=sock,
                handle_signals=handle_signals,
                idle_collector=IdleCollector() if own_gc else None,
                task_status=task_status,
            )
    finally:
        sock.close()


async def serve_manager(
    manager: RunManager,
    *,
    metrics: DaemonMetrics | None = None,
    sock: socket.socket | None = None,
    handle_signals: bool = False,
    idle_collector: IdleCollector | None = None,
    task_status: TaskStatus[DaemonEndpoint] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an open ``manager`` (what ``run_daemon`` does once it opened
    one; embedders and tests that hold the manager call this directly).
    The HTTP server runs on its own thread and loop (``bridge``)."""
    config = manager.config
    server = config.server
    if metrics is None:
        metrics = DaemonMetrics()
        manager.observer = metrics.observe
    service = ManagerBridge(manager, asyncio.get_running_loop())
    _watch(metrics, manager, service)
    own = sock is None
    sock = sock or _listen(server.host, server.port)
    try:
        port = int(sock.getsockname()[1])
        mcp = mcp_asgi(
            service,
            port=port,
            allowed_hosts=allowed_hosts(server.host, port, server.allowed_hosts),
            allowed_origins=allowed_origins(server.host, port, server.allowed_origins),
        )
        extra = [
            *openai_routes(service, keepalive_s=server.sse_keepalive_s),
            Route("/mcp", endpoint=mcp.app),
            metrics_route(metrics),
            *web_routes(),
        ]
        app = build_app(service, port=port, extra_routes=extra, hit=metrics.limit_hit)
        stalls = LoopStalls()
        web = _Server(
            uvicorn.Config(
                _timed(app, stalls),
                http=governed_http(server, metrics.limit_hit, service.turns),
                lifespan="off",
                log_config=None,
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=max(1, round(server.shutdown_grace_s)),
            )
        )
        shown = f"[{server.host}]" if ":" in server.host else server.host
        endpoint = DaemonEndpoint(url=f"http://{shown}:{port}", host=server.host, port=port)
        api = _ApiThread(web, sock, mcp.lifespan, stalls)
        with GcPauses() as pauses:
            metrics.registry.register(pauses)
            metrics.registry.register(stalls)
            try:
                await _serve(
                    api=api,
                    manager=manager,
                    endpoint=endpoint,
                    handle_signals=handle_signals,
                    idle_collector=idle_collector,
                    task_status=task_status,
                )
            finally:
                metrics.registry.unregister(stalls)
                metrics.registry.unregister(pauses)
    finally:
        if own:
            sock.close()


def _watch(metrics: DaemonMetrics, manager: RunManager, service: ManagerBridge) -> None:
    """Scrape-time sources; they are read on the API thread, so what belongs
    to the run loop (the runtime's backends and queues) is read there."""
    metrics.watch_active_runs(manager.active)
    metrics.watch_admission(manager.admission)
    metrics.watch_store_queue(lambda: manager.store.queue_depth)
    metrics.watch_runs_by_status(manager.store.count_by_status)
    metrics.watch_backends(lambda: service.read_on_run_loop(lambda: dict(manager.runtime.backends)))
    metrics.watch_mailboxes(lambda: service.read_on_run_loop(manager.queue_depths))
    metrics.watch_mcp_servers(lambda: service.ask_on_run_loop(manager.runtime.mcp_status))


def _timed(app: ASGIApp, stalls: LoopStalls) -> ASGIApp:
    """``app``, its loop's stalls timed while it serves (``LoopStalls.enter``)."""

    async def timed(scope: Scope, receive: Receive, send: Send) -> None:
        stalls.enter()
        try:
            await app(scope, receive, send)
        finally:
            stalls.leave()

    return timed


@final
class _ApiThread:
    """uvicorn (and the MCP session manager) on a thread with its own loop,
    its stalls timed by ``stalls``."""

    def __init__(
        self,
        web: _Server,
        sock: socket.socket,
        lifespan: AbstractAsyncContextManager[None],
        stalls: LoopStalls,
    ) -> None:
        self.web = web
        self.done = threading.Event()
        self.failure: list[BaseException] = []

        async def main() -> None:
            async with lifespan, anyio.create_task_group() as tg:  # uvicorn: lifespan="off"
                tg.start_soon(stalls.watch)
                await web.serve(sockets=[sock])
                tg.cancel_scope.cancel()

        def run() -> None:
            try:
                run_loop(main)
            except BaseException as exc:  # reported to the run loop, which decides
                self.failure.append(exc)
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, name="agentrt-api", daemon=True)

    async def wait(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        return await anyio.to_thread.run_sync(self.done.wait, timeout, abandon_on_cancel=True)


async def _serve(
    *,
    api: _ApiThread,
    manager: RunManager,
    endpoint: DaemonEndpoint,
    handle_signals: bool,
    idle_collector: IdleCollector | None,
    task_status: TaskStatus[DaemonEndpoint],
) -> None:
    config = manager.config
    web = api.web
    api.thread.start()
    try:
        with anyio.fail_after(_STARTUP_TIMEOUT_S):
            # uvicorn only exposes a flag for "started", no event to wait on.
            while not web.started and not api.done.is_set():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        if api.done.is_set():
            why = f": {api.failure[0]!r}" if api.failure else ""
            raise ConfigError(f"the HTTP server stopped while starting on {endpoint.url}{why}")
        log.info(
            "daemon_serving",
            url=endpoint.url,
            store=str(config.store.path),
            resumed_runs=len(manager.resumed),
        )
        task_status.started(endpoint)
        async with anyio.create_task_group() as tg:
            if idle_collector is not None:
                tg.start_soon(idle_collector.run, lambda: manager.active() == 0)
            if handle_signals:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        log.info("daemon_signal", signal=signal.Signals(signum).name)
                        break
            else:
                await api.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            stopped_runs = await manager.drain(config.server.shutdown_grace_s)
            log.info("daemon_stopping", checkpointed_runs=len(stopped_runs))
            web.should_exit = True
            if not await api.wait(config.server.shutdown_grace_s + 5.0):
                web.force_exit = True
                await api.wait(2.0)


__all__ = ["DaemonEndpoint", "run_daemon", "serve_manager"]
