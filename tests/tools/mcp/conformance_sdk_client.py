"""The yardstick for ``examples/mcp_conformance_client.py``: the same client
written directly on the official SDK (``ClientSession`` over its streamable
HTTP transport, elicitation accepted with the schema's defaults), run by
the MCP conformance suite with the server's URL as the last argument."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client

_SAMPLES: dict[str, Any] = {"number": 1.5, "integer": 2, "string": "conformance", "boolean": True}


async def _defaults(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="decline")
    properties: dict[str, Any] = params.requested_schema.get("properties") or {}
    content = {k: v["default"] for k, v in properties.items() if "default" in v}
    return types.ElicitResult(action="accept", content=content)


async def main(url: str) -> int:
    failures = 0
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, elicitation_callback=_defaults) as session,
    ):
        await session.initialize()
        for tool in (await session.list_tools()).tools:
            properties: dict[str, Any] = tool.input_schema.get("properties") or {}
            arguments = {
                k: v.get("default", _SAMPLES.get(str(v.get("type")), "x"))
                for k, v in properties.items()
            }
            result = await session.call_tool(tool.name, arguments, read_timeout_seconds=20)
            print(tool.name, result.is_error)
            failures += bool(result.is_error)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1]))
