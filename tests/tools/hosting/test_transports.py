"""The hosting transports end to end: stdio (a real subprocess) and
streamable HTTP (uvicorn on a free port), driven by the official SDK client
and, for resumption and Host checks, by raw HTTP."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as mcp
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning

from agentrt.tools._tool import ToolContext, ToolOutput
from agentrt.tools.hosting import _transports
from agentrt.tools.hosting._calls import McpCallPeer
from agentrt.tools.hosting._hosting_config import HttpServeConfig
from agentrt.tools.hosting._tool_server import ToolServer
from agentrt.tools.hosting._transports import serve_streamable_http
from tests._support.mcp_raw import INIT, MCP_HEADERS, PROTOCOL
from tests.tools.hosting._client_side import ClientSide

pytestmark = pytest.mark.process

EXAMPLE = Path(__file__).parents[3] / "examples" / "mcp_conformance_server.py"


async def add(args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput.of_text(str(args["a"] + args["b"]))


async def slow_count(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.notify is not None
    for done in (1, 2):
        await ctx.notify("log", {"level": "info", "message": f"tick {done}"})
        await ctx.notify("progress", {"progress": done, "total": 2})
    return ToolOutput.of_text("done")


async def ask_model(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.peer is not None
    return ToolOutput.of_text(await ctx.peer.sample("2+2?", max_tokens=5))


async def reconnecting(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert isinstance(ctx.peer, McpCallPeer)
    closed = await ctx.peer.request_reconnect()
    await anyio.sleep(0.2)
    return ToolOutput.of_text(f"closed={closed}")


@pytest.fixture
def server(make_tool: Any) -> ToolServer:
    numbers = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }
    return ToolServer(
        "http-host",
        tools=[
            make_tool("add", add, numbers),
            make_tool("slow_count", slow_count),
            make_tool("ask_model", ask_model),
            make_tool("reconnecting", reconnecting),
        ],
    )


def sse_events(body: str) -> list[dict[str, str]]:
    """Parse an SSE body into events (field -> value; data lines joined)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        event: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            event[name] = event[name] + "\n" + value if name in event else value
        if event:
            events.append(event)
    return events


@pytest.mark.anyio
async def test_stdio_subprocess_serves_the_example_server() -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(EXAMPLE), "--stdio"])
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"test_simple_text", "test_sampling", "json_schema_2020_12_tool"} <= names
            result = await client.call_tool("test_simple_text", {})
            prompt = await client.get_prompt(
                "test_prompt_with_arguments", {"arg1": "x", "arg2": "y"}
            )
    assert result.content == [mcp.TextContent(text="This is a simple text response for testing.")]
    assert prompt.messages[0].content == mcp.TextContent(
        text="Prompt with arguments: arg1='x', arg2='y'"
    )


class EventNames:
    """Stands in for a module's logger: keeps the name of every event logged."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        def record(event: str, **fields: Any) -> None:
            self.names.append(event)

        return record


@pytest.mark.anyio
async def test_streamable_http_end_to_end_then_graceful_shutdown(
    server: ToolServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # How the server stopped is in its log: uvicorn finishing within the grace
    # logs nothing; overrunning it and being cut logs "mcp_http_forced_stop".
    events = EventNames()
    monkeypatch.setattr(_transports, "log", events)
    side = ClientSide("4")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            endpoint = await tg.start(serve_streamable_http, server, HttpServeConfig())
            assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/mcp"
            async with Client(
                endpoint.url,
                mode="legacy",
                logging_callback=side.on_log,
                sampling_callback=side.sample,
            ) as client:
                assert [t.name for t in (await client.list_tools()).tools] == server.tool_names
                added = await client.call_tool("add", {"a": 2, "b": 3.5})
                counted = await client.call_tool(
                    "slow_count", {}, progress_callback=side.on_progress
                )
                sampled = await client.call_tool("ask_model", {})
            tg.cancel_scope.cancel()

    assert added.content == [mcp.TextContent(text="5.5")]
    assert counted.content == [mcp.TextContent(text="done")]
    assert sampled.content == [mcp.TextContent(text="4")]
    assert [data for _, data, _ in side.logs] == ["tick 1", "tick 2"]
    assert side.steps == [1.0, 2.0]
    assert "mcp_http_serving" in events.names  # the server's log is seen here...
    assert "mcp_http_forced_stop" not in events.names  # ...and it stopped within the grace
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", endpoint.port), timeout=2),
    ):
        pass


@pytest.mark.anyio
async def test_streamable_http_rejects_foreign_hosts_and_resumes_a_closed_stream(
    server: ToolServer,
) -> None:
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            endpoint = await tg.start(serve_streamable_http, server, HttpServeConfig())
            async with httpx.AsyncClient(timeout=10) as http:
                # DNS-rebinding defence: a loopback server only answers loopback names.
                foreign = await http.post(
                    endpoint.url, json=INIT, headers={**MCP_HEADERS, "Host": "evil.example.com"}
                )
                assert foreign.status_code == 421

                opened = await http.post(endpoint.url, json=INIT, headers=MCP_HEADERS)
                assert opened.status_code == 200
                session = {
                    **MCP_HEADERS,
                    "mcp-session-id": opened.headers["mcp-session-id"],
                    "mcp-protocol-version": PROTOCOL,
                }
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (
                    await http.post(endpoint.url, json=note, headers=session)
                ).status_code == 202

                call = {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {"name": "reconnecting", "arguments": {}},
                }
                first = sse_events((await http.post(endpoint.url, json=call, headers=session)).text)
                # The stream opened with a priming event (id, empty data, retry hint)
                # and was closed by the tool before any result.
                assert first == [{"id": first[0]["id"], "data": "", "retry": "1000"}]

                # Resuming replays what was sent after the priming event; the stream
                # then stays open as the session's standalone stream, so read until
                # the reply arrives.
                resume = {**session, "Accept": "text/event-stream", "last-event-id": first[0]["id"]}
                received = ""
                async with http.stream("GET", endpoint.url, headers=resume) as resumed:
                    async for chunk in resumed.aiter_text():
                        received += chunk
                        if any(e.get("data") for e in sse_events(received)):
                            break
                replies = [e for e in sse_events(received) if e.get("data")]
                assert len(replies) == 1
                reply = mcp.JSONRPCResponse.model_validate_json(replies[0]["data"])
                assert reply.id == 7
                assert reply.result["content"] == [{"type": "text", "text": "closed=True"}]
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_log_levels_are_per_http_session(server: ToolServer) -> None:
    quiet: list[Any] = []
    loud: list[Any] = []

    async def on_quiet(params: mcp.LoggingMessageNotificationParams) -> None:
        quiet.append(params.data)

    async def on_loud(params: mcp.LoggingMessageNotificationParams) -> None:
        loud.append(params.data)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            endpoint = await tg.start(serve_streamable_http, server, HttpServeConfig())
            async with (
                Client(endpoint.url, mode="legacy", logging_callback=on_quiet) as first,
                Client(endpoint.url, mode="legacy", logging_callback=on_loud) as second,
            ):
                with pytest.warns(MCPDeprecationWarning):
                    await first.set_logging_level("error")
                await first.call_tool("slow_count", {})
                await second.call_tool("slow_count", {})
            tg.cancel_scope.cancel()
    assert quiet == []
    assert loud == ["tick 1", "tick 2"]
