"""sim-server: reply lengths drawn per request (``reply_tokens_max``), and
the generations it counts as completed or abandoned (``/sim/stats``)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.testing.sim._sim_config import parse_args
from agentrt.testing import SimServer, SimServerConfig
from tests._support.polling import eventually

pytestmark = pytest.mark.anyio

FAST = SimServerConfig(ttft_ms=0, token_ms=0)


def chat(text: str, **kw: Any) -> dict[str, Any]:
    return {"model": "sim", "messages": [{"role": "user", "content": text}], **kw}


async def completion_tokens(client: httpx.AsyncClient, text: str, **kw: Any) -> int:
    reply = (await client.post("/v1/chat/completions", json=chat(text, **kw))).json()
    tokens: int = reply["usage"]["completion_tokens"]
    return tokens


async def test_reply_lengths_vary_within_the_range_and_repeat_per_request() -> None:
    cfg = FAST.model_copy(update={"reply_tokens": 3, "reply_tokens_max": 40})
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        lengths = [await completion_tokens(client, f"task {i}") for i in range(30)]
        again = [await completion_tokens(client, f"task {i}") for i in range(30)]
        capped = await completion_tokens(client, "task 0", max_tokens=2)
        usage = srv.stats()["tokens"]
    assert all(3 <= n <= 40 for n in lengths)
    assert len(set(lengths)) > 5  # drawn, not fixed
    assert again == lengths  # the same request gets the same length
    assert capped == 2
    assert usage["completion"] == 2 * sum(lengths) + 2


async def test_answer_replies_are_padded_and_still_end_with_the_answer() -> None:
    cfg = FAST.model_copy(update={"answer": "answer", "reply_tokens": 1, "reply_tokens_max": 60})
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        replies = [
            (await client.post("/v1/chat/completions", json=chat(f"{i} + 2"))).json()
            for i in range(20)
        ]
    lengths = {r["usage"]["completion_tokens"] for r in replies}
    assert len(lengths) > 3
    assert max(lengths) > 10
    for i, reply in enumerate(replies):
        content = reply["choices"][0]["message"]["content"]
        assert content.endswith(f"ANSWER: {i + 2}")
        assert content.count("ANSWER:") == 1


async def test_without_a_maximum_replies_keep_their_fixed_length() -> None:
    cfg = FAST.model_copy(update={"answer": "answer"})
    async with SimServer(cfg) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        reply = (await client.post("/v1/chat/completions", json=chat("2 + 2"))).json()
        text_len = await completion_tokens(client, "anything")  # answer mode: "ANSWER: x"
    assert reply["choices"][0]["message"]["content"] == "ANSWER: 4"
    assert text_len == 3


def test_the_maximum_is_checked_and_is_a_flag() -> None:
    with pytest.raises(ValueError, match=r"reply_tokens_max \(4\) must be >= reply_tokens \(8\)"):
        SimServerConfig(reply_tokens=8, reply_tokens_max=4)
    cfg = SimServerConfig(reply_tokens=2, reply_tokens_max=50)
    assert "--reply-tokens-max" in cfg.to_argv()
    assert parse_args(cfg.to_argv()) == cfg
    with pytest.raises(ConfigError, match="--reply-tokens-max"):
        parse_args(["--reply-tokens-max", "0"])


async def test_completed_and_abandoned_generations_are_counted() -> None:
    # A long prompt takes 2 s to prefill, a short one a few ms.
    cfg = FAST.model_copy(update={"prefill_ms_per_1k": 2_000})
    async with SimServer(cfg) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with anyio.move_on_after(0.3):  # the client gives up on a slow reply
                await client.post("/v1/chat/completions", json=chat("long " * 1_000))
        await eventually(lambda: srv.engine.in_flight == 0)
        async with httpx.AsyncClient(base_url=srv.url) as client:
            served = await client.post("/v1/chat/completions", json=chat("short"))
        stats = srv.stats()
    assert served.status_code == 200
    assert stats["requests"]["/v1/chat/completions"] == 2
    assert stats["generations"] == {"completed": 1, "abandoned": 1}
    # Only the served request's tokens are counted.
    assert stats["tokens"]["prompt"] == served.json()["usage"]["prompt_tokens"]


async def test_reset_zeroes_the_generation_counts() -> None:
    async with SimServer(FAST) as srv, httpx.AsyncClient(base_url=srv.url) as client:
        await client.post("/v1/chat/completions", json=chat("x"))
        assert srv.stats()["generations"]["completed"] == 1
        await client.post("/sim/reset")
        assert srv.stats()["generations"] == {"completed": 0, "abandoned": 0}
