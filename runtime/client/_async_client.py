"""``AsyncClient``: the daemon's REST + SSE API from async code (anyio), and
``AsyncRunEvents``, a run's events as they come.

Imports protocols, the kernel's error tree and httpx; nothing of the daemon.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Final, Self, TypeVar, final

import anyio
import httpx

from agentrt.protocols._api import ElicitationAnswer, RunDetail, RunInfo, RunPage
from agentrt.protocols._events import ElicitationRequested, Event
from agentrt.protocols._run import RunRequest, RunStatus
from agentrt.protocols._webhooks import WebhookDelivery
from agentrt.runtime.client import _calls as calls
from agentrt.runtime.client._calls import ClientState
from agentrt.runtime.client._sse import CUT, failure, request_body

T = TypeVar("T")

DEFAULT_URL: Final = "http://127.0.0.1:8765"
"""The daemon's default address (``agentrt serve``)."""
TIMEOUT_S: Final = 30.0
"""The deadline of a request (connect, send, answer)."""
STREAM_IDLE_S: Final = 60.0
"""How long an event stream may stay silent (the daemon sends a keep-alive
every ``server.sse_keepalive_s``, 15 s by default) before it reconnects."""


def auth_headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


@final
class AsyncRunEvents:
    """A run's events, in order, as the daemon's own types (``agentrt.protocols``:
    ``RunStarted``, ``StepRecorded``... ``RunFinished``, then the iteration
    ends).  A connection that is cut or goes quiet is opened again with
    ``Last-Event-ID``: nothing is missed or repeated (``token`` events, which
    the daemon does not store, may be).  ``run_id`` is the run (known once
    the daemon answered); ``last_event_id`` the ``seq`` of the last stored
    event received.  Raises ``DaemonUnavailable`` after ``RECONNECTS`` cuts
    in a row, and the errors of ``AsyncClient`` for a refusal."""

    def __init__(
        self,
        run_id: str | None,
        *,
        after: int,
        tokens: bool,
        read: Callable[[AsyncRunEvents], AsyncGenerator[Event, None]],
    ) -> None:
        self.run_id = run_id
        self.last_event_id = after
        self.tokens = tokens
        self.reconnects = 0
        """Connections opened again after a cut, in all."""
        self._events = read(self)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        return await anext(self._events)

    async def aclose(self) -> None:
        """Close the connection (``follow`` does it when its block ends)."""
        await self._events.aclose()


