"""sim-server: prefix-cache hits, simulated prefill, and every fault kind."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest

from agentrt.runtime.testing.sim._sim_engine import SimEngine
from agentrt.testing import SimServer, SimServerConfig
from tests._support.polling import eventually

pytestmark = pytest.mark.anyio

FAST = SimServerConfig(ttft_ms=0, token_ms=0)
TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "required": ["a"],
        },
    },
}


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return False
    return True


def chat(text: str, system: str = "You are a careful agent. " * 30, **kw: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
        **kw,
    }


async def test_shared_prefixes_hit_the_cache() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        first = (await client.post("/v1/chat/completions", json=chat("task one"))).json()
        second = (await client.post("/v1/chat/completions", json=chat("task two"))).json()
        other = (
            await client.post("/v1/chat/completions", json=chat("x", system="different"))
        ).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0.8 * second["usage"]["prompt_tokens"] < cached < second["usage"]["prompt_tokens"]
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] <= 6  # "<|im_start|>system"
    stats = srv.stats()["cache"]
    assert stats["hit_requests"] == 2
    assert stats["hit_tokens"] > 0


async def test_the_next_turn_reuses_the_previous_reply() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        body = chat("call a tool", tools=[TOOL])
        reply = (await client.post("/v1/chat/completions", json=body)).json()
        message = reply["choices"][0]["message"]
        body["messages"] += [
            message,
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "r"},
        ]
        turn2 = (await client.post("/v1/chat/completions", json=body)).json()
    previous = reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    assert turn2["usage"]["prompt_tokens_details"]["cached_tokens"] >= previous - 1


async def test_a_cached_prefix_shortens_prefill(monkeypatch: pytest.MonkeyPatch) -> None:
    prefills: list[float] = []  # the first-token delay of each request
    prefill = SimEngine.prefill

    def recorded(self: SimEngine, prompt_ids: list[int]) -> tuple[int, float]:
        cached, seconds = prefill(self, prompt_ids)
        prefills.append(seconds)
        return cached, seconds

    monkeypatch.setattr(SimEngine, "prefill", recorded)
    cfg = SimServerConfig(ttft_ms=0, token_ms=0, prefill_ms_per_1k=400)
    long_system = "Context sentence with several words. " * 120  # ~600 tokens
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        started = time.perf_counter()
        await client.post("/v1/chat/completions", json=chat("a", system=long_system))
        first = time.perf_counter() - started
        await client.post("/v1/chat/completions", json=chat("b", system=long_system))
    assert prefills[0] > 0.2  # ~600 uncached tokens x 0.4 ms...
    assert first > 0.2  # ...waited for (a floor: load only adds to it)
    assert prefills[1] < prefills[0] / 2  # the second: most of it cached


async def test_429_carries_retry_after_and_503_is_plain() -> None:
    server = SimServer(FAST.model_copy(update={"fault_429": 1.0, "retry_after": 0.25}))
    async with server as srv, httpx.AsyncClient(base_url=srv.url) as client:
        limited = await client.post("/v1/chat/completions", json=chat("x"))
        health = await client.get("/health")  # admin routes never fail
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "0.25"
    assert limited.json()["error"]["type"] == "rate_limit_exceeded"
    assert health.status_code == 200
    async with SimServer(FAST.model_copy(update={"fault_503": 1.0})) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            unavailable = await client.post("/generate", json={"text": "x"})
        assert srv.stats()["faults"]["503"] == 1
    assert unavailable.status_code == 503


async def test_a_hang_holds_the_request_until_the_client_gives_up() -> None:
    async with SimServer(FAST.model_copy(update={"fault_hang": 1.0})) as srv:
        async with httpx.AsyncClient(base_url=srv.url, timeout=0.3) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/v1/chat/completions", json=chat("x"))
        await eventually(lambda: srv.engine.in_flight == 0)  # the client left
        assert srv.stats()["faults"]["hang"] == 1


async def test_cut_streams_lack_done_and_cut_bodies_are_short() -> None:
    async with SimServer(FAST.model_copy(update={"fault_cut": 1.0})) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            seen: list[str] = []

            async def read_stream() -> None:
                body = chat("x", stream=True)
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    async for line in response.aiter_lines():
                        seen.append(line)

            with pytest.raises(httpx.HTTPError):
                await read_stream()
            with pytest.raises(httpx.HTTPError):
                await client.post("/v1/chat/completions", json=chat("x"))
        assert srv.stats()["faults"]["cut"] == 2
    data = [line for line in seen if line.startswith("data: ")]
    assert data
    assert "data: [DONE]" not in data


async def test_malformed_tool_json_is_not_parseable() -> None:
    async with SimServer(FAST.model_copy(update={"fault_bad_tool_json": 1.0})) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            reply = (await client.post("/v1/chat/completions", json=chat("x", tools=[TOOL]))).json()
            text_reply = (await client.post("/v1/chat/completions", json=chat("no tools"))).json()
        assert srv.stats()["faults"]["bad_tool_json"] == 1  # text replies are never corrupted
    arguments = reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    assert text_reply["choices"][0]["message"]["content"]


async def test_a_restart_drops_connections_refuses_then_comes_back() -> None:
    cfg = FAST.model_copy(update={"fault_restart": 1.0, "restart_down_s": 0.3})
    async with SimServer(cfg) as srv:
        srv.engine.cache.insert([1, 2, 3])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.HTTPError):  # this request restarts it...
                await client.post("/generate", json={"text": "warm"})
        assert not port_open(srv.port)  # ...so the port refuses for a while
        assert srv.engine.restarts == 1
        await eventually(lambda: port_open(srv.port))
        assert srv.stats()["cache"]["size_tokens"] == 0  # a restart loses the cache
        async with httpx.AsyncClient(base_url=srv.url) as client:
            assert (await client.get("/health")).status_code == 200
        assert srv.stats()["faults"]["restart"] >= 1


async def test_fault_draws_are_reproducible_from_the_seed() -> None:
    cfg = FAST.model_copy(update={"fault_429": 0.3, "fault_503": 0.3, "seed": 11})

    async def statuses() -> list[int]:
        async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
            return [
                (await client.post("/generate", json={"text": "x"})).status_code for _ in range(20)
            ]

    first, second = await statuses(), await statuses()
    assert first == second
    assert {200, 429, 503} <= set(first)
