"""sim-server: the OpenAI-compatible endpoints."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from aiohttp import web

from agentrt.runtime.testing.sim._sim_http import Generation
from agentrt.testing import SimServer, SimServerConfig

pytestmark = pytest.mark.anyio


async def sse_events(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[str]:
    """The data lines of a streamed reply, ``[DONE]`` included."""
    events: list[str] = []
    async with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    return events


def chunks(events: list[str]) -> list[dict[str, Any]]:
    return [json.loads(e) for e in events if e != "[DONE]"]


def assemble_chat(events: list[str]) -> dict[int, dict[str, Any]]:
    """Join OpenAI chat chunks per choice: content, tool calls, finish."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in chunks(events):
        for choice in chunk["choices"]:
            acc = out.setdefault(
                choice["index"], {"content": "", "tool_calls": {}, "finish_reason": None}
            )
            delta = choice["delta"]
            acc["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls", []):
                slot = acc["tool_calls"].setdefault(
                    call["index"], {"id": None, "name": None, "arguments": ""}
                )
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function", {})
                slot["name"] = fn.get("name") or slot["name"]
                slot["arguments"] += fn.get("arguments") or ""
            if choice["finish_reason"]:
                acc["finish_reason"] = choice["finish_reason"]
    return out


FAST = SimServerConfig(ttft_ms=0, token_ms=0)
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "q": {"type": "string"},
                "k": {"type": "integer"},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "opt": {"type": "boolean"},
            },
            "required": ["q", "k", "mode"],
        },
    },
}
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def chat(*messages: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"model": "sim", "messages": list(messages), **kw}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def test_chat_completion_shape_and_usage() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        reply = (await client.post("/v1/chat/completions", json=chat(user("hello")))).json()
    assert reply["object"] == "chat.completion"
    assert reply["model"] == "sim"
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    usage = reply["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] == 16  # reply_tokens
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


async def test_tool_call_then_final_answer_per_tool_rounds() -> None:
    cfg = FAST.model_copy(update={"answer": "answer", "tool_rounds": 2})
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        messages: list[dict[str, Any]] = [user("what is 6*7?")]
        for _ in range(2):
            reply = (
                await client.post("/v1/chat/completions", json=chat(*messages, tools=[SEARCH]))
            ).json()
            message = reply["choices"][0]["message"]
            assert reply["choices"][0]["finish_reason"] == "tool_calls"
            assert message["content"] is None
            call = message["tool_calls"][0]
            assert call["function"]["name"] == "search"
            assert json.loads(call["function"]["arguments"]) == {"q": "x", "k": 1, "mode": "fast"}
            messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
        final = (
            await client.post("/v1/chat/completions", json=chat(*messages, tools=[SEARCH]))
        ).json()
    assert final["choices"][0]["message"]["content"] == "ANSWER: 42"
    assert final["choices"][0]["finish_reason"] == "stop"


async def test_parallel_tool_calls_and_tool_choice() -> None:
    cfg = FAST.model_copy(update={"parallel_tool_calls": 3})
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        post = client.post
        many = (
            await post("/v1/chat/completions", json=chat(user("x"), tools=[SEARCH, LOOKUP]))
        ).json()
        one = (
            await post(
                "/v1/chat/completions",
                json=chat(user("x"), tools=[SEARCH, LOOKUP], parallel_tool_calls=False),
            )
        ).json()
        named = (
            await post(
                "/v1/chat/completions",
                json=chat(
                    user("x"),
                    tools=[SEARCH, LOOKUP],
                    tool_choice={"type": "function", "function": {"name": "lookup"}},
                ),
            )
        ).json()
        none = (
            await post(
                "/v1/chat/completions", json=chat(user("x"), tools=[SEARCH], tool_choice="none")
            )
        ).json()
    names = [c["function"]["name"] for c in many["choices"][0]["message"]["tool_calls"]]
    assert names == ["search", "lookup", "search"]
    assert len({c["id"] for c in many["choices"][0]["message"]["tool_calls"]}) == 3
    assert len(one["choices"][0]["message"]["tool_calls"]) == 1
    assert [c["function"]["name"] for c in named["choices"][0]["message"]["tool_calls"]] == [
        "lookup"
    ]
    assert "tool_calls" not in none["choices"][0]["message"]


async def test_n_logprobs_and_seeded_determinism() -> None:
    body = chat(user("tell me"), n=3, logprobs=True, top_logprobs=2, seed=5)
    async with SimServer(FAST) as a, SimServer(FAST) as b, httpx.AsyncClient() as client:
        one = (await client.post(f"{a.url}/v1/chat/completions", json=body)).json()
        two = (await client.post(f"{b.url}/v1/chat/completions", json=body)).json()
        other_seed = (
            await client.post(f"{a.url}/v1/chat/completions", json={**body, "seed": 6})
        ).json()
        greedy = (
            await client.post(f"{a.url}/v1/chat/completions", json={**body, "temperature": 0})
        ).json()
    texts = [c["message"]["content"] for c in one["choices"]]
    assert texts == [c["message"]["content"] for c in two["choices"]]
    assert len(set(texts)) > 1  # samples differ at temperature 1
    assert texts != [c["message"]["content"] for c in other_seed["choices"]]
    assert len({c["message"]["content"] for c in greedy["choices"]}) == 1
    entry = one["choices"][0]["logprobs"]["content"][0]
    assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
    assert len(entry["top_logprobs"]) == 2
    assert entry["logprob"] < 0
    assert one["usage"]["completion_tokens"] == 3 * 16


async def test_streamed_chat_assembles_like_the_plain_reply() -> None:
    body = chat(user("stream please"), seed=1)
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        plain = (await client.post("/v1/chat/completions", json=body)).json()
        events = await sse_events(
            client,
            "/v1/chat/completions",
            {**body, "stream": True, "stream_options": {"include_usage": True}},
        )
    assert events[-1] == "[DONE]"
    parsed = chunks(events)
    assert all(c["object"] == "chat.completion.chunk" for c in parsed)
    assert parsed[0]["choices"][0]["delta"]["role"] == "assistant"
    assembled = assemble_chat(events)[0]
    assert assembled["content"] == plain["choices"][0]["message"]["content"]
    assert assembled["finish_reason"] == "stop"
    assert parsed[-1]["choices"] == []
    assert parsed[-1]["usage"]["completion_tokens"] == 16


async def test_streamed_tool_calls_arrive_as_deltas() -> None:
    cfg = FAST.model_copy(update={"parallel_tool_calls": 2})
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        events = await sse_events(
            client, "/v1/chat/completions", chat(user("go"), tools=[SEARCH], stream=True)
        )
    calls = assemble_chat(events)[0]
    assert calls["finish_reason"] == "tool_calls"
    assert sorted(calls["tool_calls"]) == [0, 1]
    for slot in calls["tool_calls"].values():
        assert slot["name"] == "search"
        assert slot["id"]
        assert json.loads(slot["arguments"]) == {"q": "x", "k": 1, "mode": "fast"}
    pieces = [
        c for c in chunks(events) if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    assert len(pieces) > 4  # arguments come in several pieces


async def test_latency_follows_ttft_and_token_time(monkeypatch: pytest.MonkeyPatch) -> None:
    held: list[float] = []
    deliver = Generation.json

    async def recorded(self: Generation, body: bytes, delay_s: float) -> web.StreamResponse:
        held.append(delay_s)
        return await deliver(self, body, delay_s)

    monkeypatch.setattr(Generation, "json", recorded)
    cfg = SimServerConfig(ttft_ms=80, token_ms=5, reply_tokens=11)
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        await client.get("/health")
        started = time.perf_counter()
        await client.post("/v1/chat/completions", json=chat(user("time me")))
        elapsed = time.perf_counter() - started
    # The reply is held 80 ms + 10 x 5 ms...
    assert held == [pytest.approx(0.080 + 10 * 0.005)]
    # ...and not sent sooner: a floor, which load only raises (uvloop's
    # millisecond timers may wake a sleep a little early).
    assert elapsed >= 0.115


async def test_text_completions_and_models() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        reply = (
            await client.post(
                "/v1/completions", json={"prompt": "Once upon", "max_tokens": 4, "logprobs": 2}
            )
        ).json()
        batch = (
            await client.post(
                "/v1/completions", json={"prompt": ["a", "b"], "n": 2, "max_tokens": 3}
            )
        ).json()
        events = await sse_events(
            client, "/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": True}
        )
        models = (await client.get("/v1/models")).json()
    choice = reply["choices"][0]
    assert reply["object"] == "text_completion"
    assert choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 4
    assert len(choice["logprobs"]["tokens"]) == 4
    assert len(choice["logprobs"]["top_logprobs"][0]) == 2
    assert sorted(c["index"] for c in batch["choices"]) == [0, 1, 2, 3]
    assert events[-1] == "[DONE]"
    streamed = [c["choices"][0]["text"] for c in chunks(events)]
    assert len(streamed) == 3
    assert all(streamed)
    assert models["data"][0]["id"] == "sim"
    assert models["object"] == "list"


async def test_bad_requests_get_openai_errors() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        garbage = await client.post("/v1/chat/completions", content=b"{not json")
        unknown = await client.post(
            "/v1/chat/completions", json={**chat(user("x")), "model": "gpt-9"}
        )
        bad_n = await client.post("/v1/chat/completions", json=chat(user("x"), n=0))
    assert garbage.status_code == 400
    assert "invalid chat completion request" in garbage.json()["error"]["message"]
    assert unknown.status_code == 404
    assert "gpt-9" in unknown.json()["error"]["message"]
    assert bad_n.status_code == 400
