"""User-facing settings of hosted tool servers (pydantic).

``ToolServerConfig`` is how one server behaves whatever the transport;
``HttpServeConfig`` is how the streamable HTTP transport listens.  Plain
configuration: no I/O, no MCP imports beyond the logging-level literal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: RFC 5424 severities, least severe first (MCP's ``LoggingLevel``).
LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LOG_LEVELS: tuple[LogLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


class ToolServerConfig(BaseModel):
    """How a hosted tool server behaves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call_timeout_s: float | None = Field(default=300.0, gt=0)
    """Longest a single tool call may run before it is cancelled and reported
    to the client as a timed-out error result; ``None`` lets calls run until
    the client cancels them."""

    client_request_timeout_s: float = Field(default=300.0, gt=0)
    """How long a tool waits for the client to answer a sampling or
    elicitation request (a person may be filling a form)."""

    default_log_level: LogLevel = "info"
    """Least severe log level forwarded to a client that has not sent
    ``logging/setLevel``."""


class HttpServeConfig(BaseModel):
    """Where and how the streamable HTTP transport listens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    """Interface to bind.  Loopback by default: hosting tools on a public
    interface is a decision to make explicitly."""

    port: int = Field(default=0, ge=0, le=65535)
    """TCP port; 0 picks a free one (the endpoint reports which)."""

    path: str = Field(default="/mcp", pattern=r"^/")
    """URL path of the MCP endpoint."""

    allowed_hosts: list[str] | None = None
    """``Host`` header values accepted (``"name:*"`` allows any port).  ``None``
    means loopback names only when bound to loopback (DNS-rebinding defence),
    and no check otherwise."""

    allowed_origins: list[str] | None = None
    """``Origin`` header values accepted, like ``allowed_hosts``."""

    retry_interval_ms: int | None = Field(default=1000, gt=0)
    """The SSE ``retry`` hint sent to clients: how soon to reconnect after the
    server closes a stream (``None`` sends no hint)."""

    event_buffer: int = Field(default=1024, ge=0)
    """Server-to-client events kept for resumption (``Last-Event-ID``) across
    all sessions; 0 disables resumability."""

    session_idle_timeout_s: float | None = Field(default=1800.0, gt=0)
    """Sessions with no request in flight for this long are closed."""

    max_sessions: int | None = Field(default=1000, gt=0)
    """Concurrent sessions; a request that would open one more gets HTTP 503."""

    json_response: bool = False
    """Answer each POST with one JSON body instead of an SSE stream (no
    notifications or server-to-client requests during a call)."""

    stateless: bool = False
    """No sessions: every request stands alone (no resumption, no
    server-to-client requests)."""

    shutdown_grace_s: float = Field(default=3.0, gt=0)
    """On shutdown, how long open HTTP connections (SSE streams) get to finish
    before they are closed."""
