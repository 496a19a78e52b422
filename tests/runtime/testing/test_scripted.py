"""ScriptedBackend: deterministic replies, tool calls, faults, streaming."""

from __future__ import annotations

import contextlib
import json

import anyio
import pytest

from agentrt.protocols import ModelRequest, SamplingParams, ToolSpec, Usage, UserMessage
from agentrt.runtime.kernel._errors import (
    BackendUnavailable,
    ConfigError,
    RateLimited,
    UnknownModelError,
)
from agentrt.runtime.models._backend import ModelBackend, StreamDelta
from agentrt.runtime.models.sglang._sglang_template import render_chat
from agentrt.runtime.testing._tokens import count_tokens
from agentrt.testing import (
    ReplySpec,
    ScriptedBackend,
    ScriptedReply,
    ScriptedToolCall,
    ScriptExhausted,
)

pytestmark = pytest.mark.anyio


def ask(text: str = "hi", **kw: object) -> ModelRequest:
    return ModelRequest(messages=[UserMessage(text)], **kw)  # type: ignore[arg-type]


async def test_it_is_a_model_backend_that_records_requests() -> None:
    backend = ScriptedBackend(["one", "two"], name="fake", models=["m1", "m2"])
    assert isinstance(backend, ModelBackend)
    async with backend:
        first = await backend.complete(ask("a"))
        second = await backend.complete(ask("b", model="m2", request_id="r9"))
    assert [first.message.content, second.message.content] == ["one", "two"]
    assert (first.model, second.model, second.request_id) == ("m1", "m2", "r9")
    assert second.backend == "fake"
    assert [r.messages[0] for r in backend.requests] == [UserMessage("a"), UserMessage("b")]
    assert backend.consumed == 2


async def test_tool_calls_including_parallel_and_malformed_arguments() -> None:
    script: list[ReplySpec] = [
        ScriptedToolCall("search", {"q": "x"}),
        [ScriptedToolCall("a", "{}", id="id-a"), ScriptedToolCall("b", '{"broken": ')],
    ]
    backend = ScriptedBackend(script)
    one = await backend.complete(ask())
    two = await backend.complete(ask())
    call = one.message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("search", {"q": "x"})
    assert one.choices[0].finish_reason == "tool_calls"
    assert two.message.tool_calls[0].id == "id-a"
    with pytest.raises(json.JSONDecodeError):
        json.loads(two.message.tool_calls[1].function.arguments)


async def test_n_samples_consume_the_script_in_order() -> None:
    backend = ScriptedBackend(["x", "y", "z"])
    reply = await backend.complete(ask(n=3))
    assert [c.message.content for c in reply.choices] == ["x", "y", "z"]
    assert [c.index for c in reply.choices] == [0, 1, 2]


async def test_a_callable_script_sees_each_request() -> None:
    backend = ScriptedBackend(lambda req: f"echo {req.messages[-1].content}")
    reply = await backend.complete(ask("ping"))
    assert reply.message.content == "echo ping"


async def test_exhaustion_policies() -> None:
    backend = ScriptedBackend(["only"])
    await backend.complete(ask())
    with pytest.raises(ScriptExhausted, match="exhausted after 1"):
        await backend.complete(ask())
    repeat = ScriptedBackend(["a", "b"], on_exhausted="repeat_last")
    cycle = ScriptedBackend(["a", "b"], on_exhausted="cycle")
    assert [(await repeat.complete(ask())).message.content for _ in range(3)] == ["a", "b", "b"]
    assert [(await cycle.complete(ask())).message.content for _ in range(3)] == ["a", "b", "a"]


async def test_usage_is_counted_with_the_documented_tokenizer() -> None:
    backend = ScriptedBackend(["three word reply", ScriptedReply(usage=Usage(prompt_tokens=7))])
    request = ask("count me", tools=[ToolSpec(name="t")])
    reply = await backend.complete(request)
    assert reply.usage.prompt_tokens == count_tokens(render_chat(request.messages, request.tools))
    assert reply.usage.completion_tokens == 3
    given = await backend.complete(request)
    assert given.usage == Usage(prompt_tokens=7)


