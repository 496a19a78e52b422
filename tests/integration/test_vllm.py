"""agentrt's OpenAI-compatible backend against a real vLLM server (CPU build).

The server (``vllm_server`` in conftest.py) serves SmolLM2-135M-Instruct.
Usage is checked against the server's own tokenizer (``POST /tokenize``)
and per-token logprobs, and prefix caching against its Prometheus counters
``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

import anyio
import httpx
import msgspec
import pytest

from agentrt.protocols import (
    ChatMessage,
    ModelReply,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    UserMessage,
)
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.wire._chat_parts import wire_messages
from agentrt.runtime.wire._common import encoder

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.anyio,
    # The first test also pays for starting the server (about 100 s here).
    pytest.mark.timeout(1200),
]


class VllmServer(Protocol):
    """What the ``vllm_server`` fixture (conftest.py) provides."""

    base_url: str
    model: str


_METRIC = re.compile(r"^(vllm:[a-z_]+)\{([^}]*)\}\s+(\S+)$", re.MULTILINE)


@pytest.fixture
async def backend(vllm_server: VllmServer) -> AsyncIterator[OpenAIBackend]:
    config = OpenAIBackendConfig(
        name="vllm-smol", base_url=vllm_server.base_url + "/v1", models=[vllm_server.model]
    )
    async with OpenAIBackend(config) as opened:
        yield opened


@pytest.fixture
async def server_http(vllm_server: VllmServer) -> AsyncIterator[httpx.AsyncClient]:
    """A plain client for the server's own endpoints (/tokenize, /metrics)."""
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=60.0) as client:
        yield client


def chat(*messages: ChatMessage, **fields: Any) -> ModelRequest:
    sampling = fields.pop("sampling", SamplingParams(temperature=0.0, max_tokens=24))
    return ModelRequest(messages=list(messages), sampling=sampling, **fields)


async def prompt_tokens(
    client: httpx.AsyncClient, model: str, messages: list[ChatMessage]
) -> list[int]:
    """The token ids the server's chat template and tokenizer make of ``messages``."""
    response = await client.post(
        "/tokenize",
        json={
            "model": model,
            # Exactly what the backend sends for these messages.
            "messages": msgspec.json.decode(encoder.encode(wire_messages(messages))),
            "add_generation_prompt": True,
        },
    )
    response.raise_for_status()
    tokens: list[int] = response.json()["tokens"]
    assert len(tokens) == response.json()["count"]
    return tokens


async def metrics(client: httpx.AsyncClient) -> dict[str, tuple[str, float]]:
    """vLLM's metric samples by name: (labels, value) of the first sample."""
    response = await client.get("/metrics")
    response.raise_for_status()
    found: dict[str, tuple[str, float]] = {}
    for name, labels, value in _METRIC.findall(response.text):
        found.setdefault(name, (labels, float(value)))
    return found


async def test_completion_usage_matches_the_servers_tokenizer(
    backend: OpenAIBackend, server_http: httpx.AsyncClient, vllm_server: VllmServer
) -> None:
    messages: list[ChatMessage] = [UserMessage(content="Say hello in five words.")]
    reply = await backend.complete(chat(*messages, logprobs=True))
    assert reply.model == vllm_server.model
    assert reply.backend == "vllm-smol"
    assert reply.latency_s > 0
    [choice] = reply.choices
    assert choice.message.content
    expected_prompt = await prompt_tokens(server_http, vllm_server.model, messages)
    assert reply.usage.prompt_tokens == len(expected_prompt)
    # One logprob per generated token (the end-of-turn token included).
    assert choice.logprobs is not None
    assert reply.usage.completion_tokens == len(choice.logprobs)
    assert 1 <= reply.usage.completion_tokens <= 24
    if choice.finish_reason == "stop":
        assert choice.logprobs[-1].token == "<|im_end|>"
    else:
        assert choice.finish_reason == "length"
        assert reply.usage.completion_tokens == 24


