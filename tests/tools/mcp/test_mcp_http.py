"""McpConnection over streamable HTTP, against an in-process SDK server
(uvicorn): configured headers and bearer token reach the server, and a
dropped SSE stream is resumed after the server's ``retry`` interval with
``Last-Event-ID`` — the SDK transport's own behaviour, proven here."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from starlette.types import ASGIApp, Receive, Scope, Send

from agentrt.testing import RecordingSink
from agentrt.tools._tool import ToolContext
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig

RETRY_MS = 300  # the SDK client's own default is 1000 ms

pytestmark = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio+uvloop"),
    ],
)


class MemoryEventStore(EventStore):
    """Every event, in order, so a client can resume after any of them."""

    def __init__(self) -> None:
        self.events: list[tuple[EventId, StreamId, types.JSONRPCMessage | None]] = []

    async def store_event(
        self, stream_id: StreamId, message: types.JSONRPCMessage | None
    ) -> EventId:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        ids = [e[0] for e in self.events]
        if last_event_id not in ids:
            return None
        index = ids.index(last_event_id)
        stream = self.events[index][1]
        for event_id, stream_id, message in self.events[index + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


@dataclass
class Seen:
    """What the server saw: each HTTP request and when the tool dropped its stream."""

    requests: list[tuple[float, str, dict[str, str]]] = field(default_factory=list)
    dropped_at: float = 0.0


def recording(app: ASGIApp, seen: Seen) -> ASGIApp:
    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            seen.requests.append((time.monotonic(), scope["method"], headers))
        await app(scope, receive, send)

    return wrapper


def build_server(seen: Seen, store: MemoryEventStore) -> ASGIApp:
    server = MCPServer("resumable")

    @server.tool(description="Three steps; the SSE stream is dropped after the first.")
    async def steps(ctx: Context) -> str:
        await ctx.report_progress(1, 3)
        seen.dropped_at = time.monotonic()
        await ctx.close_sse_stream()  # the client must reconnect to hear the rest
        await anyio.sleep(0.05)
        await ctx.report_progress(2, 3)
        await ctx.report_progress(3, 3)
        return "all three steps"

    @server.tool(description="Echo a word.")
    async def echo(word: str) -> str:
        return word

    app = server.streamable_http_app(event_store=store, retry_interval=RETRY_MS)
    return recording(app, seen)


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, port: int = 0) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    with sock:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
                    await anyio.sleep(0.02)
            try:
                yield f"http://127.0.0.1:{port}/mcp"
            finally:
                server.should_exit = True


class Progress:
    def __init__(self) -> None:
        self.values: list[float] = []

    async def __call__(self, kind: str, payload: Mapping[str, Any]) -> None:
        if kind == "progress":
            self.values.append(payload["progress"])


@pytest.mark.anyio
async def test_headers_and_bearer_token_reach_the_server() -> None:
    seen, store = Seen(), MemoryEventStore()
    async with serving(build_server(seen, store)) as url:
        config = HttpServerConfig(
            name="remote", url=url, headers={"X-Agentrt-Test": "yes"}, bearer_token="s3cret"
        )
        async with McpConnection(config) as conn:
            tools = {t.spec.name: t for t in conn.tools()}
            assert set(tools) == {"remote__echo", "remote__steps"}
            out = await tools["remote__echo"].call({"word": "hello"}, ToolContext())
            assert (out.text, out.is_error) == ("hello", False)
    posts = [h for _, method, h in seen.requests if method == "POST"]
    assert len(posts) >= 3  # initialize, tools/list, tools/call
    assert all(h.get("authorization") == "Bearer s3cret" for h in posts)
    assert all(h.get("x-agentrt-test") == "yes" for h in posts)


@pytest.mark.anyio
async def test_a_dropped_sse_stream_resumes_after_retry_with_last_event_id() -> None:
    seen, store = Seen(), MemoryEventStore()
    progress = Progress()
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(serving(build_server(seen, store)))
        conn = await stack.enter_async_context(
            McpConnection(HttpServerConfig(name="remote", url=url))
        )
        tool = {t.spec.name: t for t in conn.tools()}["remote__steps"]
        out = await tool.call({}, ToolContext(notify=progress))
    assert (out.text, out.is_error) == ("all three steps", False)
    assert progress.values == [1, 2, 3]  # the two sent while disconnected were replayed

    resumes = [
        (t, h["last-event-id"]) for t, m, h in seen.requests if m == "GET" and "last-event-id" in h
    ]
    assert len(resumes) == 1, seen.requests
    resumed_at, last_event_id = resumes[0]
    stream_of = {event_id: stream for event_id, stream, _ in store.events}
    call_streams = {s for _, s, m in store.events if isinstance(m, types.JSONRPCResponse)}
    assert stream_of[last_event_id] in call_streams  # it named an event of the call's stream
    waited = resumed_at - seen.dropped_at
    # Honours the server's retry (300 ms), not the client's 1 s default.
    assert RETRY_MS / 1000 * 0.9 <= waited < 0.95, waited


class Background:
    """An HTTP server in a task of the test's task group, stopped on demand."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._stop = anyio.Event()
        self._stopped = anyio.Event()

    async def run(self, port: int, *, task_status: anyio.abc.TaskStatus[str]) -> None:
        try:
            async with serving(self._app, port) as url:
                task_status.started(url)
                await self._stop.wait()
        finally:
            self._stopped.set()

    async def shutdown(self) -> None:
        self._stop.set()
        with anyio.fail_after(10):
            await self._stopped.wait()