async def test_injected_exceptions_are_raised_after_the_latency() -> None:
    backend = ScriptedBackend([RateLimited("slow down", retry_after=1.5)], latency_s=0.05)
    started = anyio.current_time()
    with pytest.raises(RateLimited) as caught:
        await backend.complete(ask())
    assert caught.value.retry_after == 1.5
    assert anyio.current_time() - started >= 0.045
    assert backend.in_flight == 0


async def test_a_bad_script_item_is_a_config_error() -> None:
    backend = ScriptedBackend([42])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="int"):
        await backend.complete(ask())


async def test_logprobs_are_synthetic_and_deterministic() -> None:
    request = ask(logprobs=True, top_logprobs=2)
    a = await ScriptedBackend(["the same words"]).complete(request)
    b = await ScriptedBackend(["the same words"]).complete(request)
    lps = a.choices[0].logprobs
    assert lps is not None
    assert [t.token for t in lps] == ["the", " same", " words"]
    assert all(len(t.top) == 2 and t.top[0].token == t.token for t in lps)
    assert lps == b.choices[0].logprobs
    plain = await ScriptedBackend(["x"]).complete(ask())
    assert plain.choices[0].logprobs is None


async def collect(backend: ScriptedBackend, request: ModelRequest) -> list[StreamDelta]:
    async with contextlib.aclosing(backend.stream(request)) as stream:
        return [delta async for delta in stream]


async def test_streaming_yields_pieces_then_the_reply() -> None:
    script: list[ReplySpec] = [
        ScriptedReply(content="hello there", reasoning="think"),
        ScriptedToolCall("search", {"q": "abc"}),
    ]
    backend = ScriptedBackend(script)
    deltas = await collect(backend, ask())
    assert "".join(d.content for d in deltas) == "hello there"
    assert deltas[0].reasoning == "think"
    final = deltas[-1].reply
    assert final is not None
    assert final.message.content == "hello there"
    tools = await collect(backend, ask())
    head = [d for d in tools if d.tool_name]
    assert head[0].tool_name == "search"
    assert head[0].tool_call_id
    args = "".join(d.tool_arguments for d in tools)
    assert json.loads(args) == {"q": "abc"}


async def test_a_reply_error_cuts_the_stream_after_its_content() -> None:
    backend = ScriptedBackend([ScriptedReply(content="partial", error=BackendUnavailable("cut"))])
    seen: list[str] = []

    async def consume() -> None:
        async with contextlib.aclosing(backend.stream(ask())) as stream:
            async for delta in stream:
                seen.append(delta.content)

    with pytest.raises(BackendUnavailable, match="cut"):
        await consume()
    assert "".join(seen) == "partial"
    assert backend.in_flight == 0


async def test_cancellation_leaves_nothing_running() -> None:
    backend = ScriptedBackend(["late"], latency_s=10)
    with anyio.move_on_after(0.05) as scope:
        await backend.complete(ask())
    assert scope.cancelled_caught
    assert backend.in_flight == 0
    assert len(backend.requests) == 1


async def test_unknown_model_and_closed_backend_fail_clearly() -> None:
    backend = ScriptedBackend(["x"], models=["small"])
    with pytest.raises(UnknownModelError, match="'large'"):
        await backend.complete(ask(model="large"))
    async with backend:
        pass
    with pytest.raises(BackendUnavailable, match="closed"):
        await backend.complete(ask())
    with pytest.raises(RuntimeError, match="reopened"):
        async with backend:
            pass


async def test_temperature_and_seed_do_not_change_a_script() -> None:
    backend = ScriptedBackend(["fixed"], on_exhausted="repeat_last")
    hot = await backend.complete(ask(sampling=SamplingParams(temperature=1.5, seed=3)))
    cold = await backend.complete(ask(sampling=SamplingParams(temperature=0)))
    assert hot.message == cold.message
