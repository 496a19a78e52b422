"""A one-tool MCP server over stdio for the cluster tests, run with
``sys.executable whoami_server.py``: ``whoami()`` answers with its own
process id, its parent's, and the roots its client offers (``roots/list``),
as JSON."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(
    name="whoami",
    description="Say which process answers and which roots it was given.",
    input_schema={"type": "object", "properties": {}},
)


async def _list_tools(
    _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[TOOL])


async def _call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    roots = [str(root.uri) for root in (await ctx.session.list_roots()).roots]
    text = json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "roots": roots})
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def _serve() -> None:
    server: Server[Any] = Server("whoami", on_list_tools=_list_tools, on_call_tool=_call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_serve)
