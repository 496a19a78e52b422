"""An aiohttp server on a loopback port and an OpenAI backend pointed at
it: what the OpenAI backend's tests (``test_openai*.py``, ``test_retry.py``)
stand up for every case."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from aiohttp import web

from agentrt.runtime.models._retry import RetryPolicy
from agentrt.runtime.models.http._http_client import HttpClientConfig
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def loopback_server(handler: Handler) -> AsyncIterator[str]:
    """``handler`` for every path, on an ephemeral port of 127.0.0.1; yields
    the server's /v1 URL.  ``handler_cancellation`` makes a client
    disconnect cancel the handler, which is how the tests observe it."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        await runner.cleanup()


def openai_backend(url: str, **config: Any) -> OpenAIBackend:
    """An OpenAI backend on ``url`` with a 5-second read timeout, unless
    ``config`` (the other ``OpenAIBackendConfig`` fields) says otherwise."""
    return OpenAIBackend(
        OpenAIBackendConfig(
            **{"base_url": url, "http": HttpClientConfig(read_timeout_s=5), **config}
        )
    )


def retrying_backend(url: str, name: str, **config: Any) -> OpenAIBackend:
    """``openai_backend`` named ``name`` serving model ``m``, that tries a
    call three times, 10 ms apart at first, within 10 s."""
    retry = RetryPolicy(max_attempts=3, base_delay_s=0.01, deadline_s=10)
    return openai_backend(url, **{"name": name, "models": ["m"], "retry": retry, **config})


class HangsOnce:
    """A handler that answers ``body``, but only after 30 s the first time
    (a hang a deadline or a read timeout must end)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.calls = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        if self.calls == 1:
            await anyio.sleep(30)
        return web.json_response(self.body)
