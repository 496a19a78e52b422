"""A small MCP server with resources, for the resource tests, run over
stdio with ``sys.executable resource_server.py`` (the SDK's low-level API).

Resources: ``fixture://counter`` (``count=N``, subscribable),
``fixture://logo`` (a PNG blob), ``fixture://long`` (5,000 characters),
listed one per page; template ``fixture://notes/{name}``.
Tool ``bump()``: adds one to the counter and sends
``notifications/resources/updated`` to a subscriber of it.
Each ``resources/read`` is counted in the counter's text as ``reads=N``.
"""

from __future__ import annotations

import base64
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

COUNTER = "fixture://counter"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


def main() -> None:
    state = {"count": 0, "reads": 0}
    subscribed: set[str] = set()
    resources = [
        types.Resource(uri=COUNTER, name="counter", mime_type="text/plain"),
        types.Resource(uri="fixture://logo", name="logo", mime_type="image/png"),
        types.Resource(uri="fixture://long", name="long", mime_type="text/plain"),
    ]

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        more = str(start + 1) if start + 1 < len(resources) else None
        return types.ListResourcesResult(resources=resources[start : start + 1], next_cursor=more)

    async def list_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template="fixture://notes/{name}", name="note", mime_type="text/plain"
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        state["reads"] += 1
        contents: types.TextResourceContents | types.BlobResourceContents
        if uri == COUNTER:
            text = f"count={state['count']} reads={state['reads']}"
            contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)
        elif uri == "fixture://logo":
            blob = base64.b64encode(PNG).decode()
            contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=blob)
        elif uri == "fixture://long":
            contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text="x" * 5000)
        elif uri.startswith("fixture://notes/"):
            name = uri.removeprefix("fixture://notes/")
            contents = types.TextResourceContents(uri=uri, text=f"the note called {name}")
        else:
            raise ValueError(f"no resource {uri}")
        return types.ReadResourceResult(contents=[contents])

    async def subscribe(
        ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        subscribed.add(str(params.uri))
        return types.EmptyResult()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {}}
        return types.ListToolsResult(
            tools=[types.Tool(name="bump", description="Count one up.", input_schema=schema)]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        state["count"] += 1
        if COUNTER in subscribed:
            await ctx.session.send_resource_updated(COUNTER)
        return types.CallToolResult(content=[types.TextContent(text=f"bumped to {state['count']}")])

    server: Server[Any] = Server(
        "resources",
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
