"""A call the caller gives up on is aborted at the SGLang server
(``POST /abort_request`` with the request's ``rid``), so the server stops
generating it; here against a transport that records what reaches the
server (the real server: tests/integration/test_sglang.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, SamplingParams, UserMessage
from agentrt.runtime.kernel._errors import BackendTimeout
from agentrt.runtime.models._retry import RetryPolicy
from agentrt.runtime.models.sglang._sglang_backend import SGLangBackend, SGLangBackendConfig

pytestmark = pytest.mark.anyio

#: One event, then nothing: the generation is still running.
_EVENT = b'data: {"text": "Hel", "meta_info": {"id": "x", "finish_reason": null}}\n\n'


class Server:
    """``/health`` and ``/v1/models`` answer; ``/generate`` starts and never finishes; what
    ``/abort_request`` receives is recorded."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.aborted: list[str] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "smol"}]})
        if path == "/abort_request":
            self.aborted.append(json.loads(request.content)["rid"])
            return httpx.Response(200)
        assert path == "/generate"
        self.started.set()
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, content=self._events())
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def _events(self) -> AsyncIterator[bytes]:
        yield _EVENT
        await anyio.sleep_forever()


def _backend(server: Server, deadline_s: float = 60.0) -> SGLangBackend:
    config = SGLangBackendConfig(
        urls=["http://sglang.test:30000"],
        model="smol",
        health_interval_s=0,
        retry=RetryPolicy(deadline_s=deadline_s, max_attempts=1),
    )
    return SGLangBackend(config, transport=httpx.MockTransport(server.handle))


def _request(rid: str, n: int = 1) -> ModelRequest:
    return ModelRequest(
        messages=[UserMessage("count to a thousand")],
        sampling=SamplingParams(max_tokens=4000),
        request_id=rid,
        n=n,
    )


async def test_a_cancelled_call_is_aborted_at_the_server() -> None:
    server = Server()
    async with _backend(server) as sg, anyio.create_task_group() as tg:
        tg.start_soon(sg.complete, _request("run-1-0"))
        await server.started.wait()
        tg.cancel_scope.cancel()
    assert server.aborted == ["run-1-0"]


async def test_a_call_past_its_deadline_is_aborted_at_the_server() -> None:
    server = Server()
    async with _backend(server, deadline_s=0.05) as sg:
        with pytest.raises(BackendTimeout):
            await sg.complete(_request("run-2-0"))
    assert server.aborted == ["run-2-0"]


async def test_a_stream_closed_early_is_aborted_at_the_server() -> None:
    server = Server()
    async with _backend(server) as sg:
        async with contextlib.aclosing(sg.stream(_request("run-3-0"))) as deltas:
            first = await anext(deltas)
        assert first.content == "Hel"
    assert server.aborted == ["run-3-0"]


async def test_every_sample_of_an_n_gt_1_call_is_aborted() -> None:
    """SGLang knows each sample by an id of its own: every one is aborted,
    whole call or stream."""
    server = Server()
    async with _backend(server) as sg:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sg.complete, _request("run-4-0", n=3))
            await server.started.wait()
            tg.cancel_scope.cancel()
        async with contextlib.aclosing(sg.stream(_request("run-5-0", n=2))) as deltas:
            await anext(deltas)
    assert sorted(server.aborted) == [
        "run-4-0_0",
        "run-4-0_1",
        "run-4-0_2",
        "run-5-0_0",
        "run-5-0_1",
    ]
