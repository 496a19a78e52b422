"""Faults: 200 tool-calling rollouts against the sim-server (its own process)
with 10% 429 (Retry-After 0.1 s), 5% 503, 2% cut replies, 1% hangs and 5%
malformed tool-call JSON.

Every rollout terminates, >= 99% succeed, every Retry-After is honoured
(checked per request from a recording transport), attempts per request stay
<= 1.5 on average (client and server counts), and no task outlives the run.
Half the rollouts use ``complete()``, half ``stream()``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from agentrt.protocols import (
    ModelReply,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import BackendError, BackendTimeout, BackendUnavailable
from agentrt.runtime.models._retry import BreakerConfig, RetryPolicy
from agentrt.runtime.models.http._http_client import HttpClientConfig, make_transport
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.testing.sim._sim_config import SimServerConfig
from agentrt.runtime.testing.sim._sim_runner import spawn_sim_server

pytestmark = pytest.mark.anyio

ROLLOUTS = 200
MAX_STEPS = 3
STEP_TRIES = 3
RETRY_AFTER = 0.1
TOOLS = [
    ToolSpec(
        name="lookup",
        description="look a key up",
        parameters={"type": "object", "properties": {"key": {"type": "string"}}},
    )
]


@dataclass
class Attempt:
    started: float
    ended: float = 0.0
    status: int | None = None
    retry_after: str | None = None


@dataclass
class Recorder(httpx.AsyncBaseTransport):
    """Wraps the real aiohttp transport and records every attempt, keyed by
    the request id the rollout set."""

    inner: httpx.AsyncBaseTransport
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempt = Attempt(started=time.monotonic())
        self.attempts.setdefault(request.headers["x-request-id"], []).append(attempt)
        response = await self.inner.handle_async_request(request)
        attempt.ended = time.monotonic()
        attempt.status = response.status_code
        attempt.retry_after = response.headers.get("retry-after")
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Outcome:
    ok: bool = False
    steps: int = 0
    error: str = ""
    bad_tool_json: int = 0
    step_restarts: int = 0


async def call(backend: OpenAIBackend, request: ModelRequest, streaming: bool) -> ModelReply:
    if not streaming:
        return await backend.complete(request)
    reply: ModelReply | None = None
    async with aclosing(backend.stream(request)) as deltas:
        async for delta in deltas:
            reply = delta.reply or reply
    assert reply is not None
    return reply


async def call_step(
    backend: OpenAIBackend, request: ModelRequest, streaming: bool, outcome: Outcome
) -> ModelReply:
    """One step's model call.  A stream cut after deltas were handed out is
    the caller's to redo (the backend cannot take them back): the loop
    redoes the step, up to STEP_TRIES times, as an agent loop would."""
    for _ in range(STEP_TRIES - 1):
        try:
            return await call(backend, request, streaming)
        except (BackendUnavailable, BackendTimeout):
            if not streaming:
                raise
            outcome.step_restarts += 1
    return await call(backend, request, streaming)


async def rollout(backend: OpenAIBackend, index: int, outcome: Outcome) -> None:
    """A tiny hand-written tool loop (the agent loop is not built yet)."""
    streaming = index % 2 == 1
    messages: list[Any] = [
        SystemMessage("You call tools."),
        UserMessage(f"rollout {index}: look up key {index}"),
    ]
    try:
        for step in range(MAX_STEPS):
            outcome.steps = step + 1
            request = ModelRequest(
                messages=list(messages),
                tools=TOOLS,
                sampling=SamplingParams(max_tokens=32),
                request_id=f"r{index}-s{step}",
            )
            reply = await call_step(backend, request, streaming, outcome)
            message = reply.message
            if not message.tool_calls:
                outcome.ok = bool(message.content)
                return
            messages.append(message)
            for tool_call in message.tool_calls:
                try:
                    json.loads(tool_call.function.arguments)
                    result = f"value-{index}"
                except ValueError:
                    outcome.bad_tool_json += 1
                    result = "error: arguments are not valid JSON"
                messages.append(ToolMessage(result, tool_call_id=tool_call.id))
        outcome.error = "no final answer within the step limit"
    except BackendError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio+uvloop")]
)
async def test_200_rollouts_survive_injected_faults() -> None:
    tasks_before = set(asyncio.all_tasks())
    sim = SimServerConfig(
        ttft_ms=5,
        token_ms=0.2,
        reply_tokens=8,
        tool_rounds=2,
        fault_429=0.10,
        retry_after=RETRY_AFTER,
        fault_503=0.05,
        fault_cut=0.02,
        fault_hang=0.01,
        hang_s=5,
        fault_bad_tool_json=0.05,
        seed=3,
    )
    http = HttpClientConfig(read_timeout_s=1.0, connect_timeout_s=2.0)
    config = OpenAIBackendConfig(
        name="sim",
        base_url="http://placeholder/v1",
        models=["sim"],
        http=http,
        retry=RetryPolicy(max_attempts=6, base_delay_s=0.05, max_delay_s=1.0, deadline_s=20),
        breaker=BreakerConfig(failure_threshold=20, cooldown_s=0.5),
    )
    outcomes = [Outcome() for _ in range(ROLLOUTS)]
    started = time.monotonic()
    async with spawn_sim_server(sim) as url:
        recorder = Recorder(make_transport(http))
        backend = OpenAIBackend(
            config.model_copy(update={"base_url": f"{url}/v1"}), transport=recorder
        )
        async with backend:
            with anyio.fail_after(60):  # a hang guard: every rollout terminates
                async with anyio.create_task_group() as tg:
                    for i in range(ROLLOUTS):
                        tg.start_soon(rollout, backend, i, outcomes[i])
        async with httpx.AsyncClient() as client:
            server = (await client.get(f"{url}/sim/stats", timeout=5)).json()
    elapsed = time.monotonic() - started

    # >= 99% succeed; the failures say what failed.
    failed = [o.error for o in outcomes if not o.ok]
    assert len(failed) <= ROLLOUTS // 100, failed
    assert all(o.steps >= 1 for o in outcomes)

    # The faults really happened.
    faults = server["faults"]
    assert faults["429"] >= 10, faults
    assert faults["503"] >= 5, faults
    assert faults["cut"] >= 1, faults
    assert faults["hang"] >= 1, faults
    assert faults["bad_tool_json"] >= 1, faults
    assert sum(o.bad_tool_json for o in outcomes) >= 1  # passed through, not raised

    # Retry-After honoured: after every 429 the same request waited at least
    # the advertised time before its next attempt.
    waits = []
    for attempts in recorder.attempts.values():
        for before, after in itertools.pairwise(attempts):
            if before.status == 429:
                assert before.retry_after is not None
                advertised = float(before.retry_after)
                waits.append(after.started - before.ended)
                assert after.started - before.ended >= advertised, (before, after)
    assert len(waits) >= 10

    # Attempts per request: client side (the recorder, and the backend's
    # counters) and server side (attempts per X-Request-Id).
    client_mean = sum(len(a) for a in recorder.attempts.values()) / len(recorder.attempts)
    assert client_mean <= 1.5, client_mean
    stats = backend.stats
    assert stats.attempts_per_call <= 1.5, stats
    assert server["request_ids"]["mean_attempts"] <= 1.5, server["request_ids"]
    assert stats.retry_after_waits >= 10

    # No task outlives the run (and every rollout ended: the hang guard above).
    await anyio.lowlevel.checkpoint()
    leftover = set(asyncio.all_tasks()) - tasks_before
    assert not leftover, leftover
    print(
        f"faults={faults} client_attempts/request={client_mean:.3f} "
        f"server_mean={server['request_ids']['mean_attempts']:.3f} "
        f"retries={stats.retries} step_restarts={sum(o.step_restarts for o in outcomes)} "
        f"failed={failed} elapsed={elapsed:.1f}s min_429_wait={min(waits):.3f}s"
    )