async def test_streaming_assembles_the_same_reply(backend: OpenAIBackend) -> None:
    request = chat(UserMessage(content="Name three colours."))
    deltas: list[StreamDelta] = []
    async with aclosing(backend.stream(request)) as stream:
        async for delta in stream:
            deltas.append(delta)
    final = deltas[-1].reply
    assert final is not None
    assert all(d.reply is None for d in deltas[:-1])
    text_deltas = [d.content for d in deltas[:-1] if d.content]
    assert len(text_deltas) >= 2  # streamed in pieces, not in one block
    assert "".join(text_deltas) == final.message.content
    # Greedy decoding: the non-streamed reply is the same text and usage.
    whole = await backend.complete(request)
    assert whole.message.content == final.message.content
    assert whole.usage.prompt_tokens == final.usage.prompt_tokens
    assert whole.usage.completion_tokens == final.usage.completion_tokens
    assert final.usage.prompt_tokens > 0
    assert final.usage.completion_tokens > 0


async def test_n_sampling_returns_n_choices_and_counts_each(
    backend: OpenAIBackend, server_http: httpx.AsyncClient, vllm_server: VllmServer
) -> None:
    messages: list[ChatMessage] = [UserMessage(content="Write one sentence about the sea.")]
    request = chat(
        *messages,
        n=4,
        logprobs=True,
        sampling=SamplingParams(temperature=1.0, max_tokens=20, seed=7),
    )
    reply = await backend.complete(request)
    assert sorted(c.index for c in reply.choices) == [0, 1, 2, 3]
    texts = [c.message.content or "" for c in reply.choices]
    assert all(texts)
    assert len(set(texts)) >= 2  # sampled, not four copies of one answer
    # The prompt is counted once; completion tokens are summed over choices.
    assert reply.usage.prompt_tokens == len(
        await prompt_tokens(server_http, vllm_server.model, messages)
    )
    per_choice = [len(c.logprobs or []) for c in reply.choices]
    assert all(1 <= n <= 20 for n in per_choice)
    assert reply.usage.completion_tokens == sum(per_choice)


async def test_prefix_cache_hits_when_rollouts_share_a_prefix(
    backend: OpenAIBackend, server_http: httpx.AsyncClient, vllm_server: VllmServer
) -> None:
    fan_out = 4
    nonce = uuid.uuid4().hex  # a prefix no earlier request has warmed
    system = SystemMessage(
        content=f"Session {nonce}. "
        + " ".join(f"Rule {i}: answer briefly and check item {i} twice." for i in range(45))
    )
    questions = [f"Question {i}: which rule is the most important?" for i in range(fan_out + 1)]

    # The shared prefix in tokens, and what the cache can reuse of it: whole
    # blocks only.
    token_lists = [
        await prompt_tokens(server_http, vllm_server.model, [system, UserMessage(content=q)])
        for q in questions[:2]
    ]
    shared = 0
    for a, b in zip(*token_lists, strict=False):
        if a != b:
            break
        shared += 1
    before = await metrics(server_http)
    labels, _ = before["vllm:cache_config_info"]
    block = int(re.search(r'(?:^|,)block_size="(\d+)"', labels).group(1))  # type: ignore[union-attr]
    reusable = shared // block * block
    assert reusable >= block, f"shared prefix of {shared} tokens is shorter than a block"

    sampling = SamplingParams(temperature=0.0, max_tokens=4)
    warm = await backend.complete(
        chat(system, UserMessage(content=questions[0]), sampling=sampling)
    )
    warmed = await metrics(server_http)

    replies: list[ModelReply] = []

    async def rollout(question: str) -> None:
        replies.append(
            await backend.complete(chat(system, UserMessage(content=question), sampling=sampling))
        )

    async with anyio.create_task_group() as tg:
        for question in questions[1:]:
            tg.start_soon(rollout, question)
    after = await metrics(server_http)

    queries = (
        after["vllm:prefix_cache_queries_total"][1] - warmed["vllm:prefix_cache_queries_total"][1]
    )
    hits = after["vllm:prefix_cache_hits_total"][1] - warmed["vllm:prefix_cache_hits_total"][1]
    assert len(replies) == fan_out
    assert queries >= sum(r.usage.prompt_tokens for r in replies)
    assert hits >= fan_out * reusable
    assert hits <= queries
    # Usage reports the cached part of each prompt, block-aligned.
    assert warm.usage.cached_prompt_tokens < block  # the warm-up found nothing
    for reply in replies:
        assert reply.usage.cached_prompt_tokens >= reusable
        assert reply.usage.cached_prompt_tokens % block == 0


async def test_models_endpoint_lists_the_served_name(
    backend: OpenAIBackend, vllm_server: VllmServer
) -> None:
    assert await backend.served_models() == [vllm_server.model]
