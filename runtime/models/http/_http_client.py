"""The shared HTTP client for model backends: httpx on an aiohttp transport
(``make_http_client``, ``make_transport``; the transport is
``AiohttpTransport``), ``poster`` (a whole-reply POST on any httpx
transport, native on ours), and ``classify_transport_error``.
Plain httpx/httpcore pools collapse past a few hundred concurrent requests
(66 req/s against 2,092 with the aiohttp transport), so no backend builds
its own client.

Must not import agents, tools or aggregators, nor any specific backend.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeAlias

import aiohttp
import anyio
import httpx
from pydantic import BaseModel, ConfigDict, Field

from agentrt.runtime.models.http._aiohttp_transport import AiohttpTransport, HttpReply

__all__ = [
    "HttpClientConfig",
    "HttpReply",
    "Post",
    "TransportFailure",
    "classify_transport_error",
    "make_http_client",
    "make_transport",
    "poster",
]


class HttpClientConfig(BaseModel):
    """Connection limits and timeouts of the HTTP client a backend uses."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    connect_timeout_s: float = Field(default=5.0, gt=0)
    """Seconds to open a TCP (and TLS) connection."""
    read_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds of silence tolerated while waiting for response bytes.  For
    streams this bounds the gap between two chunks, not the whole reply."""
    write_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds to send the request body."""
    pool_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds to wait for a free connection when ``max_connections`` are
    busy (plus the connect time: aiohttp counts both in one budget)."""
    max_connections: int = Field(default=1024, ge=1)
    """Upper bound on open connections to all hosts of this client; requests
    beyond it queue for ``pool_timeout_s``."""
    keepalive_expiry_s: float = Field(default=4.0, ge=0)
    """Seconds an idle keep-alive connection is kept before it is closed.
    Below the server's own idle limit, or a request sent as the server
    closes the connection meets a reset: servers on uvicorn (vLLM, SGLang)
    close idle connections at 5 s."""
    verify_tls: bool = True
    """Verify the server's TLS certificate (https only)."""

    def timeouts(self) -> dict[str, float | None]:
        """The timeouts as httpx's ``timeout`` extension (what a ``Post``
        takes; ``AiohttpTransport`` maps them onto aiohttp's)."""
        return {
            "connect": self.connect_timeout_s,
            "read": self.read_timeout_s,
            "write": self.write_timeout_s,
            "pool": self.pool_timeout_s,
        }


def make_transport(config: HttpClientConfig | None = None) -> AiohttpTransport:
    """An aiohttp transport sized by ``config``.  Its aiohttp session is
    created lazily, on the first request, inside the running event loop."""
    cfg = config or HttpClientConfig()
    # aiohttp's own verified default context (built once at its import) when
    # verifying; ``False`` disables verification.
    verify: bool = cfg.verify_tls

    def session() -> aiohttp.ClientSession:
        # One connection limit for the whole client and none per host (a
        # backend talks to one host), and no response decompression (the
        # transport leaves decoding to httpx, which reads Content-Encoding).
        connector = aiohttp.TCPConnector(
            limit=cfg.max_connections,
            limit_per_host=0,
            keepalive_timeout=cfg.keepalive_expiry_s,
            ssl=verify,
        )
        return aiohttp.ClientSession(connector=connector, auto_decompress=False)

    return AiohttpTransport(session)


def make_http_client(
    config: HttpClientConfig | None = None,
    *,
    base_url: str = "",
    headers: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` on an aiohttp transport (``transport``, or a
    new one from :func:`make_transport`) with ``config``'s timeouts.
    Closing the client closes the transport."""
    cfg = config or HttpClientConfig()
    timeout = httpx.Timeout(**cfg.timeouts())
    return httpx.AsyncClient(
        transport=transport or make_transport(cfg),
        base_url=base_url,
        headers=dict(headers or {}),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


Post: TypeAlias = Callable[
    [str, bytes, Sequence[tuple[str, str]], Mapping[str, float | None] | None],
    Awaitable[HttpReply],
]
"""``post(url, body, headers, timeouts)``: POST and read the whole reply
(``AiohttpTransport.post``'s signature)."""


def poster(transport: httpx.AsyncBaseTransport) -> Post:
    """A whole-reply POST on ``transport``: ``AiohttpTransport.post`` for
    ours (no httpx request or response per call); on any other httpx
    transport (a test's ``httpx.MockTransport``, a recording wrapper), the
    same through an httpx request and response."""
    if isinstance(transport, AiohttpTransport):
        return transport.post

    async def post(
        url: str,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        timeouts: Mapping[str, float | None] | None = None,
    ) -> HttpReply:
        request = httpx.Request(
            "POST",
            url,
            headers=headers,
            content=body,
            extensions={} if timeouts is None else {"timeout": dict(timeouts)},
        )
        response = await transport.handle_async_request(request)
        try:
            data = await response.aread()
        finally:
            with anyio.CancelScope(shield=True):  # even a cancelled call closes it
                await response.aclose()
        return HttpReply(response.status_code, response.headers, data)

    return post


class TransportFailure(enum.Enum):
    """Why a request failed below HTTP (no status code to look at)."""

    CONNECT = "connect"
    """The connection could not be opened (refused, unreachable, DNS)."""
    TIMEOUT = "timeout"
    """A connect, read or pool timeout expired."""
    DROPPED = "dropped"
    """An open connection was cut (server disconnect, reset, short body)."""
    PROTOCOL = "protocol"
    """The server spoke something that is not HTTP/1.1."""


# (cause types, verdict), most specific first: aiohttp's timeout errors are
# also connection errors, and its connector errors are connection errors too.
_AIOHTTP_CAUSES: tuple[tuple[tuple[type[BaseException], ...], TransportFailure], ...] = (
    ((aiohttp.ServerTimeoutError, asyncio.TimeoutError, TimeoutError), TransportFailure.TIMEOUT),
    ((aiohttp.ClientConnectorError,), TransportFailure.CONNECT),
    ((aiohttp.ClientResponseError,), TransportFailure.PROTOCOL),
    (
        (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError),
        TransportFailure.DROPPED,
    ),
)
_HTTPX_ERRORS: tuple[tuple[tuple[type[BaseException], ...], TransportFailure], ...] = (
    ((httpx.TimeoutException,), TransportFailure.TIMEOUT),
    ((httpx.ConnectError,), TransportFailure.CONNECT),
    ((httpx.RemoteProtocolError, httpx.UnsupportedProtocol), TransportFailure.PROTOCOL),
    ((httpx.TransportError, OSError), TransportFailure.DROPPED),
)


def classify_transport_error(exc: BaseException) -> TransportFailure | None:
    """The reason behind a transport-level exception, or ``None`` when
    ``exc`` is not one (a bug or a cancellation must propagate as is).  The
    aiohttp ``__cause__`` the transport keeps (``as_httpx_error``) decides
    when there is one: it says more than the httpx class it was raised as."""
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    for types, verdict in _AIOHTTP_CAUSES:
        if isinstance(cause, types):
            return verdict
    for types, verdict in _HTTPX_ERRORS:
        if isinstance(exc, types):
            return verdict
    return None
