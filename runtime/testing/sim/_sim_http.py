"""HTTP delivery for the sim-server, shared by its OpenAI and SGLang endpoints:
JSON replies, OpenAI-shaped error bodies, SSE events (``sse``), timed SSE
streams (``stream_frames``) and request-level faults (``Generation``).

Uses aiohttp.web and anyio; knows nothing about reply contents.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from types import TracebackType

import anyio
import msgspec
from aiohttp import web

from agentrt.runtime.testing.sim._sim_config import FaultKind
from agentrt.runtime.testing.sim._sim_engine import SimEngine

Frame = tuple[float, bytes]  # (seconds after the start of the reply, SSE bytes)

_JSON = "application/json"

encoder = msgspec.json.Encoder()

SSE_DONE = b"data: [DONE]\n\n"


def openai_error(message: str, kind: str, code: int) -> bytes:
    """An OpenAI-shaped error body."""
    return encoder.encode({"error": {"message": message, "type": kind, "code": code}})


def sse(payload: object) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return b"data: " + encoder.encode(payload) + b"\n\n"


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=_JSON)


def error_response(engine: SimEngine, message: str, kind: str, status: int) -> web.Response:
    engine.statuses[status] += 1
    return json_response(openai_error(message, kind, status), status)


def drop(request: web.BaseRequest) -> web.StreamResponse:
    """Close the connection under the request.  The returned response is
    never delivered: aiohttp finds the transport closed and gives up."""
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response(status=599)


class Generation:
    """One generation request's lifecycle (an async context manager): it
    admits the request (drawing its fault), keeps the in-flight count,
    answers the request-level faults (429 with ``Retry-After``, 503, hang,
    restart) and delivers the reply, cut short when the request drew
    ``cut`` (the client sees the peer go away mid-reply)."""

    def __init__(
        self,
        engine: SimEngine,
        request: web.Request,
        path: str,
        request_id: str | None,
        on_restart: Callable[[], Awaitable[None]],
    ) -> None:
        self.engine = engine
        self.request = request
        self.fault: FaultKind | None = engine.admit(path, request_id)
        self._on_restart = on_restart

    async def __aenter__(self) -> Generation:
        self.engine.enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cancelled = exc_type is not None and issubclass(exc_type, anyio.get_cancelled_exc_class())
        self.engine.leave(abandoned=cancelled)

    async def early_fault(self) -> web.StreamResponse | None:
        """The reply for a request-level fault decided before generating, or
        ``None`` when the request proceeds (``cut`` is applied on delivery)."""
        engine, fault = self.engine, self.fault
        if fault == "429":
            engine.faults.record("429")
            response = error_response(engine, "simulated rate limit", "rate_limit_exceeded", 429)
            response.headers["Retry-After"] = f"{engine.config.retry_after:g}"
            return response
        if fault == "503":
            engine.faults.record("503")
            return error_response(engine, "simulated overload", "service_unavailable", 503)
        if fault == "hang":
            engine.faults.record("hang")
            # Held until the client disconnects (aiohttp then cancels this
            # handler) or hang_s passes; then the connection is closed.
            await anyio.sleep(engine.config.hang_s)
            return drop(self.request)
        if fault == "restart":
            engine.faults.record("restart")
            await self._on_restart()
            return drop(self.request)
        return None

    async def json(self, body: bytes, delay_s: float) -> web.StreamResponse:
        """Deliver a JSON body after ``delay_s``; a ``cut`` request gets the
        headers and half the declared body, then the connection drops."""
        await anyio.sleep(delay_s)
        if self.fault != "cut":
            self.engine.statuses[200] += 1
            return json_response(body)
        self.engine.faults.record("cut")
        response = web.StreamResponse(status=200)
        response.content_type = _JSON
        response.content_length = len(body)
        await response.prepare(self.request)
        await response.write(body[: len(body) // 2])
        return drop(self.request)

    async def stream(self, frames: list[Frame], done: bytes) -> web.StreamResponse:
        """Deliver SSE ``frames`` at their due times, then ``done``; a
        ``cut`` request stops after half the frames and drops."""
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(self.request)
        if self.fault == "cut":
            self.engine.faults.record("cut")
            await stream_frames(response, frames[: max(1, len(frames) // 2)], self.engine)
            return drop(self.request)
        await stream_frames(response, frames, self.engine, done)
        self.engine.statuses[200] += 1
        return response


async def stream_frames(
    response: web.StreamResponse, frames: list[Frame], engine: SimEngine, done: bytes | None = None
) -> None:
    """Write ``frames`` (sorted by due time) no earlier than due, batching all
    frames that are due when a write happens; writes are at least one tick
    apart, so a stream costs at most one wake-up per tick.  With ``done``,
    the last batch is followed by ``done`` and the end of the body, in one
    write."""
    tick = engine.config.stream_tick_ms / 1000
    start = anyio.current_time()
    last_write = -math.inf
    i, total = 0, len(frames)
    while i < total:
        now = anyio.current_time() - start
        wake = max(frames[i][0], last_write + tick)
        if wake > now:
            await anyio.sleep(wake - now)
            now = anyio.current_time() - start
        j = i + 1
        while j < total and frames[j][0] <= now:
            j += 1
        batch = b"".join(frame for _, frame in frames[i:j])
        if j == total and done is not None:
            await response.write_eof(batch + done)
            return
        await response.write(batch)
        last_write = now
        i = j
    if done is not None:
        await response.write_eof(done)
