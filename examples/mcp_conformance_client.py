"""An MCP client built on agentrt's own API, for the MCP conformance suite's
client scenarios::

    npx @modelcontextprotocol/conformance@0.1.13 client \\
        --command "python examples/mcp_conformance_client.py" --scenario tools_call

The suite starts a server for the scenario and runs the command with the
server's URL as the last argument.  The client connects with
``McpConnection`` (elicitation answered with the form's schema defaults,
as agentrt's ``elicitation.mode = "defaults"`` policy does), calls every
tool the server offers with arguments made from its input schema, and
exits non-zero when a call fails.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from agentrt.tools import HttpServerConfig, McpConnection, ToolContext

_SAMPLES: dict[str, Any] = {
    "number": 1.5,
    "integer": 2,
    "string": "conformance",
    "boolean": True,
    "array": [],
    "object": {},
}


def arguments_for(schema: dict[str, Any]) -> dict[str, Any]:
    """A value for each property of a tool's input schema, by its type."""
    properties: dict[str, Any] = schema.get("properties") or {}
    return {
        name: spec.get("default", _SAMPLES.get(str(spec.get("type")), "conformance"))
        for name, spec in properties.items()
        if isinstance(spec, dict)
    }


async def main(url: str) -> int:
    config = HttpServerConfig(
        name="conformance",
        url=url,
        connect_timeout_s=20,
        call_timeout_s=20,
        elicitation={"mode": "defaults"},
        restart={"max_failures": 2},
    )
    failures = 0
    async with McpConnection(config) as connection:
        for tool in connection.tools():
            output = await tool.call(arguments_for(tool.spec.parameters), ToolContext())
            print(f"{tool.remote_name}: {output.text[:200]}")
            failures += output.is_error
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1]))
