"""Running a ``ToolServer``: in-process, over stdio, over streamable HTTP (on
its own, or mounted in another ASGI app).  Each ``serve_*`` coroutine is
started with ``await tg.start(...)`` and reports readiness.

Imports the SDK transports, starlette and uvicorn; knows nothing of tools
beyond ``ToolServer``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, NamedTuple, final

import anyio
import msgspec
import uvicorn
from anyio.abc import TaskStatus
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.memory import MessageStream, create_client_server_memory_streams
from mcp_types import INVALID_REQUEST
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools.hosting._event_store import MemoryEventStore
from agentrt.tools.hosting._hosting_config import HttpServeConfig
from agentrt.tools.hosting._tool_server import ToolServer

log = get_logger(__name__)

#: Longest uvicorn and the session manager may take to come up.
_STARTUP_TIMEOUT_S: Final = 30.0
#: Pending connections the listening socket queues before uvicorn accepts.
_BACKLOG: Final = 256
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


@final
class HttpEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where a streamable HTTP tool server is listening."""

    url: str
    host: str
    port: int
    path: str


# -- in-process ----------------------------------------------------------------


async def serve_in_process(
    server: ToolServer,
    *,
    task_status: TaskStatus[MessageStream] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one in-process client; reports the client's ``(read, write)``
    streams and returns once the client closes its write stream."""
    async with create_client_server_memory_streams() as (client_streams, server_streams):
        task_status.started(client_streams)
        read, write = server_streams
        await server.lowlevel.run(read, write, server.initialization_options())


@asynccontextmanager
async def connect_in_process(server: ToolServer) -> AsyncIterator[MessageStream]:
    """``serve_in_process`` as a context manager yielding the client streams
    (usable as an SDK ``Client`` transport).  Leaving it stops the server."""
    async with anyio.create_task_group() as tg:
        read, write = await tg.start(serve_in_process, server)
        try:
            yield read, write
        finally:
            # EOF lets the server finish its in-flight replies and return.
            await write.aclose()


# -- stdio ---------------------------------------------------------------------


async def serve_stdio(
    server: ToolServer,
    *,
    stdin: anyio.AsyncFile[str] | None = None,
    stdout: anyio.AsyncFile[str] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one client over stdin/stdout (the process's own unless given);
    returns at end of input.  While serving, stray writes to the process's
    stdout go to stderr so they cannot corrupt the protocol stream."""
    async with stdio_server(stdin, stdout) as (read, write):
        task_status.started()
        await server.lowlevel.run(read, write, server.initialization_options())


# -- streamable HTTP -------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 bracketed or not) is loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def transport_security(config: HttpServeConfig) -> TransportSecuritySettings | None:
    """Host/Origin validation for ``config``: explicit lists when given,
    loopback-only when bound to loopback (the DNS-rebinding defence), none
    otherwise."""
    if config.allowed_hosts is None and config.allowed_origins is None:
        if not is_loopback(config.host):
            return None
        hosts = [*_LOOPBACK_NAMES, *(f"{name}:*" for name in _LOOPBACK_NAMES)]
        origins = [f"http://{name}{port}" for name in _LOOPBACK_NAMES for port in ("", ":*")]
        return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)
    return TransportSecuritySettings(
        allowed_hosts=list(config.allowed_hosts or ()),
        allowed_origins=list(config.allowed_origins or ()),
    )


def _listen(server: ToolServer, config: HttpServeConfig) -> socket.socket:
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host.strip("[]"), config.port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ToolError(
            f"MCP server {server.name!r} cannot listen on {config.host}:{config.port}: {exc}"
        ) from exc
    return sock


def _session_manager(
    server: ToolServer, config: HttpServeConfig, security: TransportSecuritySettings | None
) -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(
        app=server.lowlevel,
        event_store=MemoryEventStore(config.event_buffer) if config.event_buffer else None,
        json_response=config.json_response,
        stateless=config.stateless,
        security_settings=security,
        retry_interval=config.retry_interval_ms,
        session_idle_timeout=config.session_idle_timeout_s,
        max_sessions=config.max_sessions,
    )


def _asgi_app(
    server: ToolServer, config: HttpServeConfig, on_ready: Callable[[], None]
) -> Starlette:
    """The Starlette app: the SDK session manager at ``config.path``;
    ``on_ready`` runs once the manager is up (inside the app's lifespan)."""
    manager = _session_manager(server, config, transport_security(config))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            on_ready()
            yield

    return Starlette(
        routes=[Route(config.path, endpoint=StreamableHTTPASGIApp(manager))], lifespan=lifespan
    )


# -- mounting inside another app ---------------------------------------------------


def loopback_security(
    port: int | None,
    *,
    extra_hosts: Sequence[str] = (),
    extra_origins: Sequence[str] = (),
) -> TransportSecuritySettings:
    """DNS-rebinding protection for an endpoint reached on ``port``: the
    loopback names with that port (any port when ``None``) and without one,
    their ``http://`` origins, plus ``extra_hosts``/``extra_origins``
    (``"name:*"`` allows any port)."""
    suffixes = ("", ":*") if port is None else ("", f":{port}")
    names = [f"{name}{suffix}" for name in _LOOPBACK_NAMES for suffix in suffixes]
    return TransportSecuritySettings(
        allowed_hosts=[*names, *extra_hosts],
        allowed_origins=[*(f"http://{name}" for name in names), *extra_origins],
    )


