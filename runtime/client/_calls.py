"""What each call of the daemon's API sends and reads back, without the
transport: ``Client`` and ``AsyncClient`` build their requests here and parse
the answers here, so each of their methods is one send.  ``EventFollow`` does
the same for an event stream: which request opens (or reopens) it, what a
line means, and what a cut costs.

Imports protocols, the client's errors and httpx; nothing of the daemon.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, final

import httpx
import msgspec

from agentrt.protocols._api import ElicitationAnswer, ElicitationList, RunDetail, RunInfo, RunPage
from agentrt.protocols._events import Event
from agentrt.protocols._run import RunRequest, RunStatus
from agentrt.protocols._webhooks import WebhookDeliveryList
from agentrt.runtime.client._client_errors import DaemonUnavailable
from agentrt.runtime.client._sse import (
    RECONNECTS,
    SseReader,
    decode_as,
    failure,
    gave_up,
    not_a_stream,
    reconnect_wait,
    request_body,
    run_location,
    stream_headers,
    unreachable,
)

T = TypeVar("T")

_JSON = {"content-type": "application/json"}


class ClientState(enum.Enum):
    """A client's life: opened once, then closed."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request of the API and the type its success answers with."""

    method: str
    path: str
    answer: type[T]
    content: bytes | None = None
    params: dict[str, Any] | None = None

    @property
    def headers(self) -> dict[str, str] | None:
        return _JSON if self.content is not None else None

    def unreachable(self, exc: httpx.TransportError) -> DaemonUnavailable:
        return unreachable(exc, self.method, self.path)

    def read(self, response: httpx.Response) -> T:
        """The answer, or the error the daemon's refusal or failure means."""
        if response.status_code >= 300:
            raise failure(response, response.content)
        return decode_as(response.content, self.answer, f"{self.method} {self.path}")


def create_run(request: RunRequest | str) -> Call[RunInfo]:
    return Call("POST", "/v1/runs", RunInfo, content=request_body(request))


def get_run(run_id: str) -> Call[RunDetail]:
    return Call("GET", f"/v1/runs/{run_id}", RunDetail)


def list_runs(status: RunStatus | None, limit: int, cursor: str | None) -> Call[RunPage]:
    params: dict[str, Any] = {"limit": limit}
    if status is not None:
        params["status"] = status
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/runs", RunPage, params=params)


def cancel_run(run_id: str) -> Call[RunInfo]:
    return Call("POST", f"/v1/runs/{run_id}/cancel", RunInfo)


def answer_elicitation(run_id: str, question_id: str, answer: ElicitationAnswer) -> Call[RunInfo]:
    path = f"/v1/runs/{run_id}/elicitations/{question_id}"
    return Call("POST", path, RunInfo, content=msgspec.json.encode(answer))


def list_elicitations(run_id: str | None) -> Call[ElicitationList]:
    params = {"run_id": run_id} if run_id is not None else None
    return Call("GET", "/v1/elicitations", ElicitationList, params=params)


def webhook_deliveries(run_id: str) -> Call[WebhookDeliveryList]:
    return Call("GET", f"/v1/runs/{run_id}/webhook-deliveries", WebhookDeliveryList)


class EventCursor(Protocol):
    """Where a follow stands: ``RunEvents`` and ``AsyncRunEvents``."""

    run_id: str | None
    last_event_id: int
    tokens: bool
    reconnects: int


@final
@dataclass(frozen=True, slots=True)
class StreamCall:
    """The request that opens (or reopens) an event stream."""

    method: str
    path: str
    content: bytes | None
    headers: dict[str, str]


@final
@dataclass(slots=True)
class EventFollow:
    """One follow of a run's events, without the transport: ``call`` the
    request to open next, ``opened`` checks its answer, ``event`` reads a
    line, and ``cut`` the wait before reopening (or the error that ends it).
    ``create``: the ``POST /v1/runs`` body while the run is not known yet."""

    events: EventCursor
    create: bytes | None
    cuts: int = 0
    reader: SseReader = field(default_factory=SseReader)

    def call(self) -> StreamCall:
        if self.events.run_id is None:
            return StreamCall("POST", "/v1/runs", self.create, {**stream_headers(0), **_JSON})
        path = f"/v1/runs/{self.events.run_id}/events"
        return StreamCall("GET", path, None, stream_headers(self.events.last_event_id))

    def opened(self, response: httpx.Response) -> None:
        """Raises unless ``response`` (a success: the transport read a
        refusal's body and raised ``failure``) streams events."""
        wrong = not_a_stream(response)
        if wrong is not None:
            raise wrong
        self.events.run_id = self.events.run_id or run_location(response)
        self.reader = SseReader()

    def event(self, line: str) -> Event | None:
        """The event ``line`` completes, if the follow passes it on."""
        item = self.reader.line(line)
        if item is None:
            return None
        seq, event = item
        if seq is not None:
            self.events.last_event_id, self.cuts = seq, 0
        elif not self.events.tokens:
            return None
        return event

    def cut(self, exc: httpx.TransportError, call: StreamCall) -> float:
        """The wait before reopening after ``exc``; raises when the run is
        unknown (no answer to the POST) or after ``RECONNECTS`` cuts in a row."""
        if not self.events.run_id:
            raise unreachable(exc, call.method, call.path) from exc
        self.cuts += 1
        if self.cuts > RECONNECTS:
            raise gave_up(exc, call.path, self.cuts - 1) from exc
        self.events.reconnects += 1
        return reconnect_wait(self.cuts)


__all__ = [
    "Call",
    "ClientState",
    "EventCursor",
    "EventFollow",
    "StreamCall",
    "answer_elicitation",
    "cancel_run",
    "create_run",
    "get_run",
    "list_elicitations",
    "list_runs",
    "webhook_deliveries",
]
