"""The sim-server's aiohttp application (``build_app``): routes and read-out
endpoints.  No middleware: handlers count what they serve themselves, to
keep per-request overhead minimal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from agentrt.runtime.testing.sim._native_endpoints import NativeEndpoints
from agentrt.runtime.testing.sim._openai_endpoints import OpenAIEndpoints
from agentrt.runtime.testing.sim._sim_engine import SimEngine
from agentrt.runtime.testing.sim._sim_http import encoder, json_response

#: Large prompts are fine; absurd ones are a client bug.
MAX_REQUEST_BYTES = 64 * 1024 * 1024


def build_app(engine: SimEngine, on_restart: Callable[[], Awaitable[None]]) -> web.Application:
    """The application serving ``engine``; ``on_restart`` is called when a
    request draws the restart fault.  Routes: OpenAI ``/v1/chat/completions``,
    ``/v1/completions``, ``/v1/models``; SGLang ``/generate``, ``/health``,
    ``/health_generate``, ``/get_model_info``, ``/flush_cache``;
    ``/metrics``; ``GET /sim/stats`` (requests, statuses, faults, cache and
    token counts, generations; attempts per request id with ``?attempts=1``,
    the roles of each chat request's messages with ``?messages=1``) and
    ``POST /sim/reset``.  Only the three generation routes draw faults."""
    openai = OpenAIEndpoints(engine, on_restart)
    native = NativeEndpoints(engine, on_restart)

    async def metrics(request: web.Request) -> web.Response:
        engine.requests["/metrics"] += 1
        return web.Response(text=engine.metrics(), content_type="text/plain", charset="utf-8")

    async def stats(request: web.Request) -> web.Response:
        body = engine.stats()
        if request.query.get("attempts") == "1":  # every request id and its attempts
            body["attempts_by_request_id"] = dict(engine.attempts)
        if request.query.get("messages") == "1":  # every chat request id and its roles
            body["roles_by_request_id"] = dict(engine.roles)
        return json_response(encoder.encode(body))

    async def reset(request: web.Request) -> web.Response:
        engine.reset_stats()
        return json_response(b'{"ok":true}')

    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_post("/v1/chat/completions", openai.chat)
    app.router.add_post("/v1/completions", openai.completions)
    app.router.add_get("/v1/models", openai.models)
    app.router.add_post("/generate", native.generate)
    app.router.add_get("/health", native.health)
    app.router.add_get("/health_generate", native.health)
    app.router.add_get("/get_model_info", native.model_info)
    app.router.add_post("/flush_cache", native.flush_cache)
    app.router.add_get("/flush_cache", native.flush_cache)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/sim/stats", stats)
    app.router.add_post("/sim/reset", reset)
    return app
