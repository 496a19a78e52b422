"""``max_concurrency`` of every concrete backend and ``backend_concurrency``
(issue 10: a fixed default of 8 rollouts per backend capped HTTP backends
that can take a thousand requests; the embedded model takes one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Self

import anyio
import pytest
from aiohttp import web

from agentrt.protocols import (
    AssistantMessage,
    Choice,
    ModelReply,
    ModelRequest,
    Usage,
    UserMessage,
)
from agentrt.runtime.models._backend import ModelBackend, StreamDelta, backend_concurrency
from agentrt.runtime.models._retry import RetryPolicy
from agentrt.runtime.models.embedded._embedded_backend import EmbeddedBackend, EmbeddedConfig
from agentrt.runtime.models.http._http_client import HttpClientConfig
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.models.sglang._sglang_backend import SGLangBackend, SGLangBackendConfig
from agentrt.testing import ScriptedBackend


class UserBackend:
    """A user's own backend, written before ``max_concurrency`` existed."""

    def __init__(self, limit: object = "absent") -> None:
        if limit != "absent":
            self.max_concurrency = limit

    @property
    def name(self) -> str:
        return "mine"

    @property
    def models(self) -> list[str]:
        return ["m"]

    async def complete(self, request: ModelRequest) -> ModelReply:
        choice = Choice(message=AssistantMessage(content="ok"))
        return ModelReply(model="m", choices=[choice], usage=Usage(), latency_s=0.0)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        yield StreamDelta(reply=await self.complete(request))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def openai(url: str = "http://127.0.0.1:1/v1", *, max_connections: int = 1024) -> OpenAIBackend:
    return OpenAIBackend(
        OpenAIBackendConfig(
            base_url=url,
            models=["m"],
            retry=RetryPolicy(max_attempts=1, deadline_s=10),
            http=HttpClientConfig(read_timeout_s=10, max_connections=max_connections),
        )
    )


def test_the_default_http_pool_does_not_cap_a_large_run() -> None:
    assert HttpClientConfig().max_connections >= 1000
    default = OpenAIBackend(OpenAIBackendConfig(base_url="http://127.0.0.1:1/v1", models=["m"]))
    assert default.max_concurrency == HttpClientConfig().max_connections
    sglang = SGLangBackend(SGLangBackendConfig(urls=["http://127.0.0.1:1"], model="m"))
    assert sglang.max_concurrency == HttpClientConfig().max_connections


def test_each_backend_says_what_it_can_take() -> None:
    assert backend_concurrency(openai(max_connections=50)) == 50
    sglang = SGLangBackendConfig(
        urls=["http://127.0.0.1:1", "http://127.0.0.1:2"],
        model="m",
        http=HttpClientConfig(max_connections=64),
    )
    # One pool for all replicas: its limit, not a multiple of it.
    assert backend_concurrency(SGLangBackend(sglang)) == 64
    assert backend_concurrency(EmbeddedBackend(EmbeddedConfig())) == 1
    assert backend_concurrency(ScriptedBackend(["x"])) is None


def test_a_backend_without_the_property_is_unbounded_and_still_a_backend() -> None:
    mine = UserBackend()
    assert isinstance(mine, ModelBackend)
    assert backend_concurrency(mine) is None
    assert anyio.run(mine.complete, ModelRequest(messages=[UserMessage("q")])).message.content
    assert backend_concurrency(UserBackend(None)) is None
    assert backend_concurrency(UserBackend(12)) == 12


@pytest.mark.parametrize(
    ("limit", "error", "message"),
    [
        (0, ValueError, "must be at least 1, got 0"),
        (-3, ValueError, "must be at least 1, got -3"),
        (2.5, TypeError, "must be an int or None, got 2.5"),
        (True, TypeError, "must be an int or None, got True"),
        ("8", TypeError, "must be an int or None, got '8'"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_backend(
    limit: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        backend_concurrency(UserBackend(limit))
    assert str(info.value).startswith("backend 'mine' (UserBackend).max_concurrency ")
    assert message in str(info.value)


@pytest.mark.anyio
async def test_the_http_backend_runs_at_most_max_concurrency_requests_at_once() -> None:
    arrived = 0
    in_flight = 0
    peak = 0
    release = anyio.Event()
    three_in = anyio.Event()
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal arrived, in_flight, peak
        arrived += 1
        in_flight += 1
        peak = max(peak, in_flight)
        if arrived == 3:
            three_in.set()
        await release.wait()
        in_flight -= 1
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with openai(f"http://{host}:{port}/v1", max_connections=3) as backend:
            assert backend_concurrency(backend) == 3
            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(backend.complete, ModelRequest(messages=[UserMessage("q")]))
                try:
                    with anyio.fail_after(10):
                        await three_in.wait()
                    # Give a fourth request the chance to get through (it must not).
                    await anyio.sleep(0.2)
                    assert (arrived, peak) == (3, 3)
                finally:
                    release.set()
        assert arrived == 8
        assert peak == 3
    finally:
        await runner.cleanup()
