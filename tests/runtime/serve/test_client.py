"""``agentrt.client`` against the daemon in process (a scripted model): runs
created, followed, listed and cancelled with typed events and errors, a
create-and-follow in one request, and a follow that resumes after its
connection is cut."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt import InvalidRequestError, RuntimeFailure, UserError
from agentrt.client import (
    AsyncClient,
    Client,
    DaemonUnavailable,
    ElicitationAnswer,
    NotFound,
    RequestRefused,
    Unauthorized,
)
from agentrt.protocols import (
    RolloutFinished,
    RunFinished,
    RunRequest,
    RunStarted,
    ScalingSpec,
    StepRecorded,
    TokenDelta,
)

pytestmark = pytest.mark.anyio


class _CutStream(httpx.AsyncByteStream):
    """A response body that breaks, like a dropped connection, once it has
    carried ``events`` stored events (their ``id:`` lines)."""

    def __init__(self, inner: httpx.AsyncByteStream, events: int) -> None:
        self.inner = inner
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            yield chunk
            seen += chunk.count(b"\nid: ") + chunk.startswith(b"id: ")
            if seen >= self.events:
                raise httpx.RemoteProtocolError("peer closed connection (cut by the test)")

    async def aclose(self) -> None:
        await self.inner.aclose()


class _SyncCutStream(httpx.SyncByteStream):
    """``_CutStream`` for the blocking client."""

    def __init__(self, inner: httpx.SyncByteStream, events: int) -> None:
        self.inner = inner
        self.events = events

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self.inner:
            yield chunk
            seen += chunk.count(b"\nid: ") + chunk.startswith(b"id: ")
            if seen >= self.events:
                raise httpx.RemoteProtocolError("peer closed connection (cut by the test)")

    def close(self) -> None:
        self.inner.close()


class SyncCuttingTransport(httpx.BaseTransport):
    """``CuttingTransport`` for the blocking client."""

    def __init__(self, events: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.events = events
        self.cut = False
        self.requests: list[tuple[str, str, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(
            (request.method, request.url.path, request.headers.get("last-event-id"))
        )
        response = self.inner.handle_request(request)
        streaming = "text/event-stream" in response.headers.get("content-type", "")
        if streaming and not self.cut:
            self.cut = True
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _SyncCutStream(response.stream, self.events)
        return response

    def close(self) -> None:
        self.inner.close()


class CuttingTransport(httpx.AsyncBaseTransport):
    """The real transport, but the first event stream is cut after
    ``events`` events; records each request's method, path and
    ``Last-Event-ID``."""

    def __init__(self, events: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.events = events
        self.cut = False
        self.requests: list[tuple[str, str, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(
            (request.method, request.url.path, request.headers.get("last-event-id"))
        )
        response = await self.inner.handle_async_request(request)
        streaming = "text/event-stream" in response.headers.get("content-type", "")
        if streaming and not self.cut:
            self.cut = True
            assert isinstance(response.stream, httpx.AsyncByteStream)
            response.stream = _CutStream(response.stream, self.events)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _request(rollouts: int = 2) -> RunRequest:
    return RunRequest(task="add things", agent="solver", scaling=ScalingSpec(rollouts=rollouts))


async def test_create_and_follow_gives_the_daemons_own_events(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=2)) as daemon,
        AsyncClient(daemon.url) as client,
    ):
        async with client.create_and_follow(_request()) as events:
            received = [event async for event in events]
        assert events.run_id is not None
        assert isinstance(received[0], RunStarted)
        assert isinstance(received[-1], RunFinished)
        assert received[-1].answer == "42"
        assert sum(isinstance(e, RolloutFinished) for e in received) == 2
        assert sum(isinstance(e, StepRecorded) for e in received) == 2 * 3
        assert not any(isinstance(e, TokenDelta) for e in received)  # not asked for
        assert [e.seq for e in received] == list(range(1, len(received) + 1))
        assert {e.run_id for e in received} == {events.run_id}

        detail = await client.get_run(events.run_id)
        assert detail.run.status == "succeeded"
        assert detail.result is not None
        assert detail.result.answer == "42"
        page = await client.list_runs(status="succeeded")
        assert [r.run_id for r in page.runs] == [events.run_id]

        # The document says POST /v1/runs may answer as the stream.
        async with httpx.AsyncClient(base_url=daemon.url) as http:
            document = (await http.get("/openapi.json")).json()
        created = document["paths"]["/v1/runs"]["post"]["responses"]["201"]
        assert sorted(created["content"]) == ["application/json", "text/event-stream"]

        # Following a finished run replays its stored events, from ``after``.
        async with client.follow(events.run_id, after=3) as again:
            replay = [e async for e in again]
        assert replay == received[3:]


async def test_a_follow_cut_mid_stream_resumes_with_last_event_id(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    transport = CuttingTransport(events=4)
    backend = daemon_kit.scripted(steps=3, latency_s=0.02)
    async with (
        daemon_kit.running(config, backend) as daemon,
        AsyncClient(daemon.url, transport=transport) as client,
    ):
        run = await client.create_run(_request())
        async with client.follow(run.run_id) as events:
            received = [event async for event in events]
    assert transport.cut
    assert events.reconnects == 1
    # Nothing missed, nothing twice: the seqs run 1..n across the cut.
    assert [e.seq for e in received] == list(range(1, len(received) + 1))
    assert isinstance(received[-1], RunFinished)
    follows = [r for r in transport.requests if r[1].endswith("/events")]
    assert len(follows) == 2
    assert follows[0][2] is None
    resumed_after = int(follows[1][2] or 0)
    assert resumed_after >= 4  # the last event the first connection delivered
    assert received[resumed_after - 1].seq == resumed_after


async def test_create_and_follow_cut_resumes_at_the_run_location(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    transport = CuttingTransport(events=2)
    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=3, latency_s=0.02)) as daemon,
        AsyncClient(daemon.url, transport=transport) as client,
    ):
        async with client.create_and_follow(_request(rollouts=1)) as events:
            received = [event async for event in events]
        runs = await client.list_runs()
    assert [r.run_id for r in runs.runs] == [events.run_id]  # created once, not again
    assert [m for m, _, _ in transport.requests] == ["POST", "GET", "GET"]
    assert transport.requests[1][1] == f"/v1/runs/{events.run_id}/events"
    assert [e.seq for e in received] == list(range(1, len(received) + 1))
    assert isinstance(received[-1], RunFinished)


async def test_cancel_and_the_errors_name_what_and_where(tmp_path: Path, daemon_kit: Any) -> None:
    token = "client-test-token-0123456789"
    config = daemon_kit.config(tmp_path, server={"token": token})
    slow = daemon_kit.scripted(steps=50, latency_s=0.05)
    async with daemon_kit.running(config, slow) as daemon:
        async with AsyncClient(daemon.url, token=token) as client:
            run = await client.create_run(_request(rollouts=1))
            with pytest.raises(RequestRefused) as unasked:  # the run asked nothing
                await client.answer_elicitation(
                    run.run_id, "q-1", ElicitationAnswer(action="decline")
                )
            assert (unasked.value.status, unasked.value.where) == (409, "run_id")
            cancelled = await client.cancel_run(run.run_id)
            assert cancelled.status == "cancelled"
            async with client.follow(run.run_id) as events:
                last = [e async for e in events][-1]
            assert isinstance(last, RunFinished)
            assert last.status == "cancelled"

            with pytest.raises(NotFound) as missing:
                await client.get_run("run-nope")
            assert missing.value.status == 404
            assert missing.value.where == "run_id"
            assert "run-nope" in str(missing.value)
            assert "GET /v1/runs/run-nope" in str(missing.value)
            with pytest.raises(NotFound):
                async with client.follow("run-nope") as events:
                    [e async for e in events]

            with pytest.raises(RequestRefused) as refused:
                await client.create_run(
                    RunRequest(task="t", agent="solver", scaling=ScalingSpec(rollouts=10_000))
                )
            assert refused.value.status == 422
            assert refused.value.where == "scaling.rollouts"
            assert isinstance(refused.value, UserError)
            assert not isinstance(refused.value, InvalidRequestError | NotFound)

        async with AsyncClient(daemon.url, token="wrong-token-0123456789") as intruder:
            with pytest.raises(Unauthorized) as denied:
                await intruder.list_runs()
        assert denied.value.where == "Authorization"

    # The daemon is gone: no connection is a RuntimeFailure, not a refusal.
    async with AsyncClient(daemon.url, token=token, timeout_s=5) as client:
        with pytest.raises(DaemonUnavailable) as gone:
            await client.list_runs()
    assert isinstance(gone.value, RuntimeFailure)
    assert gone.value.status is None


async def test_a_closed_or_unopened_client_says_so() -> None:
    client = AsyncClient()
    with pytest.raises(RuntimeError, match="unopened"):
        await client.list_runs()
    async with client:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        await client.list_runs()
    with pytest.raises(RuntimeError, match="Cannot open"):
        await client.__aenter__()


async def test_the_blocking_client_resumes_a_cut_create_and_follow(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    transport = SyncCuttingTransport(events=3)

    def session(url: str) -> tuple[str | None, list[int], int, str]:
        with Client(url, transport=transport) as client:
            with client.create_and_follow(_request()) as events:
                seqs = [event.seq for event in events]
            assert events.run_id is not None
            status = client.get_run(events.run_id).run.status
            with pytest.raises(NotFound) as missing:
                client.cancel_run("run-nope")
            assert missing.value.where == "run_id"
        return events.run_id, seqs, events.reconnects, status

    async with daemon_kit.running(config, daemon_kit.scripted(steps=2, latency_s=0.02)) as daemon:
        run_id, seqs, reconnects, status = await anyio.to_thread.run_sync(session, daemon.url)
    assert transport.cut
    assert reconnects == 1
    assert seqs == list(range(1, len(seqs) + 1))
    assert status == "succeeded"
    assert [(m, p) for m, p, _ in transport.requests[:2]] == [
        ("POST", "/v1/runs"),
        ("GET", f"/v1/runs/{run_id}/events"),
    ]
    assert int(transport.requests[1][2] or 0) >= 3


@pytest.mark.parametrize(
    ("status", "body", "kind", "where"),
    [
        (
            422,
            b'{"error":"invalid_request","message":"bad","where":"task","status":422}',
            RequestRefused,
            "task",
        ),
        (
            404,
            b'{"error":"not_found","message":"no run","where":"run_id","status":404}',
            NotFound,
            "run_id",
        ),
        (
            401,
            b'{"error":"unauthorized","message":"no","where":"Authorization","status":401}',
            Unauthorized,
            "Authorization",
        ),
        (
            429,
            b'{"error":"too_many_runs","message":"full","where":"server.max_pending_runs",'
            b'"status":429}',
            DaemonUnavailable,
            "server.max_pending_runs",
        ),
        (502, b"<html>bad gateway</html>", DaemonUnavailable, None),
    ],
)
def test_each_refusal_becomes_its_exception(
    status: int, body: bytes, kind: type[Exception], where: str | None
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"retry-after": "3"})

    with (
        Client("http://daemon.test", transport=httpx.MockTransport(answer)) as client,
        pytest.raises(kind) as raised,
    ):
        client.list_runs()
    error = raised.value
    assert type(error) is kind
    assert isinstance(error, RequestRefused | DaemonUnavailable)
    assert error.where == where
    assert error.status == status
    assert "GET /v1/runs" in str(error)
    if isinstance(error, DaemonUnavailable):
        assert error.retry_after == 3.0
    if status == 502:
        assert "bad gateway" in str(error)


def test_an_answer_that_is_not_a_stream_is_not_taken_for_an_empty_run() -> None:
    def answer(request: httpx.Request) -> httpx.Response:  # a daemon that does not stream
        return httpx.Response(201, json={"run_id": "run-1"})

    with (
        Client("http://daemon.test", transport=httpx.MockTransport(answer)) as client,
        pytest.raises(DaemonUnavailable, match="not an event stream") as raised,
        client.create_and_follow("t") as events,
    ):
        list(events)
    assert raised.value.endpoint == "POST /v1/runs"