@pytest.mark.anyio
async def test_a_server_that_went_away_is_reconnected() -> None:
    seen, store = Seen(), MemoryEventStore()
    fast = {"initial_delay_s": 0.1, "max_delay_s": 0.3, "jitter": 0.0, "max_failures": 50}
    async with anyio.create_task_group() as tg:
        first = Background(build_server(seen, store))
        url = await tg.start(first.run, 0)
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        config = HttpServerConfig(name="remote", url=url, restart=fast)
        async with McpConnection(config) as conn:
            echo = {t.spec.name: t for t in conn.tools()}["remote__echo"]
            assert (await echo.call({"word": "one"}, ToolContext())).text == "one"

            await first.shutdown()  # the server goes away, and with it our session
            out = await echo.call({"word": "two"}, ToolContext())
            assert out.is_error
            assert "MCP server 'remote': connection lost" in out.text

            # A new server (which never heard of our session) on the same port.
            second = Background(build_server(seen, MemoryEventStore()))
            await tg.start(second.run, port)
            await conn.wait_ready(15)
            assert (await echo.call({"word": "three"}, ToolContext())).text == "three"
            restarts = conn.restarts
            assert restarts >= 1

            # Replaced while we were idle: the new server answers 404 for our session.
            await second.shutdown()
            third = Background(build_server(seen, MemoryEventStore()))
            await tg.start(third.run, port)
            out = await echo.call({"word": "four"}, ToolContext())
            assert out.is_error
            assert "connection lost" in out.text
            await conn.wait_ready(15)
            assert (await echo.call({"word": "five"}, ToolContext())).text == "five"
            assert conn.restarts > restarts
        await third.shutdown()


@pytest.mark.anyio
async def test_keepalive_finds_a_forgotten_session_before_a_call_needs_it() -> None:
    seen = Seen()
    fast = {"initial_delay_s": 0.1, "max_delay_s": 0.3, "jitter": 0.0, "max_failures": 50}
    sink = RecordingSink()
    async with anyio.create_task_group() as tg:
        first = Background(build_server(seen, MemoryEventStore()))
        url = await tg.start(first.run, 0)
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        config = HttpServerConfig(name="remote", url=url, restart=fast, keepalive_s=0.2)
        async with McpConnection(config, on_notification=sink) as conn:
            echo = {t.spec.name: t for t in conn.tools()}["remote__echo"]
            assert (await echo.call({"word": "one"}, ToolContext())).text == "one"
            # Replaced while we are idle: the new server never heard of our session.
            await first.shutdown()
            second = Background(build_server(seen, MemoryEventStore()))
            await tg.start(second.run, port)
            # A ping finds out and the connection is replaced, with no call made.
            await sink.wait_for("state", lambda p: p["state"] == "restarting", 15)
            await conn.wait_ready(15)
            assert conn.restarts >= 1
            # So the next call goes to a live session (echo is not idempotent:
            # on a dead one it would have failed with "connection lost").
            out = await echo.call({"word": "two"}, ToolContext())
            assert (out.text, out.is_error) == ("two", False)
        await second.shutdown()
