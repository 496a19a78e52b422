"""``Client``: the daemon's REST + SSE API from blocking code, and
``RunEvents``, a run's events as they come (the same calls and errors as
``AsyncClient``).

Imports protocols, the kernel's error tree and httpx; nothing of the daemon.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self, TypeVar, final

import httpx

from agentrt.protocols._api import ElicitationAnswer, RunDetail, RunInfo, RunPage
from agentrt.protocols._events import ElicitationRequested, Event
from agentrt.protocols._run import RunRequest, RunStatus
from agentrt.protocols._webhooks import WebhookDelivery
from agentrt.runtime.client import _calls as calls
from agentrt.runtime.client._async_client import (
    DEFAULT_URL,
    STREAM_IDLE_S,
    TIMEOUT_S,
    auth_headers,
)
from agentrt.runtime.client._calls import ClientState
from agentrt.runtime.client._sse import CUT, failure, request_body

T = TypeVar("T")


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
        self._state = ClientState.UNOPENED

    def __enter__(self) -> Self:
        if self._state is not ClientState.UNOPENED:
            raise RuntimeError(f"Cannot open a Client that is {self._state.value}.")
        self._http.__enter__()
        self._state = ClientState.OPEN
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state = ClientState.CLOSED
        self._http.__exit__(exc_type, exc, tb)

    def _check_open(self) -> None:
        if self._state is not ClientState.OPEN:
            raise RuntimeError(f"The Client is {self._state.value}: use it inside `with`.")

    def _send(self, call: calls.Call[T]) -> T:
        self._check_open()
        try:
            response = self._http.request(
                call.method,
                call.path,
                content=call.content,
                params=call.params,
                headers=call.headers,
            )
        except httpx.TransportError as exc:
            raise call.unreachable(exc) from exc
        return call.read(response)

    def create_run(self, request: RunRequest | str) -> RunInfo:
        """Start a run (``AsyncClient.create_run``)."""
        return self._send(calls.create_run(request))

    def get_run(self, run_id: str) -> RunDetail:
        """The run in full (``AsyncClient.get_run``)."""
        return self._send(calls.get_run(run_id))

    def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 50, cursor: str | None = None
    ) -> RunPage:
        """A page of runs, newest first (``AsyncClient.list_runs``)."""
        return self._send(calls.list_runs(status, limit, cursor))

    def cancel_run(self, run_id: str) -> RunInfo:
        """Cancel the run (``AsyncClient.cancel_run``)."""
        return self._send(calls.cancel_run(run_id))

    def answer_elicitation(
        self, run_id: str, question_id: str, answer: ElicitationAnswer
    ) -> RunInfo:
        """Answer a run's question (``AsyncClient.answer_elicitation``)."""
        return self._send(calls.answer_elicitation(run_id, question_id, answer))

    def list_elicitations(self, run_id: str | None = None) -> list[ElicitationRequested]:
        """The questions the caller's runs wait on (``AsyncClient.list_elicitations``)."""
        return self._send(calls.list_elicitations(run_id)).questions

    def approve(self, run_id: str, question_id: str) -> RunInfo:
        """Approve the tool call the run waits on (``AsyncClient.approve``)."""
        return self.answer_elicitation(run_id, question_id, ElicitationAnswer(action="accept"))

    def deny(self, run_id: str, question_id: str) -> RunInfo:
        """Deny it (``AsyncClient.deny``): the tool does not run."""
        return self.answer_elicitation(run_id, question_id, ElicitationAnswer(action="decline"))

    def webhook_deliveries(self, run_id: str) -> list[WebhookDelivery]:
        """The run's webhook deliveries (``AsyncClient.webhook_deliveries``)."""
        return self._send(calls.webhook_deliveries(run_id)).deliveries

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
        follow = calls.EventFollow(events, create)
        while True:
            call = follow.call()
            try:
                with self._http.stream(
                    call.method,
                    call.path,
                    content=call.content,
                    headers=call.headers,
                    timeout=self._stream_timeout,
                ) as response:
                    if response.status_code >= 300:
                        raise failure(response, response.read())
                    follow.opened(response)
                    for line in response.iter_lines():
                        event = follow.event(line)
                        if event is not None:
                            yield event
                    return
            except CUT as exc:
                time.sleep(follow.cut(exc, call))


__all__ = ["Client", "RunEvents"]
