"""MCP resources attached to an agent's context (``AgentSpec.resources``):
each step shows their current text after the history, as a user message.

Reads through ``McpServerTools.attached`` (which keeps the text current by
subscription); must not know how the server is reached.  Never imports
aggregators or the roof.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from agentrt.protocols._messages import UserMessage
from agentrt.runtime.kernel._errors import ToolError

if TYPE_CHECKING:  # the MCP SDK loads when a connection opens, not with the agents
    from agentrt.tools.mcp._servers import McpServerTools

__all__ = ["ResourceNote"]


@final
class ResourceNote:
    """Resource ``uri`` of MCP server ``server`` (named ``server_name``), as
    the message a step shows."""

    def __init__(self, server_name: str, server: McpServerTools, uri: str) -> None:
        self.server_name = server_name
        self.uri = uri
        self._server = server

    async def message(self) -> UserMessage:
        """The resource's current text (or why it could not be read: the
        step goes on without it)."""
        try:
            text = await self._server.attached(self.uri)
        except ToolError as exc:
            text = f"[it could not be read: {exc}]"
        header = f"Attached resource {self.uri} (MCP server {self.server_name!r}):"
        return UserMessage(content=f"{header}\n{text}")