def _allowed(value: str, allowed: Sequence[str]) -> bool:
    """``value`` is listed, or matches a ``"base:*"`` entry with some port
    (case-insensitively: host names are)."""
    value = value.lower()
    for entry in (a.lower() for a in allowed):
        if value == entry or (entry.endswith(":*") and value.startswith(entry[:-1])):
            return True
    return False


@final
class _RebindingGuard:
    """Host and Origin checks in front of the endpoint, before the SDK looks
    at the body, the content type or the session: a foreign ``Host`` gets
    421, a foreign ``Origin`` 403, each with a JSON-RPC error body."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings) -> None:
        self._app = app
        self._hosts = list(security.allowed_hosts)
        self._origins = list(security.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        host = origin = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        if host is None or not _allowed(host, self._hosts):
            await _refuse(send, 421, f"Host header {host!r} is not served here")
        elif origin is not None and not _allowed(origin, self._origins):
            await _refuse(send, 403, f"Origin {origin!r} is not allowed")
        else:
            await self._app(scope, receive, send)


async def _refuse(send: Send, status: int, message: str) -> None:
    body = msgspec.json.encode(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    )
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HttpMount(NamedTuple):
    """A streamable HTTP MCP endpoint for mounting inside another ASGI app."""

    app: ASGIApp
    """Serve it at one path, e.g. ``Route("/mcp", endpoint=mount.app)``."""
    lifespan: AbstractAsyncContextManager[None]
    """The session manager's lifetime: enter it once before the first
    request and leave it at shutdown (it cannot be entered twice)."""


def streamable_http_mount(
    server: ToolServer,
    config: HttpServeConfig | None = None,
    *,
    security: TransportSecuritySettings,
) -> HttpMount:
    """``server`` as a streamable HTTP endpoint to mount in another app.

    ``config`` gives the session knobs (event buffer, JSON responses,
    stateless mode, idle timeout, session limit); its ``host``, ``port``,
    ``path`` and ``allowed_*`` are the host app's business and unused here.
    ``security`` is always enforced, and must have DNS-rebinding protection
    enabled (``loopback_security`` builds the usual one): a foreign ``Host``
    gets 421 and a foreign ``Origin`` 403 before anything else."""
    if not security.enable_dns_rebinding_protection:
        raise ToolError(
            f"MCP server {server.name!r}: a mounted endpoint always validates Host and "
            "Origin; pass TransportSecuritySettings with enable_dns_rebinding_protection=True"
        )
    manager = _session_manager(server, config or HttpServeConfig(), security)
    return HttpMount(
        app=_RebindingGuard(StreamableHTTPASGIApp(manager), security), lifespan=manager.run()
    )


def _endpoint(sock: socket.socket, path: str) -> HttpEndpoint:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return HttpEndpoint(url=f"http://{shown}:{port}{path}", host=host, port=port, path=path)


async def serve_streamable_http(
    server: ToolServer,
    config: HttpServeConfig | None = None,
    *,
    task_status: TaskStatus[HttpEndpoint] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``server`` over streamable HTTP until cancelled; reports the
    ``HttpEndpoint`` once it accepts connections.  Any number of clients,
    Host/Origin checks on loopback, SSE resumption from a bounded
    ``MemoryEventStore``.  On cancellation, open streams get
    ``config.shutdown_grace_s`` to finish, then are closed."""
    config = config or HttpServeConfig()
    app_up = anyio.Event()
    settled = anyio.Event()  # the app is up, or uvicorn gave up

    def on_ready() -> None:
        app_up.set()
        settled.set()

    app = _asgi_app(server, config, on_ready)
    sock = _listen(server, config)
    endpoint = _endpoint(sock, config.path)
    web = uvicorn.Server(
        uvicorn.Config(
            app,
            lifespan="on",
            log_config=None,  # leave the process's logging alone
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=max(1, round(config.shutdown_grace_s)),
        )
    )
    # uvicorn shuts down gracefully when asked (should_exit), not when
    # cancelled: its task is shielded from our caller's cancellation and
    # only force-cancelled if the graceful path overruns.
    web_scope = anyio.CancelScope(shield=True)
    stopped = anyio.Event()
    failure: list[BaseException] = []

    async def run_web() -> None:
        try:
            with web_scope:
                await web.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn's way of saying the lifespan failed
            failure.append(exc)
        finally:
            stopped.set()
            settled.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_web)
            try:
                with anyio.fail_after(_STARTUP_TIMEOUT_S):
                    await settled.wait()
                if not app_up.is_set() or stopped.is_set():
                    why = f": {failure[0]!r}" if failure else ""
                    raise ToolError(
                        f"MCP server {server.name!r} failed to start on {endpoint.url}{why}"
                    )
                log.info("mcp_http_serving", server=server.name, url=endpoint.url)
                task_status.started(endpoint)
                await stopped.wait()
            finally:
                web.should_exit = True
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(config.shutdown_grace_s + 2.0):
                        await stopped.wait()
                    if not stopped.is_set():
                        log.warning("mcp_http_forced_stop", server=server.name, url=endpoint.url)
                        web_scope.cancel()
    finally:
        sock.close()
    log.info("mcp_http_stopped", server=server.name, url=endpoint.url)
