"""Token streaming through every surface (issue 15, item 2): the text a
model server generates reaches ``Runtime.stream``, the daemon's SSE event
stream and the OpenAI-compatible stream while it is generated, not in one
piece at the end.

The model server is the sim-server with a per-token latency (30 ms a token,
30 tokens: a reply takes about a second); a wrapper around the real
OpenAI-compatible backend notes when the first piece of text left the
backend.  Each surface's first text must arrive within a generous margin of
that moment (the target is 100 ms; ``TTFT_MARGIN_S`` leaves room for a busy
CI machine, and each test prints the lag it measured) and well before the
reply ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import pytest

from agentrt.protocols import ModelReply, ModelRequest, StepRecorded, TokenDelta
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.testing import SimServer, SimServerConfig
from tests._support.backends import ForwardingBackend

from .conftest import daemon_config

pytestmark = pytest.mark.anyio

#: The target is 100 ms; the margin allows for a loaded machine.
TTFT_TARGET_S: Final = 0.1
TTFT_MARGIN_S: Final = 0.4
SIM = SimServerConfig(ttft_ms=40, token_ms=30, reply_tokens=30, tool_rounds=0, stream_tick_ms=5)


class TimedBackend(ForwardingBackend[OpenAIBackend]):
    """A backend noting when the first piece of text of its latest call
    left it (``first``) and when the reply did (``last``).  ``timed_sim``
    opens ``inner``."""

    def __init__(self, inner: OpenAIBackend) -> None:
        super().__init__(inner, opens_inner=False)
        self.first: float | None = None
        self.last: float | None = None
        self.streams = 0
        self.completes = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.completes += 1
        return await self.inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        self.streams += 1
        self.first = self.last = None
        async with aclosing(self.inner.stream(request)) as deltas:
            async for delta in deltas:
                if delta.content and self.first is None:
                    self.first = time.monotonic()
                if delta.reply is not None:
                    self.last = time.monotonic()
                yield delta


@asynccontextmanager
async def timed_sim() -> AsyncIterator[TimedBackend]:
    async with SimServer(SIM) as server:
        config = OpenAIBackendConfig(name="sim", base_url=server.url + "/v1", models=["sim"])
        async with OpenAIBackend(config) as inner:
            yield TimedBackend(inner)


def check_lag(surface: str, backend: TimedBackend, seen: float | None) -> float:
    assert backend.first is not None, "the model call did not stream"
    assert backend.last is not None
    assert seen is not None, f"{surface}: no text arrived before the run ended"
    lag = seen - backend.first
    print(f"{surface}: first text {lag * 1000:.1f} ms after the backend produced it")
    assert lag < TTFT_MARGIN_S, f"{surface}: first text {lag:.3f} s after the backend's"
    # Streamed: it came long before the reply was whole (about a second).
    assert seen < backend.last - 0.4, f"{surface}: the text came only with the whole reply"
    return lag


async def test_runtime_stream_shows_text_as_it_is_generated() -> None:
    async with timed_sim() as backend, Runtime(backends=[backend]) as rt:
        seen: float | None = None
        pieces: list[str] = []
        steps: list[StepRecorded] = []
        async with rt.stream("Say something long.") as events:
            async for event in events:
                if isinstance(event, TokenDelta) and event.text:
                    seen = seen or time.monotonic()
                    assert not steps, "a token came after its step was recorded"
                    pieces.append(event.text)
                elif isinstance(event, StepRecorded):
                    steps.append(event)
        check_lag("Runtime.stream", backend, seen)
        # Coalesced, in order, and whole: the pieces are the reply's text.
        reply = steps[0].step.reply
        assert reply is not None
        assert "".join(pieces) == reply.message.content
        assert 3 <= len(pieces) < 30  # neither one piece nor one per token

        # Nobody reads tokens: the call does not stream at all.
        before = backend.streams
        result = await rt.run("Say something long.")
        assert result.status == "succeeded"
        assert backend.streams == before
        assert backend.completes == 1


async def _first_sse_token(client: httpx.AsyncClient, run_id: str) -> tuple[float | None, str]:
    seen: float | None = None
    text: list[str] = []
    event, has_id = "", False
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line:
                event, has_id = "", False  # the end of one event
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("id: "):
                has_id = True
            elif line.startswith("data: ") and event == "token":
                assert not has_id, "a token event with an id (tokens are not stored)"
                data: dict[str, Any] = json.loads(line[6:])
                if data["text"]:
                    seen = seen or time.monotonic()
                    text.append(data["text"])
    return seen, "".join(text)


async def _status(client: httpx.AsyncClient, run_id: str) -> str:
    status: str = (await client.get(f"/v1/runs/{run_id}")).json()["run"]["status"]
    return status


async def _openai_stream(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[float | None, str, str, str]:
    """(when the first content arrived, the whole content, the reasoning,
    the run's id)."""
    seen: float | None = None
    run_id = ""
    content: list[str] = []
    reasoning: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                assert not line.startswith(": rollout"), "progress as an SSE comment"
                continue
            chunk: dict[str, Any] = json.loads(line[6:])
            assert "error" not in chunk, chunk
            run_id = chunk["id"].removeprefix("chatcmpl-")
            for choice in chunk["choices"]:
                delta = choice["delta"]
                if delta.get("content"):
                    seen = seen or time.monotonic()
                    content.append(delta["content"])
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
    return seen, "".join(content), "".join(reasoning), run_id


async def test_daemon_sse_and_openai_stream_show_text_as_it_is_generated(
    tmp_path: Path,
) -> None:
    config = daemon_config(tmp_path)
    async with timed_sim() as backend, anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: run_daemon(config, backends=[backend], task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=30) as client:
            # The daemon's SSE event stream: ``token`` events, with no id.
            # Posted, then followed (as the web page does): asked to
            # stream from its first call.
            posted = await client.post(
                "/v1/runs",
                json={"task": "Say something long.", "agent": "solver", "stream_tokens": True},
            )
            assert posted.status_code == 201, posted.text
            run_id = posted.json()["run_id"]
            seen, text = await _first_sse_token(client, run_id)
            check_lag("daemon SSE", backend, seen)
            detail = (await client.get(f"/v1/runs/{run_id}")).json()
            assert detail["run"]["status"] == "succeeded"
            assert text == detail["run"]["answer"]
            # Token events are never stored: a late reader sees none.
            stored = await client.get(f"/v1/runs/{run_id}/events")
            assert "event: token" not in stored.text

            # The OpenAI stream: the answer's tokens as ``content`` deltas.
            body = {
                "model": "agentrt/solver",
                "stream": True,
                "messages": [{"role": "user", "content": "Say something long."}],
            }
            seen, content, _, run_id = await _openai_stream(client, body)
            check_lag("OpenAI stream", backend, seen)
            # Streamed and then completed: the content is the answer, once.
            assert content == (await client.get(f"/v1/runs/{run_id}")).json()["run"]["answer"]

            # Several rollouts: progress as reasoning, the chosen answer as content.
            _, content, reasoning, run_id = await _openai_stream(client, {**body, "rollouts": 2})
            assert "rollout r0 finished" in reasoning
            assert "rollout r1 finished" in reasoning
            assert content == (await client.get(f"/v1/runs/{run_id}")).json()["run"]["answer"]

            # Nobody follows a run that did not ask to stream: its call is
            # made whole, as the engine makes it (no token work for nobody).
            streams, completes = backend.streams, backend.completes
            posted = await client.post(
                "/v1/runs", json={"task": "Say something long.", "agent": "solver"}
            )
            assert posted.status_code == 201, posted.text
            run_id = posted.json()["run_id"]
            with anyio.fail_after(30):
                while (status := await _status(client, run_id)) in ("pending", "running"):  # noqa: ASYNC110 - polled, as a client waits
                    await anyio.sleep(0.05)
            assert status == "succeeded"
            assert (backend.streams, backend.completes) == (streams, completes + 1)
        tg.cancel_scope.cancel()
    print(f"target: {TTFT_TARGET_S * 1000:.0f} ms")
