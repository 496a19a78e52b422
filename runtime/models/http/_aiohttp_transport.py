"""``AiohttpTransport``: httpx's transport interface on an aiohttp session,
the one every model backend's HTTP client sends through, and ``post``, the
same session without httpx for a request whose whole reply is read at once
(a backend's non-streaming call: ``HttpReply``).

Per call it does only what a hand-written aiohttp request does, plus (for
httpx's interface) the httpx request and response around it: no context
manager or generator per request, chunk or close, and one
``aiohttp.ClientTimeout`` per distinct set of timeouts.  aiohttp's
exceptions reach the caller as httpx's, with the aiohttp one as
``__cause__`` (``classify_transport_error`` reads it).

Must not import agents, tools or aggregators, nor any specific backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, final

import aiohttp
import httpx

__all__ = ["AiohttpTransport", "HttpReply", "as_httpx_error"]

# aiohttp exception -> the httpx exception raised for it; the entry of the
# most specific aiohttp class wins (the first in the exception's MRO).  A
# connection cut while in use (a reset, the server closing it) is a
# ReadError, as httpx's own transport raises; the cause says which it was.
_HTTPX_FOR: dict[type[BaseException], type[httpx.TransportError]] = {
    aiohttp.ConnectionTimeoutError: httpx.ConnectTimeout,
    aiohttp.SocketTimeoutError: httpx.ReadTimeout,
    aiohttp.ServerTimeoutError: httpx.TimeoutException,
    aiohttp.ClientConnectorError: httpx.ConnectError,
    aiohttp.ClientProxyConnectionError: httpx.ProxyError,
    aiohttp.ClientHttpProxyError: httpx.ProxyError,
    aiohttp.ClientConnectionError: httpx.ReadError,
    aiohttp.ClientPayloadError: httpx.ReadError,
    aiohttp.NonHttpUrlClientError: httpx.UnsupportedProtocol,
    aiohttp.InvalidUrlClientError: httpx.UnsupportedProtocol,
}


def as_httpx_error(exc: Exception) -> httpx.TransportError | None:
    """The httpx exception to raise for aiohttp's ``exc`` (its cause set by
    the caller's ``raise ... from exc``), or ``None`` for anything else,
    which propagates as it is."""
    for source in type(exc).__mro__:
        target = _HTTPX_FOR.get(source)
        if target is not None:
            return target(str(exc))
    return None


@final
class HttpReply:
    """A reply read whole: its status, headers (a case-insensitive mapping)
    and body, decoded per its ``Content-Encoding``."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HttpReply(status={self.status}, {len(self.body)} bytes)"


@final
class _ReplyStream(httpx.AsyncByteStream):
    """An aiohttp response's body as an httpx stream: chunks as they
    arrive; closing it releases the connection (or drops it, unread)."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    # An iterator, not an async generator: no generator object, and no
    # registration with the event loop's async-generator hooks, per reply.
    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._response.content.readany()
        except Exception as exc:
            error = as_httpx_error(exc)
            if error is None:
                raise
            raise error from exc
        if not chunk:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        try:
            await self._response.__aexit__(None, None, None)
        except Exception as exc:
            error = as_httpx_error(exc)
            if error is None:
                raise
            raise error from exc


@final
class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests with an aiohttp session made by ``session`` on
    the first request (inside the running event loop); closing the
    transport closes the session.  A request's ``timeout`` extension
    (httpx's ``connect``/``read``/``pool`` seconds) becomes aiohttp's
    ``sock_connect``/``sock_read``/``connect``."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession]) -> None:
        self._make_session = session
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, ...], aiohttp.ClientTimeout] = {}
        self._last: tuple[object, aiohttp.ClientTimeout] = (object(), aiohttp.ClientTimeout())
        self._last_url: tuple[object, str] = (object(), "")
        self._extensions: dict[str | None, dict[str, Any]] = {}

    def _timeout(self, given: Mapping[str, float | None] | None) -> aiohttp.ClientTimeout:
        if given is self._last[0]:  # a backend sends one timeout dict every time
            return self._last[1]
        key = (given.get("connect"), given.get("read"), given.get("pool")) if given else (None,) * 3
        timeout = self._timeouts.get(key)
        if timeout is None:
            if len(self._timeouts) >= 64:  # callers with ever-new timeouts: no growth
                self._timeouts.clear()
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        self._last = (given, timeout)  # holds ``given``: its id is not reused
        return timeout

    def _url_text(self, url: httpx.URL) -> str:
        last = self._last_url
        if url is last[0]:  # a backend sends one URL object every time
            return last[1]
        text = str(url)
        self._last_url = (url, text)
        return text

    def _reply_extensions(self, reason: str | None) -> dict[str, Any]:
        extensions = self._extensions.get(reason)
        if extensions is None:
            extensions = {"http_version": b"HTTP/1.1"}
            if reason:
                extensions["reason_phrase"] = reason.encode()
            if len(self._extensions) < 64:  # servers send a handful of reasons
                self._extensions[reason] = extensions
        return extensions

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        timeouts: Mapping[str, float | None] | None = None,
    ) -> HttpReply:
        """POST ``body`` to ``url`` and read the whole reply: a backend's
        non-streaming call, with no httpx request or response around it.
        ``timeouts`` are httpx's ``timeout`` extension (``connect``,
        ``read``, ``pool`` seconds).  The body is decoded per its
        ``Content-Encoding``.  Failing or cancelled before the body is read,
        the connection is dropped; failures are raised as httpx's."""
        session = self._session
        if session is None:
            session = self._session = self._make_session()
        try:
            response = await session.request(
                "POST",
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                auto_decompress=True,  # the session's default is off, for httpx
                compress=False,
                timeout=self._timeout(timeouts),
            )
            try:
                data = await response.read()
            except BaseException:
                response.close()  # read() closes it too; not while waiting for the writer
                raise
        except Exception as exc:
            error = as_httpx_error(exc)
            if error is None:
                raise
            raise error from exc
        return HttpReply(response.status, response.headers, data)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session
        if session is None:
            session = self._session = self._make_session()
        headers = request.headers
        encoding = headers.encoding
        data: Any
        try:
            data = request.content or None
            sent = [(k.decode(encoding), v.decode(encoding)) for k, v in headers.raw]
        except httpx.RequestNotRead:
            data = request.stream  # aiohttp sends it chunked itself
            sent = [
                (k.decode(encoding), v.decode(encoding))
                for k, v in headers.raw
                if k.lower() != b"transfer-encoding"
            ]
        sending = session.request(
            request.method,
            self._url_text(request.url),
            headers=sent,
            data=data,
            allow_redirects=False,
            auto_decompress=False,
            compress=False,
            timeout=self._timeout(request.extensions.get("timeout")),
            server_hostname=request.extensions.get("sni_hostname"),
        )
        # Nothing of the request stays referenced from here while the reply
        # is awaited (httpx's client attaches the request to the response
        # itself, as it does with its own transports), and the header list
        # dies once aiohttp has copied it (docs/design/performance.md).
        del request, headers, sent
        try:
            response = await sending
        except Exception as exc:
            error = as_httpx_error(exc)
            if error is None:
                raise
            raise error from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_ReplyStream(response),
            extensions=self._reply_extensions(response.reason),
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
