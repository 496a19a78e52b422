"""Errors of the MCP client, and turning what the SDK raises into words.

Owns ``McpServerError`` (a ``ToolError`` naming the server) and the helpers
that describe an exception for a person: the telling leaf of an exception
group, an SDK ``MCPError`` with its code, a malformed message with the text
the server sent, and the recognition of an HTTP server that forgot our
session.  Must not import agents or aggregators.
"""

from __future__ import annotations

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentrt.runtime.kernel._errors import AgentrtError, ToolError

__all__ = ["McpServerError", "describe", "leaf", "malformed_detail", "session_forgotten"]

#: The TypeScript SDK's code for an unknown session (-32600 in the Python SDK).
_TS_SESSION_NOT_FOUND = -32001


class McpServerError(ToolError):
    """An MCP server could not be started, or answered a runtime request
    (listing, resource read) with a failure.  Names the server, and its URL
    or command line when given as ``target``; ``detail`` is the message
    without them."""

    def __init__(self, server: str, message: str, *, target: str = "") -> None:
        self.server = server
        self.target = target
        self.detail = message
        named = f"MCP server {server!r} ({target})" if target else f"MCP server {server!r}"
        super().__init__(f"{named}: {message}")


def leaf(exc: BaseException) -> BaseException:
    """The most telling exception inside (possibly nested) exception groups:
    one of agentrt's own if there is one, else the first."""
    while isinstance(exc, BaseExceptionGroup):
        ours: list[BaseException] = [e for e in exc.exceptions if isinstance(e, AgentrtError)]
        exc = (ours or list(exc.exceptions))[0]
    return exc


def describe(exc: BaseException) -> str:
    """One line saying what went wrong."""
    exc = leaf(exc)
    if isinstance(exc, TimeoutError):
        return "no answer before the deadline"
    if isinstance(exc, MCPError):
        return f"{exc.message} (MCP error {exc.code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def malformed_detail(exc: Exception) -> str:
    """What was wrong with a message that failed to parse, quoting it."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        return f"{first.get('msg', 'invalid')}: {str(first.get('input', ''))[:200]!r}"
    return str(exc)[:300]


def session_forgotten(exc: MCPError) -> bool:
    """An HTTP server that no longer knows our session answers 404, which the
    SDK hides behind a JSON-RPC error: its own "Session terminated", or the
    server's body ("Session not found" from the Python and TypeScript SDKs).
    The spec says: start a new session."""
    text = exc.message.lower()
    return (
        exc.code in (types.INVALID_REQUEST, _TS_SESSION_NOT_FOUND)
        and "session" in text
        and ("terminated" in text or "not found" in text or "expired" in text)
    )
