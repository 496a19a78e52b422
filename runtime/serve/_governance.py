"""Connection governance: what a client may hold of the daemon.

Owns the HTTP protocol the daemon serves with (``governed_http``: uvicorn's
httptools protocol with a cap on open connections, a deadline for a request's
headers and a bound on their size, each refusal a JSON ``ApiError`` naming
the ``[server]`` key, and how long an idle connection is held), the body
guard every request passes (``BodyGuard``: the body's size and its deadline)
and the JSON depth check (``check_json_depth``).  Nothing of runs or the store.

The roof: may import every layer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final

import anyio
import httptools
import msgspec
from starlette.types import Message, Receive, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentrt.runtime.config._daemon_config import ServerConfig
from agentrt.runtime.serve._api_problem import RETRY_AFTER_S, ApiProblem
from agentrt.runtime.serve._turns import Turns

DEFAULT_JSON_DEPTH: Final[int] = ServerConfig.model_fields["max_json_depth"].default
"""``server.max_json_depth`` when none is given."""

LimitHit = Callable[[str], None]
"""Told the ``[server]`` key of each limit a request hit (``/metrics``)."""


_REFUSALS: Final[dict[str, tuple[int, str, str]]] = {
    "server.max_connections": (
        429,
        "too_many_connections",
        "the daemon holds its limit of {} open connections; retry shortly",
    ),
    "server.header_timeout_s": (
        408,
        "request_timeout",
        "the request's headers did not arrive within {:g} s",
    ),
    "server.max_header_bytes": (
        431,
        "headers_too_large",
        "the request line and headers are over {} bytes",
    ),
    "server.max_request_bytes": (413, "too_large", "the request body is over {} bytes"),
    "server.body_timeout_s": (
        408,
        "request_timeout",
        "the request body did not arrive within {:g} s",
    ),
    "server.max_json_depth": (
        400,
        "too_deep",
        "the JSON body nests arrays and objects more than {} deep",
    ),
}
"""What a request past each ``[server]`` limit gets: the status, the error
and the message (of the limit's value)."""


def refusal(where: str, limit: float, *, retry_after: int | None = None) -> ApiProblem:
    """The ``ApiProblem`` of a request past the ``[server]`` limit ``where``
    (set to ``limit``)."""
    status, error, message = _REFUSALS[where]
    return ApiProblem(status, error, message.format(limit), where=where, retry_after=retry_after)


def _raw_response(problem: ApiProblem) -> bytes:
    """``problem`` as a whole HTTP/1.1 response that closes the connection."""
    body = msgspec.json.encode(problem.body())
    head = [
        b"HTTP/1.1 %d %s" % (problem.status, HTTPStatus(problem.status).phrase.encode()),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    if problem.retry_after is not None:
        head.append(b"retry-after: %d" % problem.retry_after)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class _Refused(Exception):
    """Raised from a parser callback once the connection was refused: the
    parser stops there."""


def governed_http(
    server: ServerConfig, hit: LimitHit, turns: Turns | None = None
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol (requests parsed in C, not by h11's
    pure-Python state machine; figures in docs/design/performance.md) under
    ``server``'s limits, parsing what
    arrives through ``turns`` (when given: a burst of requests arriving
    together is parsed over several turns of the loop, not in one):

    - ``max_connections``: a connection past the cap gets 429 (with
      ``Retry-After``) for its first request, then is closed; it has
      ``header_timeout_s`` to send that request, like any other;
    - ``header_timeout_s``: from a connection's start, or from the first
      bytes of a request after an idle spell, the request's headers must be
      complete in time, or it gets 408 and is closed (a client sending a
      byte now and then cannot hold a connection);
    - ``keep_alive_s``: a connection idle that long after a response is
      closed (uvicorn's keep-alive timer, not a 408);
    - ``max_header_bytes``: a request line plus headers larger gets 431
      (here when they arrive in pieces, counted as they arrive; the
      ``Guard`` measures a request that arrived whole).
    """
    cap = server.max_connections
    header_timeout = server.header_timeout_s
    max_header = server.max_header_bytes
    keep_alive = server.keep_alive_s
    too_many = _raw_response(refusal("server.max_connections", cap, retry_after=RETRY_AFTER_S))
    too_slow = _raw_response(refusal("server.header_timeout_s", header_timeout))
    too_large = _raw_response(refusal("server.max_header_bytes", max_header))

    class GovernedHttp(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # uvicorn's Config takes whole seconds; its timer takes any.
            self.timeout_keep_alive = keep_alive  # type: ignore[assignment]
            self._header_deadline: asyncio.TimerHandle | None = None
            self._over_cap = False
            self._arrived: list[bytes] = []
            """Bytes received, waiting for their turn to be parsed."""
            self._parse_queued = False
            self._awaiting_head = True
            """Waiting for a request's line and headers: from the connection's
            start or the previous request's end until they are complete (what
            arrives meanwhile counts toward ``max_header_bytes``)."""
            self._head_started = False
            """A request line has begun and its headers are not complete."""
            self._head_bytes = 0
            """Bytes received while awaiting a request's headers."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._over_cap = len(self.connections) > cap
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._arrived.clear()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.timeout_keep_alive_task is not None:  # the first bytes after an idle spell
                self._unset_keepalive_if_required()
                self._arm()
            if turns is None:
                self._feed(data)
                return
            self._arrived.append(data)
            if not self._parse_queued:  # a queued parse reads what arrived since
                self._parse_queued = True
                turns.run(self._parse)

        def _parse(self) -> None:
            self._parse_queued = False
            arrived = self._arrived
            if not arrived or self.transport.is_closing():
                return
            data = arrived[0] if len(arrived) == 1 else b"".join(arrived)
            arrived.clear()
            self._feed(data)

        def _feed(self, data: bytes) -> None:
            if self._awaiting_head:
                self._head_bytes += len(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            except httptools.HttpParserError:
                if self.transport.is_closing():
                    return  # refused from a callback (``_Refused``)
                if self._over_cap:
                    hit("server.max_connections")
                    self._refuse(too_many)
                    return
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
                return
            if self._awaiting_head and self._head_bytes > max_header:
                hit("server.max_header_bytes")
                self._refuse(too_large)

        def on_message_begin(self) -> None:
            self._head_started = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._awaiting_head = self._head_started = False
            self._head_bytes = 0
            self._disarm()  # the headers are in; the body has its own deadline
            if self._over_cap:  # refused as soon as the request line and headers are in
                hit("server.max_connections")
                self._refuse(too_many)
                raise _Refused
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._awaiting_head = True
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if self._arrived or self._head_started:  # the next request came meanwhile
                self._unset_keepalive_if_required()
            # Idle, uvicorn's keep-alive timer holds the connection; else the
            # next request is under way and its headers have their deadline.
            if self.timeout_keep_alive_task is None:
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_deadline = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _headers_late(self) -> None:
            self._header_deadline = None
            if self._parse_queued and not self.transport.is_closing():
                self._parse()  # what arrived in time, still waiting for its turn
            if self.transport.is_closing() or not self._awaiting_head:
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a response is still being sent (pipelining)
            hit("server.header_timeout_s")
            self._refuse(too_slow if self._head_started else b"")

        def _refuse(self, response: bytes) -> None:
            self._disarm()
            if response:
                self.transport.write(response)
            self.transport.close()

    return GovernedHttp


class BodyGuard:
    """A request's ``receive`` under ``server``'s body limits: more than
    ``max_request_bytes`` raises 413, a body not complete within
    ``body_timeout_s`` of its first read raises 408 (both ``ApiProblem``).
    Once the body is complete, ``receive`` is passed through untimed (it
    then only reports the client leaving)."""

    def __init__(self, server: ServerConfig, receive: Receive, hit: LimitHit) -> None:
        self._receive = receive
        self._limit = server.max_request_bytes
        self._timeout = server.body_timeout_s
        self._hit = hit
        self._deadline: float | None = None
        self._seen = 0
        self._complete = False

    async def __call__(self) -> Message:
        if self._complete:
            return await self._receive()
        if self._deadline is None:
            self._deadline = anyio.current_time() + self._timeout
        with anyio.move_on_at(self._deadline):
            message = await self._receive()
            if message["type"] == "http.request":
                self._seen += len(message.get("body", b""))
                if self._seen > self._limit:
                    self._complete = True
                    self._hit("server.max_request_bytes")
                    raise too_large(self._limit)
                self._complete = not message.get("more_body", False)
            else:
                self._complete = True
            return message
        self._complete = True
        self._hit("server.body_timeout_s")
        raise refusal("server.body_timeout_s", self._timeout)


def header_bytes(scope: Scope) -> int:
    """The size of a request's line and headers, about as sent."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string", b"")) + 16
    return size + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


def headers_too_large(limit: int) -> ApiProblem:
    return refusal("server.max_header_bytes", limit)


def too_large(limit: int) -> ApiProblem:
    return refusal("server.max_request_bytes", limit)


_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS: Final = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")


def check_json_depth(body: bytes, limit: int) -> None:
    """Raise a 400 ``ApiProblem`` naming ``server.max_json_depth`` when the
    JSON text ``body`` nests arrays and objects more than ``limit`` deep
    (a decoder would recurse that deep).  Linear in the body's size: only
    bodies with more than ``limit`` brackets are examined."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return
    shape = _STRING.sub(b"", body).translate(_BRACKETS, _NOT_BRACKETS)
    for _ in range(limit):  # each pass removes the innermost level everywhere
        shape = shape.replace(b"()", b"")
        if b"(" not in shape:
            return
    raise too_deep(limit)


def too_deep(limit: int) -> ApiProblem:
    return refusal("server.max_json_depth", limit)


__all__ = [
    "DEFAULT_JSON_DEPTH",
    "BodyGuard",
    "LimitHit",
    "check_json_depth",
    "governed_http",
    "header_bytes",
    "headers_too_large",
    "refusal",
    "too_deep",
    "too_large",
]
