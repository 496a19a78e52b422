"""MCP over plain HTTP, for tests that post JSON-RPC to a Streamable HTTP
endpoint themselves (no MCP client in between)."""

from __future__ import annotations

from typing import Any

PROTOCOL = "2025-11-25"
"""The protocol version the raw requests speak."""

INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
"""An ``initialize`` request."""

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
"""The headers every Streamable HTTP request carries."""
