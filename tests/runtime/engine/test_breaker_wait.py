"""A model server that goes down for a moment, through the public API: the
backend's circuit breaker opens, and the runs wait for its probe instead of
failing (``BreakerConfig.wait``, the default); with ``wait = False`` the
same outage fails runs (the behaviour the daemon-under-abuse issue measured:
3 of 200 runs failed on one trip although the backend came back in 5 s)."""

from __future__ import annotations

import time

import anyio
import httpx
import pytest

from agentrt import Runtime
from agentrt.protocols import RunResult, ScalingSpec
from agentrt.runtime.models._retry import BreakerConfig, RetryPolicy
from agentrt.runtime.models.http._http_client import make_transport
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator
from tests._support.backends import sim_backend

pytestmark = pytest.mark.anyio

RUNS = 24
OUTAGE_S = 0.8


class Outage(httpx.AsyncBaseTransport):
    """503 for every request in the first ``seconds`` after the first one."""

    def __init__(self, seconds: float) -> None:
        self._inner = make_transport()
        self._seconds = seconds
        self._began: float | None = None
        self.refused = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        now = time.monotonic()
        if self._began is None:
            self._began = now
        if now - self._began < self._seconds:
            self.refused += 1
            return httpx.Response(503, json={"error": {"message": "down"}}, request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _runs(wait: bool) -> tuple[list[RunResult], Outage, int]:
    sim = SimServerConfig(ttft_ms=2, token_ms=0, answer="answer", tool_rounds=1)
    transport = Outage(OUTAGE_S)
    async with SimServer(sim) as server:
        backend = sim_backend(
            server,
            "b",
            ["sim"],
            transport=transport,
            retry=RetryPolicy(),
            breaker=BreakerConfig(failure_threshold=3, cooldown_s=0.3, wait=wait),
        )
        results: list[RunResult] = []
        async with backend, Runtime(backends=[backend], tools=[Calculator()]) as rt:

            async def one(i: int) -> None:
                await anyio.sleep(i * 0.02)  # arrivals spread over the outage
                results.append(await rt.run(f"What is {i} + 1?", scaling=ScalingSpec(rollouts=1)))

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for i in range(RUNS):
                        tg.start_soon(one, i)
        waits = backend.stats.breaker_waits
    return results, transport, waits


async def test_runs_wait_out_an_outage_behind_an_open_breaker() -> None:
    results, transport, waits = await _runs(wait=True)
    assert transport.refused >= 3  # the outage happened and tripped the breaker
    assert waits >= 1
    failed = [r.error for r in results if r.status != "succeeded"]
    assert failed == [], failed


async def test_without_waiting_the_same_outage_fails_runs() -> None:
    results, transport, _ = await _runs(wait=False)
    assert transport.refused >= 3
    assert any(r.status != "succeeded" for r in results)
