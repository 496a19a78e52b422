"""``Client``: the daemon's REST + SSE API from blocking code, and
``RunEvents``, a run's events as they come (the same calls and errors as
``AsyncClient``).

Imports protocols, the kernel's error tree and httpx; nothing of the daemon.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self, TypeVar, final

import httpx
import msgspec

from agentrt.protocols._api import (
    ElicitationAnswer,
    ElicitationList,
    RunDetail,
    RunInfo,
    RunPage,
)
from agentrt.protocols._events import ElicitationRequested, Event
from agentrt.protocols._run import RunRequest, RunStatus
from agentrt.protocols._webhooks import WebhookDelivery, WebhookDeliveryList
from agentrt.runtime.client._async_client import (
    DEFAULT_URL,
    STREAM_IDLE_S,
    TIMEOUT_S,
    auth_headers,
)
from agentrt.runtime.client._sse import (
    CUT,
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


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
class RunEvents:
    """A run's events, as ``AsyncRunEvents`` but iterated with ``for``."""

    def __init__(
        self,
        run_id: str | None,
        *,
        after: int,
        tokens: bool,
        read: Callable[[RunEvents], Generator[Event, None, None]],
    ) -> None:
        self.run_id = run_id
        self.last_event_id = after
        self.tokens = tokens
        self.reconnects = 0
        """Connections opened again after a cut, in all."""
        self._events = read(self)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        """Close the connection (``follow`` does it when its block ends)."""
        self._events.close()


@final
class Client:
    """The daemon's REST + SSE API (``agentrt serve``), blocking; the same
    parameters, methods and errors as ``AsyncClient``.  A context manager,
    opened once: ``with Client(url, token=...) as client:``."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout_s: float = TIMEOUT_S,
        stream_idle_s: float = STREAM_IDLE_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=auth_headers(token),
            timeout=timeout_s,
            transport=transport,
        )
        self._stream_timeout = httpx.Timeout(timeout_s, read=stream_idle_s)
        self._state = _State.UNOPENED

    def __enter__(self) -> Self:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"Cannot open a Client that is {self._state.value}.")
        self._http.__enter__()
        self._state = _State.OPEN
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state = _State.CLOSED
        self._http.__exit__(exc_type, exc, tb)

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise RuntimeError(f"The Client is {self._state.value}: use it inside `with`.")

    def _call(
        self,
        method: str,
        path: str,
        type_: type[T],
        *,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
    ) -> T:
        self._check_open()
        headers = {"content-type": "application/json"} if content is not None else None
        try:
            response = self._http.request(
                method, path, content=content, params=params, headers=headers
            )
        except httpx.TransportError as exc:
            raise unreachable(exc, method, path) from exc
        if response.status_code >= 300:
            raise failure(response, response.content)
        return decode_as(response.content, type_, f"{method} {path}")

    def create_run(self, request: RunRequest | str) -> RunInfo:
        """Start a run (``AsyncClient.create_run``)."""
        return self._call("POST", "/v1/runs", RunInfo, content=request_body(request))

    def get_run(self, run_id: str) -> RunDetail:
        """The run in full (``AsyncClient.get_run``)."""
        return self._call("GET", f"/v1/runs/{run_id}", RunDetail)

    def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 50, cursor: str | None = None
    ) -> RunPage:
        """A page of runs, newest first (``AsyncClient.list_runs``)."""
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status
        if cursor is not None:
            params["cursor"] = cursor
        return self._call("GET", "/v1/runs", RunPage, params=params)

    def cancel_run(self, run_id: str) -> RunInfo:
        """Cancel the run (``AsyncClient.cancel_run``)."""
        return self._call("POST", f"/v1/runs/{run_id}/cancel", RunInfo)

    def answer_elicitation(
        self, run_id: str, question_id: str, answer: ElicitationAnswer
    ) -> RunInfo:
        """Answer a run's question (``AsyncClient.answer_elicitation``)."""
        path = f"/v1/runs/{run_id}/elicitations/{question_id}"
        return self._call("POST", path, RunInfo, content=msgspec.json.encode(answer))

    def list_elicitations(self, run_id: str | None = None) -> list[ElicitationRequested]:
        """The questions the caller's runs wait on (``run_id``'s only, when
        given), oldest first: approvals of tools under ``[approvals.TOOL]``
        (``mode`` ``approval``) and MCP servers' questions."""
        params = {"run_id": run_id} if run_id is not None else None
        found = self._call("GET", "/v1/elicitations", ElicitationList, params=params)
        return found.questions

    def approve(self, run_id: str, question_id: str) -> RunInfo:
        """Approve the tool call the run waits on (``answer_elicitation``
        with ``accept``); the run goes on and the tool runs."""
        return self.answer_elicitation(run_id, question_id, ElicitationAnswer(action="accept"))

    def deny(self, run_id: str, question_id: str) -> RunInfo:
        """Deny it (``decline``): the tool does not run, and the model reads
        that it was denied."""
        return self.answer_elicitation(run_id, question_id, ElicitationAnswer(action="decline"))

    def webhook_deliveries(self, run_id: str) -> list[WebhookDelivery]:
        """The run's webhook deliveries as the daemon recorded them (status,
        attempts, the receiver's last answer), in the order they were made."""
        path = f"/v1/runs/{run_id}/webhook-deliveries"
        return self._call("GET", path, WebhookDeliveryList).deliveries

    @contextmanager
    def follow(self, run_id: str, *, after: int = 0, tokens: bool = False) -> Iterator[RunEvents]:
        """The run's events until it ends (``AsyncClient.follow``):
        ``with client.follow(run_id) as events: for event in events: ...``."""
        self._check_open()
        events = RunEvents(run_id, after=after, tokens=tokens, read=lambda e: self._stream(e, None))
        try:
            yield events
        finally:
            events.close()

    @contextmanager
    def create_and_follow(
        self, request: RunRequest | str, *, tokens: bool = False
    ) -> Iterator[RunEvents]:
        """Start a run and follow it in one request (``AsyncClient.create_and_follow``)."""
        self._check_open()
        body = request_body(request)
        events = RunEvents(None, after=0, tokens=tokens, read=lambda e: self._stream(e, body))
        try:
            yield events
        finally:
            events.close()

    def _stream(self, events: RunEvents, create: bytes | None) -> Generator[Event, None, None]:
        cuts = 0
        while True:
            if events.run_id is None:
                method, path, content = "POST", "/v1/runs", create
                headers = {**stream_headers(0), "content-type": "application/json"}
            else:
                method, path, content = "GET", f"/v1/runs/{events.run_id}/events", None
                headers = stream_headers(events.last_event_id)
            try:
                with self._http.stream(
                    method, path, content=content, headers=headers, timeout=self._stream_timeout
                ) as response:
                    if response.status_code >= 300:
                        raise failure(response, response.read())
                    wrong = not_a_stream(response)
                    if wrong is not None:
                        raise wrong
                    events.run_id = events.run_id or run_location(response)
                    reader = SseReader()
                    for line in response.iter_lines():
                        item = reader.line(line)
                        if item is None:
                            continue
                        seq, event = item
                        if seq is not None:
                            events.last_event_id, cuts = seq, 0
                        elif not events.tokens:
                            continue
                        yield event
                    return
            except CUT as exc:
                if not events.run_id:
                    raise unreachable(exc, method, path) from exc
                cuts += 1
                if cuts > RECONNECTS:
                    raise gave_up(exc, path, cuts - 1) from exc
                events.reconnects += 1
                time.sleep(reconnect_wait(cuts))


__all__ = ["Client", "RunEvents"]
