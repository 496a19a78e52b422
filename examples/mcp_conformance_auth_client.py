"""An OAuth MCP client built on agentrt's own API, for the MCP conformance
suite's ``auth/*`` client scenarios::

    npx @modelcontextprotocol/conformance@0.1.13 client \\
        --command "python examples/mcp_conformance_auth_client.py" \\
        --scenario auth/metadata-default

The suite starts an authorization server and a protected MCP server and
runs the command with the server's URL as the last argument (credentials,
when the scenario has them, in ``MCP_CONFORMANCE_CONTEXT``).  The client
connects with ``McpConnection`` and an ``[mcp.NAME.auth]`` configuration
(``McpAuthConfig``), and calls every tool.  The suite's authorization
server approves at once, so the "person" here is a few lines that open the
authorization URL and follow its redirect to agentrt's loopback listener,
as a browser would.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import anyio
import anyio.abc
import httpx

from agentrt.protocols import McpAuthorizationRequired
from agentrt.tools import HttpServerConfig, McpConnection, McpServerError, ToolContext

CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def auth_settings(context: dict[str, Any], token_dir: str) -> dict[str, Any]:
    """``[mcp.NAME.auth]`` for the scenario's credentials, if any."""
    settings: dict[str, Any] = {
        "token_dir": token_dir,
        "open_browser": False,
        # The suite's client ID metadata document (used where a server supports them).
        "client_metadata_url": CLIENT_METADATA_URL,
    }
    if "private_key_pem" in context:
        os.environ["CONFORMANCE_PRIVATE_KEY"] = context["private_key_pem"]
        settings |= {
            "flow": "client_credentials",
            "client_id": context["client_id"],
            "private_key_env": "CONFORMANCE_PRIVATE_KEY",
            "signing_algorithm": context.get("signing_algorithm", "RS256"),
        }
    elif "client_secret" in context:
        os.environ["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
        settings |= {
            "client_id": context["client_id"],
            "client_secret_env": "CONFORMANCE_CLIENT_SECRET",
        }
        if str(context.get("name", "")).startswith("auth/client-credentials"):
            settings["flow"] = "client_credentials"
    return settings


class Browser:
    """Opens the authorization URL and follows the redirect to agentrt."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    async def __call__(self, prompt: McpAuthorizationRequired) -> None:
        self._tg.start_soon(self._visit, prompt.authorization_url)

    async def _visit(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=10, follow_redirects=True) as client:
            await client.get(url)


async def main(url: str) -> int:
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    failures = 0
    with tempfile.TemporaryDirectory() as tokens:
        config = HttpServerConfig(
            name="conformance",
            url=url,
            connect_timeout_s=20,
            restart={"max_failures": 1},
            auth=auth_settings(context, tokens),
        )
        try:
            async with anyio.create_task_group() as tg:
                async with McpConnection(config, authorize=Browser(tg)) as connection:
                    for tool in connection.tools():
                        output = await tool.call({}, ToolContext())
                        print(f"{tool.remote_name}: {output.text[:200]}")
                        failures += output.is_error
                tg.cancel_scope.cancel()
        except* McpServerError as caught:
            for error in caught.exceptions:
                print(f"error: {error}", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1]))
