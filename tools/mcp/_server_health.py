"""The health of one MCP connection: its state, why it is not ready, and
when it tries again — and how that reads to a model or a person.

Owns ``ConnectionState`` and ``Health`` (state changes wake waiters), the
payload of ``state`` notifications and the text of the error a call gets
while the server is not ready.  Must not import agents or aggregators.
"""

from __future__ import annotations

import enum
from typing import Any, final

import anyio

from agentrt.tools.mcp._mcp_errors import McpServerError

__all__ = ["ConnectionState", "Health"]


class ConnectionState(enum.StrEnum):
    """Where a connection is in its life."""

    CONNECTING = "connecting"
    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"
    CLOSED = "closed"


@final
class Health:
    """One connection's state; ``CLOSED`` is final."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.state = ConnectionState.CONNECTING
        self.reason = ""
        """Why the server is not ready (the last failure)."""
        self.retry_at = 0.0
        """When the next restart attempt starts (``anyio.current_time()``), 0 if now."""
        self._changed: anyio.Event | None = None

    def set(self, state: ConnectionState, reason: str = "", *, retry_at: float = 0.0) -> None:
        if self.state is ConnectionState.CLOSED:
            return
        self.state = state
        self.retry_at = retry_at
        if reason:
            self.reason = reason
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait for ``READY``; ``McpServerError`` once failed or closed."""
        with anyio.fail_after(timeout_s):
            while self.state is not ConnectionState.READY:
                if self.state in (ConnectionState.FAILED, ConnectionState.CLOSED):
                    raise McpServerError(self.server, f"is {self.state} ({self.reason})")
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()

    def payload(self) -> dict[str, Any]:
        """The ``state`` notification."""
        payload: dict[str, Any] = {"server": self.server, "state": str(self.state)}
        if self.state is not ConnectionState.READY:
            payload["reason"] = self.reason
        if self.state is ConnectionState.RESTARTING:
            payload["retry_in_s"] = round(max(0.0, self.retry_at - anyio.current_time()), 3)
        return payload

    def unavailable(self) -> str:
        """What a call is told while the server is not ready."""
        name = f"MCP server {self.server!r}"
        match self.state:
            case ConnectionState.RESTARTING:
                wait = self.retry_at - anyio.current_time()
                when = f" (next attempt in {wait:.1f} s)" if wait > 0 else ""
                return f"{name} is restarting ({self.reason}); try again shortly{when}"
            case ConnectionState.FAILED:
                return f"{name} is down: {self.reason}"
            case ConnectionState.CLOSED:
                return f"{name}: the connection is closed"
            case _:
                return f"{name} is (re)connecting; try again shortly"
