"""Run the sim-server: in-process (``SimServer``) or as a subprocess
(``spawn_sim_server``, ``start_sim_server_process``).  The command line lives
in ``sim_server``, which this module does not import.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from enum import Enum
from typing import Any, Self

import anyio
from aiohttp import web
from anyio.abc import TaskGroup, TaskStatus

from agentrt.runtime.kernel._errors import BackendUnavailable
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.testing.sim._sim_app import build_app
from agentrt.runtime.testing.sim._sim_config import SimServerConfig
from agentrt.runtime.testing.sim._sim_engine import SimEngine

READY_PREFIX = "agentrt sim-server listening on "
_READY_RE = re.compile(re.escape(READY_PREFIX) + r"(http://\S+)")
# 1,000 clients connecting at once must not overflow the accept queue.
_BACKLOG = 4096

log = get_logger("agentrt.sim_server")


class _State(Enum):
    UNOPENED = 1
    OPENED = 2
    CLOSED = 3


def _listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def _start_site(runner: web.AppRunner, sock: socket.socket) -> web.SockSite:
    site = web.SockSite(runner, sock, backlog=_BACKLOG)
    try:
        await site.start()
    except BaseException:
        sock.close()
        raise
    return site


class SimServer:
    """The sim-server on the current event loop (asyncio backend), as an
    async context manager (``async with SimServer(config) as srv: srv.url``)
    or a service (``await tg.start(srv.serve)`` reports the URL)."""

    def __init__(self, config: SimServerConfig | None = None, **overrides: Any) -> None:
        base = config or SimServerConfig()
        if overrides:
            base = SimServerConfig.model_validate({**base.model_dump(), **overrides})
        self.config = base
        self.engine = SimEngine(self.config)
        self._state = _State.UNOPENED
        self._stack = contextlib.AsyncExitStack()
        self._tg: TaskGroup | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None
        self._port = 0
        self._restarting = False

    @property
    def port(self) -> int:
        """The port listened on (known once entered)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8123`` (no trailing slash);
        known once the server has started (and still after it stopped)."""
        if self._port == 0:
            raise RuntimeError("SimServer.url is only known once the server has started")
        host = self.config.host
        return f"http://[{host}]:{self._port}" if ":" in host else f"http://{host}:{self._port}"

    def stats(self) -> dict[str, Any]:
        """The ``/sim/stats`` document, read directly."""
        return self.engine.stats()

    async def __aenter__(self) -> Self:
        if self._state is not _State.UNOPENED:
            raise RuntimeError("Cannot reopen a SimServer once it has been started.")
        self._state = _State.OPENED
        try:
            self._tg = await self._stack.enter_async_context(anyio.create_task_group())
            app = build_app(self.engine, self._restart_from_request)
            runner = web.AppRunner(
                app,
                handle_signals=False,
                access_log=None,
                handler_cancellation=True,
                shutdown_timeout=1.0,
            )
            await runner.setup()
            self._runner = runner
            self._stack.push_async_callback(self._shutdown)
            sock = _listen(self.config.host, self.config.port)
            self._port = sock.getsockname()[1]
            self._site = await _start_site(runner, sock)
        except BaseException:
            self._state = _State.CLOSED
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._state = _State.CLOSED
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        await self._stack.__aexit__(*exc_info)

    async def _shutdown(self) -> None:
        runner = self._runner
        if runner is None:
            return
        with anyio.CancelScope(shield=True):
            if runner.server is not None:
                for connection in runner.server.connections:
                    connection.force_close()
            await runner.cleanup()

    async def serve(self, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; reports the base URL to ``task_status``."""
        async with self:
            task_status.started(self.url)
            await anyio.sleep_forever()

    async def _restart_from_request(self) -> None:
        """The ``restart`` fault: stop listening now (so the client whose
        request drew it finds the port closed), finish in the background."""
        if self._tg is None or self._restarting or self._state is not _State.OPENED:
            return
        await self._go_down()
        self._tg.start_soon(self._come_back)

    async def restart(self) -> None:
        """Simulate a server restart: close the listening socket and every
        connection, refuse connections for ``restart_down_s``, flush the
        prefix cache, listen again on the same port (the URL stays valid)."""
        if self._restarting or self._state is not _State.OPENED:
            raise RuntimeError("SimServer.restart() needs a running server not already restarting")
        await self._go_down()
        await self._come_back()

    async def _go_down(self) -> None:
        """Begin a restart: stop listening; if that fails, no restart is under way."""
        self._restarting = True
        try:
            await self._stop_listening()
        except BaseException:
            self._restarting = False
            raise

    async def _stop_listening(self) -> None:
        self.engine.restarts += 1
        log.warning("sim_restart", port=self._port, down_s=self.config.restart_down_s)
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def _come_back(self) -> None:
        try:
            runner = self._runner
            if runner is not None and runner.server is not None:
                for connection in runner.server.connections:
                    connection.force_close()
            await anyio.sleep(self.config.restart_down_s)
            self.engine.flush_cache()
            if runner is not None and self._state is _State.OPENED:
                self._site = await _start_site(runner, _listen(self.config.host, self._port))
        finally:
            self._restarting = False


