"""A tool call's idempotency key (``ToolContext.idempotency_key``) reaches
the MCP server in the request's ``_meta`` (``io.agentrt/idempotency-key``),
so a server can do a side effect once across a run's crash and resume."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrt.tools._tool import ToolContext
from agentrt.tools.mcp._connection import IDEMPOTENCY_META_KEY, McpConnection
from agentrt.tools.mcp._mcp_config import StdioServerConfig

pytestmark = [pytest.mark.anyio, pytest.mark.process]

SERVER = """
import json, sys
from typing import Any
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {}}
    return types.ListToolsResult(tools=[types.Tool(name="meta", input_schema=schema)])

async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    meta = dict(ctx.meta or {})
    meta.pop("progressToken", None)
    meta.pop("progress_token", None)
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(meta))])

server = Server("meta", on_list_tools=list_tools, on_call_tool=call_tool)

async def serve() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(serve)
"""


async def test_the_idempotency_key_travels_in_meta(tmp_path: Path) -> None:
    script = tmp_path / "meta_server.py"
    script.write_text(SERVER)
    config = StdioServerConfig.model_validate(
        {"name": "m", "command": sys.executable, "args": ["-W", "ignore", str(script)]}
    )
    async with McpConnection(config) as conn:
        (tool,) = conn.tools()
        keyed = await tool.call({}, ToolContext(call_id="c1", idempotency_key="run-1-r0/3/c1"))
        plain = await tool.call({}, ToolContext(call_id="c2"))
    assert not keyed.is_error, keyed.text
    seen: dict[str, Any] = json.loads(keyed.text)
    assert seen.get(IDEMPOTENCY_META_KEY) == "run-1-r0/3/c1"
    assert IDEMPOTENCY_META_KEY not in json.loads(plain.text)