@final
class AsyncClient:
    """The daemon's REST + SSE API (``agentrt serve``), async.

    ``base_url``: the daemon (``http://127.0.0.1:8765``); ``token``: its
    bearer token (``server.token``) or an API key (``server.keys``), if it
    asks for one; ``timeout_s``: each
    request's deadline; ``transport``: an httpx transport (tests, proxies).

    An async context manager, opened once: ``async with AsyncClient(url) as
    client:``.  Every method raises ``RequestRefused`` (``NotFound``,
    ``Unauthorized``) when the daemon refuses the request, naming the field
    or header at fault, and ``DaemonUnavailable`` for a 5xx or 429 (with
    ``retry_after``) or no answer in time.  Raises ``RuntimeError`` when
    opened twice or used while not open."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout_s: float = TIMEOUT_S,
        stream_idle_s: float = STREAM_IDLE_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=auth_headers(token),
            timeout=timeout_s,
            transport=transport,
        )
        self._stream_timeout = httpx.Timeout(timeout_s, read=stream_idle_s)
        self._state = ClientState.UNOPENED

    async def __aenter__(self) -> Self:
        if self._state is not ClientState.UNOPENED:
            raise RuntimeError(f"Cannot open an AsyncClient that is {self._state.value}.")
        await self._http.__aenter__()
        self._state = ClientState.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state = ClientState.CLOSED
        await self._http.__aexit__(exc_type, exc, tb)

    def _check_open(self) -> None:
        if self._state is not ClientState.OPEN:
            raise RuntimeError(
                f"The AsyncClient is {self._state.value}: use it inside `async with`."
            )

    async def _send(self, call: calls.Call[T]) -> T:
        self._check_open()
        try:
            response = await self._http.request(
                call.method,
                call.path,
                content=call.content,
                params=call.params,
                headers=call.headers,
            )
        except httpx.TransportError as exc:
            raise call.unreachable(exc) from exc
        return call.read(response)

    # -- runs ------------------------------------------------------------------

    async def create_run(self, request: RunRequest | str) -> RunInfo:
        """Start a run (``POST /v1/runs``): a ``RunRequest``, or a task for
        the default agent.  Returns it as admitted (``pending``)."""
        return await self._send(calls.create_run(request))

    async def get_run(self, run_id: str) -> RunDetail:
        """The run in full: request, rollouts and (once ended) the result."""
        return await self._send(calls.get_run(run_id))

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 50, cursor: str | None = None
    ) -> RunPage:
        """A page of runs, newest first (``next_cursor`` for the next page)."""
        return await self._send(calls.list_runs(status, limit, cursor))

    async def cancel_run(self, run_id: str) -> RunInfo:
        """Cancel the run; returns it once it has stopped (terminal)."""
        return await self._send(calls.cancel_run(run_id))

    async def answer_elicitation(
        self, run_id: str, question_id: str, answer: ElicitationAnswer
    ) -> RunInfo:
        """Answer the question a run's ``ElicitationRequested`` event asked
        (``accept`` with the form's content, ``decline`` or ``cancel``)."""
        return await self._send(calls.answer_elicitation(run_id, question_id, answer))

    async def list_elicitations(self, run_id: str | None = None) -> list[ElicitationRequested]:
        """The questions the caller's runs wait on (``run_id``'s only, when
        given), oldest first: approvals of tools under ``[approvals.TOOL]``
        (``mode`` ``approval``) and MCP servers' questions."""
        return (await self._send(calls.list_elicitations(run_id))).questions

    async def approve(self, run_id: str, question_id: str) -> RunInfo:
        """Approve the tool call the run waits on (``answer_elicitation``
        with ``accept``); the run goes on and the tool runs."""
        return await self.answer_elicitation(
            run_id, question_id, ElicitationAnswer(action="accept")
        )

    async def deny(self, run_id: str, question_id: str) -> RunInfo:
        """Deny it (``decline``): the tool does not run, and the model reads
        that it was denied."""
        return await self.answer_elicitation(
            run_id, question_id, ElicitationAnswer(action="decline")
        )

    async def webhook_deliveries(self, run_id: str) -> list[WebhookDelivery]:
        """The run's webhook deliveries as the daemon recorded them (status,
        attempts, the receiver's last answer), in the order they were made."""
        return (await self._send(calls.webhook_deliveries(run_id))).deliveries

    @asynccontextmanager
    async def follow(
        self, run_id: str, *, after: int = 0, tokens: bool = False
    ) -> AsyncIterator[AsyncRunEvents]:
        """The run's events after ``after`` (0: from the start), until it
        ends: ``async with client.follow(run_id) as events: async for event
        in events: ...``.  ``tokens``: the model's text as it streams
        (``TokenDelta`` events) too, from the calls that start once it
        follows (a run created with ``RunRequest.stream_tokens`` streams
        from its first; ``create_and_follow`` sets it)."""
        self._check_open()
        events = AsyncRunEvents(
            run_id, after=after, tokens=tokens, read=lambda e: self._stream(e, None)
        )
        try:
            yield events
        finally:
            await events.aclose()

    @asynccontextmanager
    async def create_and_follow(
        self, request: RunRequest | str, *, tokens: bool = False
    ) -> AsyncIterator[AsyncRunEvents]:
        """Start a run and follow it in one request (``POST /v1/runs`` with
        ``Accept: text/event-stream``); ``events.run_id`` names the run once
        the daemon answered.  A cut after that resumes as ``follow`` does; a
        cut before it raises ``DaemonUnavailable`` (the run may exist:
        ``list_runs`` tells)."""
        self._check_open()
        body = request_body(request)
        events = AsyncRunEvents(None, after=0, tokens=tokens, read=lambda e: self._stream(e, body))
        try:
            yield events
        finally:
            await events.aclose()

    async def _stream(
        self, events: AsyncRunEvents, create: bytes | None
    ) -> AsyncGenerator[Event, None]:
        follow = calls.EventFollow(events, create)
        while True:
            call = follow.call()
            try:
                async with self._http.stream(
                    call.method,
                    call.path,
                    content=call.content,
                    headers=call.headers,
                    timeout=self._stream_timeout,
                ) as response:
                    if response.status_code >= 300:
                        raise failure(response, await response.aread())
                    follow.opened(response)
                    async for line in response.aiter_lines():
                        event = follow.event(line)
                        if event is not None:
                            yield event
                    return
            except CUT as exc:
                await anyio.sleep(follow.cut(exc, call))


__all__ = ["DEFAULT_URL", "STREAM_IDLE_S", "TIMEOUT_S", "AsyncClient", "AsyncRunEvents"]
