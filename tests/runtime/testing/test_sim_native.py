"""sim-server: SGLang's native endpoints, metrics and statistics."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest

from agentrt.runtime.testing._tokens import encode
from agentrt.testing import SimServer, SimServerConfig

pytestmark = pytest.mark.anyio

FAST = SimServerConfig(ttft_ms=0, token_ms=0)


async def sse_data(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[str]:
    async with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        return [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]


async def test_generate_reply_mirrors_sglang() -> None:
    body: dict[str, Any] = {
        "text": "The capital of France is",
        "sampling_params": {"max_new_tokens": 5, "temperature": 0},
        "rid": "req-1",
        "return_logprob": True,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        out = (await client.post("/generate", json=body)).json()
    meta = out["meta_info"]
    assert meta["id"] == "req-1"
    assert meta["finish_reason"] == {"type": "length", "length": 5}
    assert meta["prompt_tokens"] == len(encode(body["text"]))
    assert meta["completion_tokens"] == 5 == len(out["output_ids"])
    assert meta["cached_tokens"] == 0
    triples = meta["output_token_logprobs"]
    assert len(triples) == 5
    assert all(len(t) == 3 for t in triples)
    assert "".join(t[2] for t in triples) == out["text"]
    assert [t[1] for t in triples] == out["output_ids"]
    assert len(meta["output_top_logprobs"][0]) == 2


async def test_generate_with_input_ids_n_and_batches() -> None:
    ids = encode("count these words")
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        by_ids = (
            await client.post(
                "/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 3}}
            )
        ).json()
        many = (
            await client.post(
                "/generate",
                json={"text": "x", "rid": "r", "sampling_params": {"n": 3, "max_new_tokens": 4}},
            )
        ).json()
        batch = (
            await client.post("/generate", json={"text": ["a", "b"], "rid": ["ra", "rb"]})
        ).json()
        no_logprobs = (await client.post("/generate", json={"text": "plain"})).json()
    assert by_ids["meta_info"]["prompt_tokens"] == len(ids)
    assert [o["meta_info"]["id"] for o in many] == ["r_0", "r_1", "r_2"]
    assert len({o["text"] for o in many}) > 1
    assert [o["meta_info"]["id"] for o in batch] == ["ra", "rb"]
    assert "output_token_logprobs" not in no_logprobs["meta_info"]
    assert no_logprobs["meta_info"]["finish_reason"]["type"] == "stop"


async def test_generate_streams_cumulative_text_then_done() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        data = await sse_data(
            client,
            "/generate",
            {"text": "go", "stream": True, "sampling_params": {"max_new_tokens": 4}},
        )
        whole = (
            await client.post(
                "/generate", json={"text": "go", "sampling_params": {"max_new_tokens": 4}}
            )
        ).json()
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    texts = [e["text"] for e in events]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    assert texts[-1] == whole["text"]
    assert [e["meta_info"]["finish_reason"] for e in events[:-1]] == [None] * (len(events) - 1)
    assert events[-1]["meta_info"]["finish_reason"] is not None


async def test_a_streamed_batch_tags_each_prompts_events_with_its_place() -> None:
    """As SGLang: a batch streams too, each event's ``index`` its prompt's
    place (how agentrt sends ``n > 1``: n copies, ids it can abort)."""
    body = {
        "text": ["go", "go"],
        "rid": ["s_0", "s_1"],
        "stream": True,
        "sampling_params": {"max_new_tokens": 3, "temperature": 1.0},
    }
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        data = await sse_data(client, "/generate", body)
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    ids = {e["index"]: e["meta_info"]["id"] for e in events}
    assert ids == {0: "s_0", 1: "s_1"}
    last = {e["index"]: e["text"] for e in events}
    assert last[0] != last[1]  # two samples, not one twice


async def test_generate_with_chat_template_and_tools_answers_tool_call_blocks() -> None:
    prompt = (
        "<|im_start|>system\nsys\n\n# Tools\n<tools>\n"
        '{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
        '"properties": {"a": {"type": "integer"}}, "required": ["a"]}}}\n</tools><|im_end|>\n'
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        out = (await client.post("/generate", json={"text": prompt})).json()
        result = "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>"
        after = f"{prompt}{out['text']}<|im_end|>\n{result}\n<|im_start|>assistant\n"
        final = (await client.post("/generate", json={"text": after})).json()
    assert out["text"].startswith("<tool_call>\n")
    assert out["text"].endswith("</tool_call>")
    payload = out["text"][len("<tool_call>\n") : -len("\n</tool_call>")]
    assert json.loads(payload) == {"name": "f", "arguments": {"a": 1}}
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "<|im_end|>"}
    assert "<tool_call>" not in final["text"]
    assert final["meta_info"]["cached_tokens"] > 0


async def test_admin_endpoints() -> None:
    server = SimServer(FAST.model_copy(update={"model": "m-7b"}))
    async with server as srv, httpx.AsyncClient(base_url=srv.url) as client:
        health = await client.get("/health")
        info = (await client.get("/get_model_info")).json()
        await client.post("/generate", json={"text": "warm the cache"})
        assert srv.engine.cache.size_tokens > 0
        flushed = await client.post("/flush_cache")
        bad = await client.post("/generate", json={"text": "a", "input_ids": [1]})
    assert health.status_code == 200
    assert health.content == b""
    assert info["model_path"] == "m-7b"
    assert info["is_generation"] is True
    assert flushed.status_code == 200
    assert srv.engine.cache.size_tokens == 0
    assert bad.status_code == 400


async def test_metrics_and_stats() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        for _ in range(2):
            await client.post("/generate", json={"text": "same prompt again"})
        await client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers={"X-Request-Id": "abc"},
        )
        text = (await client.get("/metrics")).text
        stats = (await client.get("/sim/stats")).json()
        await client.post("/sim/reset")
        after = (await client.get("/sim/stats")).json()
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['sim:requests_total{path="/generate"}'] == 2
    assert samples["sim:prefix_cache_hits_total"] > 0
    assert samples["sim:prefix_cache_queries_total"] >= samples["sim:prefix_cache_hits_total"]
    assert 0 < samples["sim:cache_hit_rate"] <= 1
    assert samples['sim:faults_injected_total{kind="429"}'] == 0
    assert "# TYPE sim:prefix_cache_hits_total counter" in text
    assert stats["requests"]["/generate"] == 2
    assert stats["request_ids"] == {
        "distinct": 1,
        "attempts": 1,
        "max_attempts": 1,
        "mean_attempts": 1.0,
    }
    assert stats["max_concurrent"] == 1
    assert stats["cache"]["hit_tokens"] > 0
    assert after["requests_total"] == 0
    assert after["cache"]["query_tokens"] == 0