@contextlib.asynccontextmanager
async def spawn_sim_server(
    config: SimServerConfig | None = None, *, ready_timeout: float = 30.0, **overrides: Any
) -> AsyncIterator[str]:
    """Start the sim-server in its own process; yield its base URL.

    Raises ``BackendUnavailable`` (with the child's stderr) when it exits or
    stays silent for ``ready_timeout`` seconds before printing its ready line.
    On exit the process gets SIGTERM, then SIGKILL after 5 s.
    """
    with tempfile.TemporaryFile() as stderr:
        process = await anyio.open_process(_argv(config, overrides), stdin=None, stderr=stderr)
        try:
            url = await _wait_ready(process, ready_timeout, stderr)
            yield url
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.terminate()
                    with anyio.move_on_after(5):
                        await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                await process.aclose()


def start_sim_server_process(
    config: SimServerConfig | None = None,
    *,
    stderr: int | None = None,
    **overrides: Any,
) -> tuple[subprocess.Popen[str], str]:
    """Start the sim-server in its own process and read its ready line:
    the process (the caller terminates it) and its base URL.  ``stderr``:
    where its log goes (default: this process's stderr).  Raises
    ``BackendUnavailable`` when the first line is not the ready line."""
    process = subprocess.Popen(  # noqa: S603 - this interpreter, our module, flags from a config
        _argv(config, overrides), stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = _READY_RE.search(line)
    if match is None:
        process.kill()
        process.wait()
        process.stdout.close()
        raise BackendUnavailable(
            f"sim-server did not start (exit code {process.returncode}): {line!r}",
            backend="sim-server",
        )
    return process, match.group(1)


def _argv(config: SimServerConfig | None, overrides: dict[str, Any]) -> list[str]:
    cfg = config or SimServerConfig()
    if overrides:
        cfg = SimServerConfig.model_validate({**cfg.model_dump(), **overrides})
    module = "agentrt.runtime.testing.sim._sim_server"
    return [sys.executable, "-m", module, *cfg.to_argv(), "--exit-with-parent"]


async def _wait_ready(process: anyio.abc.Process, ready_timeout: float, stderr: Any) -> str:
    assert process.stdout is not None
    seen = b""
    with anyio.move_on_after(ready_timeout):
        while b"\n" not in seen:
            try:
                seen += await process.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                break
    match = _READY_RE.search(seen.decode(errors="replace"))
    if match:
        return match.group(1)
    with anyio.move_on_after(1):
        await process.wait()
    stderr.seek(0)
    tail = stderr.read()[-2000:].decode(errors="replace").strip()
    state = (
        f"exited with code {process.returncode}"
        if process.returncode is not None
        else (f"printed no ready line within {ready_timeout:g}s")
    )
    raise BackendUnavailable(
        f"sim-server {state}; stdout: {seen[:500]!r}; stderr: {tail or '(empty)'}",
        backend="sim-server",
    )
