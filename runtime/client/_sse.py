"""What the sync and async clients share: reading Server-Sent Events into
the daemon's own event types, the requests' pieces, and the errors of a
response or a transport failure.

Imports protocols and the kernel's error tree only (and httpx).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, TypeVar

import httpx
import msgspec

from agentrt.protocols._codec import decode_event
from agentrt.protocols._events import Event
from agentrt.protocols._run import RunRequest
from agentrt.runtime.client._client_errors import DaemonUnavailable, refusal

T = TypeVar("T")

#: Reconnections a stream makes in a row (with no event in between) before
#: it gives up with ``DaemonUnavailable``.
RECONNECTS: Final = 5
#: The wait before the first reconnection; it doubles each time, up to
#: ``MAX_RECONNECT_WAIT_S``.
RECONNECT_WAIT_S: Final = 0.2
MAX_RECONNECT_WAIT_S: Final = 5.0
#: Errors after which a stream reconnects (the connection was cut or went quiet).
CUT: Final = (httpx.TransportError,)


@dataclass(slots=True)
class SseReader:
    """Turns an event stream's lines into events: ``line`` returns the
    ``(id, event)`` a blank line completes (``id`` is ``None`` for an event
    that is not stored: a ``token``), else ``None``."""

    fields: dict[str, str] = field(default_factory=dict)
    data: list[str] = field(default_factory=list)

    def line(self, line: str) -> tuple[int | None, Event] | None:
        if line == "":
            fields, data = self.fields, self.data
            self.fields, self.data = {}, []
            if not data:
                return None  # the ``retry`` advice, or a stray blank line
            raw = fields.get("id")
            return (int(raw) if raw and raw.isdigit() else None), decode_event("\n".join(data))
        if line.startswith(":"):
            return None  # a keep-alive comment
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        else:
            self.fields[name] = value
        return None


def reconnect_wait(attempt: int) -> float:
    """The wait before reconnection number ``attempt`` (1, 2...)."""
    return min(RECONNECT_WAIT_S * 2.0 ** (attempt - 1), MAX_RECONNECT_WAIT_S)


def request_body(request: RunRequest | str) -> bytes:
    """A ``POST /v1/runs`` body: a ``RunRequest``, or a task (the default agent)."""
    if isinstance(request, str):
        request = RunRequest(task=request)
    return msgspec.json.encode(request)


def stream_headers(after: int) -> dict[str, str]:
    headers = {"accept": "text/event-stream"}
    if after:
        headers["last-event-id"] = str(after)
    return headers


def failure(response: httpx.Response, body: bytes) -> Exception:
    """The exception for a response that is not a success."""
    endpoint = f"{response.request.method} {response.request.url.path}"
    return refusal(response.status_code, body, endpoint, response.headers.get("retry-after"))


def not_a_stream(response: httpx.Response) -> DaemonUnavailable | None:
    """``DaemonUnavailable`` when a success is not an event stream (a daemon
    that does not stream ``POST /v1/runs``, or a proxy's page)."""
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        return None
    endpoint = f"{response.request.method} {response.request.url.path}"
    return DaemonUnavailable(
        f"the answer is {kind or 'untyped'}, not an event stream (a daemon older than "
        "this client?)",
        endpoint,
        status=response.status_code,
    )


def run_location(response: httpx.Response) -> str:
    """The run id in a streamed ``POST /v1/runs``'s ``Location``."""
    location: str = response.headers.get("location", "")
    return location.rsplit("/", 1)[-1]


def unreachable(exc: httpx.TransportError, method: str, path: str) -> DaemonUnavailable:
    """The exception for a request that got no answer."""
    kind = "no answer in time" if isinstance(exc, httpx.TimeoutException) else "no connection"
    return DaemonUnavailable(f"{kind} ({type(exc).__name__}: {exc})", f"{method} {path}")


def gave_up(exc: httpx.TransportError, path: str, attempts: int) -> DaemonUnavailable:
    return DaemonUnavailable(
        f"the event stream was cut {attempts} times in a row; last: {type(exc).__name__}: {exc}",
        f"GET {path}",
    )


def decode_as(body: bytes, type_: type[T], endpoint: str) -> T:
    """``body`` as ``type_``, or ``DaemonUnavailable`` saying the daemon's
    answer was not what the API promises (a different daemon version?)."""
    try:
        return msgspec.json.decode(body, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DaemonUnavailable(
            f"the answer is not a {type_.__name__}: {exc}", endpoint, status=200
        ) from None


__all__ = [
    "CUT",
    "RECONNECTS",
    "SseReader",
    "decode_as",
    "failure",
    "gave_up",
    "not_a_stream",
    "reconnect_wait",
    "request_body",
    "run_location",
    "stream_headers",
    "unreachable",
]
