"""The SGLang-native backend against in-process sim-servers."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import httpx
import pytest
from aiohttp import web

from agentrt.protocols import (
    ModelRequest,
    SamplingParams,
    SystemMessage,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import (
    BackendUnavailable,
    InvalidRequestError,
    MalformedReply,
    RateLimited,
    UnknownModelError,
)
from agentrt.runtime.models._backend import ModelBackend, StreamDelta
from agentrt.runtime.models._retry import RetryPolicy
from agentrt.runtime.models.sglang._sglang_backend import (
    SGLangBackend,
    SGLangBackendConfig,
    affinity_key,
)
from agentrt.runtime.models.sglang._sglang_wire import (
    GenerateOutput,
    StreamAssembly,
    build_payload,
    forced_tool_call,
    outputs_to_reply,
)
from agentrt.runtime.testing._tokens import encode
from agentrt.testing import SimServer, SimServerConfig
from tests.runtime.models._loopback import loopback_server

pytestmark = pytest.mark.anyio

FAST = SimServerConfig(ttft_ms=0, token_ms=0, answer="answer")
QUICK_RETRY = RetryPolicy(base_delay_s=0.01, max_delay_s=0.05, deadline_s=10)
SEARCH = ToolSpec(
    name="search",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def backend(*urls: str, **kw: Any) -> SGLangBackend:
    options: dict[str, Any] = {"health_interval_s": 0, "retry": QUICK_RETRY, **kw}
    return SGLangBackend(SGLangBackendConfig(urls=list(urls), **options))


def ask(
    task: str = "what is 2+3?", system: str = "You are terse. " * 20, **kw: Any
) -> ModelRequest:
    return ModelRequest(messages=[SystemMessage(system), UserMessage(task)], **kw)


async def test_completion_with_logprobs_and_server_usage() -> None:
    async with SimServer(FAST) as srv, backend(srv.url) as sg:
        assert isinstance(sg, ModelBackend)
        assert sg.models == ["sim"]  # read from /get_model_info
        reply = await sg.complete(ask(logprobs=True, top_logprobs=2))
        stats = srv.stats()["tokens"]
    assert reply.message.content == "ANSWER: 5"
    assert reply.model == "sim"
    assert reply.backend == "sglang"
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None
    assert "".join(t.token for t in logprobs) == "ANSWER: 5"
    assert all(len(t.top) == 2 and t.logprob < 0 for t in logprobs)
    assert reply.usage.prompt_tokens == stats["prompt"]
    assert reply.usage.completion_tokens == stats["completion"] == 3
    assert reply.latency_s > 0


async def test_rid_passes_through_and_raw_generate_takes_input_ids() -> None:
    async with SimServer(FAST) as srv, backend(srv.url) as sg:
        await sg.complete(ask(request_id="run-1/step-3"))
        ids = encode("raw prompt words")
        outputs = await sg.generate(
            {"input_ids": ids, "rid": "raw-1", "sampling_params": {"max_new_tokens": 2}}
        )
        with pytest.raises(InvalidRequestError, match="does not stream"):
            await sg.generate({"text": "x", "stream": True})
    assert srv.engine.attempts["run-1/step-3"] == 1
    assert outputs[0].meta_info.id == "raw-1"
    assert outputs[0].meta_info.prompt_tokens == len(ids)
    assert outputs[0].meta_info.completion_tokens == 2


async def test_tool_calls_round_trip_through_the_template() -> None:
    async with SimServer(FAST) as srv, backend(srv.url) as sg:
        first = await sg.complete(ask("what is 6*7?", tools=[SEARCH]))
        call = first.message.tool_calls[0]
        messages = [
            *ask("what is 6*7?").messages,
            first.message,
            ToolMessage("42", tool_call_id=call.id),
        ]
        final = await sg.complete(ModelRequest(messages=messages, tools=[SEARCH]))
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "search"
    assert json.loads(call.function.arguments) == {"q": "x"}
    assert final.message.content == "ANSWER: 42"
    assert final.usage.cached_prompt_tokens > first.usage.prompt_tokens // 2


async def test_malformed_tool_json_reaches_the_caller_unparsed() -> None:
    bad_json = SimServer(FAST.model_copy(update={"fault_bad_tool_json": 1.0}))
    async with bad_json as srv, backend(srv.url) as sg:
        reply = await sg.complete(ask(tools=[SEARCH]))
    call = reply.message.tool_calls[0]
    assert call.function.name == "search"
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.function.arguments)


async def collect(sg: SGLangBackend, request: ModelRequest) -> list[StreamDelta]:
    async with contextlib.aclosing(sg.stream(request)) as stream:
        return [delta async for delta in stream]


async def test_streaming_text_and_tool_calls() -> None:
    cfg = SimServerConfig(ttft_ms=0, token_ms=0)
    async with SimServer(cfg) as srv, backend(srv.url) as sg:
        text = await collect(sg, ask("talk", logprobs=True))
        tools = await collect(sg, ask("call", tools=[SEARCH]))
        many = await collect(sg, ask("n", n=2))
    final = text[-1].reply
    assert final is not None
    assert "".join(d.content for d in text) == final.message.content
    assert len([d for d in text if d.content]) > 3
    assert sum(len(d.logprobs) for d in text) == final.usage.completion_tokens
    heads = [d for d in tools if d.tool_name]
    assert [d.tool_name for d in heads] == ["search"]
    assert json.loads(heads[0].tool_arguments) == {"q": "x"}
    assert not any("<tool_call>" in d.content for d in tools)
    tool_reply = tools[-1].reply
    assert tool_reply is not None
    assert tool_reply.message.tool_calls[0].id == heads[0].tool_call_id
    two = many[-1].reply
    assert two is not None
    assert len(two.choices) == 2
    for index in (0, 1):
        joined = "".join(d.content for d in many if d.index == index and d.reply is None)
        assert joined == two.choices[index].message.content


async def test_one_run_sticks_to_a_replica_and_runs_spread() -> None:
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(SimServer(FAST)) for _ in range(3)]
        sg = await stack.enter_async_context(backend(*(s.url for s in servers)))
        messages: list[Any] = list(ask("a long task").messages)
        for step in range(4):
            reply = await sg.complete(ModelRequest(messages=messages, affinity_key="run-A"))
            messages += [reply.message, UserMessage(f"continue {step}")]
        home = sg.replica_for("run-A")
        for run in ("run-B", "run-C"):
            await sg.complete(ask("another task", affinity_key=run))
        homes = {sg.replica_for(run) for run in ("run-A", "run-B", "run-C")}
        by_url = {s.url: s.stats() for s in servers}
    assert len(homes) == 3  # new runs spread over the idle replicas
    assert home is not None
    assert by_url[home]["requests"]["/generate"] == 4
    assert by_url[home]["cache"]["hit_requests"] == 3  # every later step hit the cache
    assert by_url[home]["cache"]["hit_tokens"] > 0


async def test_without_a_key_the_shared_prefix_decides() -> None:
    same_task = [ask("task X"), ask("task X", sampling=SamplingParams(temperature=0))]
    assert affinity_key(same_task[0]) == affinity_key(same_task[1])
    assert affinity_key(ask("task X")) != affinity_key(ask("task Y"))
    assert affinity_key(ask(affinity_key="run-9")) == "run-9"
    async with SimServer(FAST) as a, SimServer(FAST) as b, backend(a.url, b.url) as sg:
        for request in same_task:
            await sg.complete(request)
    assert sorted(
        [a.stats()["requests"].get("/generate", 0), b.stats()["requests"].get("/generate", 0)]
    ) == [0, 2]


async def test_a_replica_going_down_fails_over() -> None:
    async with SimServer(FAST) as keeper:
        doomed = SimServer(FAST)
        await doomed.__aenter__()
        sg = backend(doomed.url, keeper.url)
        async with sg:
            await sg.complete(ask(affinity_key="run-A"))
            assert sg.replica_for("run-A") == doomed.url
            await doomed.__aexit__(None, None, None)
            reply = await sg.complete(ask(affinity_key="run-A"))
            health = await sg.health()
        assert reply.message.content == "ANSWER: 5"
        assert sg.replica_for("run-A") == keeper.url
        assert health == {doomed.url: False, keeper.url: True}
        assert keeper.stats()["requests"]["/generate"] == 1
        assert sg.stats.attempts == 3  # one, then a refused one, then the failover


async def test_health_model_info_and_flush_cache() -> None:
    async with SimServer(FAST) as a, SimServer(FAST) as b, backend(a.url, b.url) as sg:
        await sg.complete(ask())
        assert a.engine.cache.size_tokens + b.engine.cache.size_tokens > 0
        flushed = await sg.flush_cache()
        info = await sg.model_info()
        health = await sg.health()
    assert flushed == {a.url: True, b.url: True}
    assert a.engine.cache.size_tokens == b.engine.cache.size_tokens == 0
    assert info["model_path"] == "sim"
    assert health == {a.url: True, b.url: True}
    assert [r.healthy for r in sg.replicas] == [True, True]


async def test_rate_limits_fail_over_then_surface_with_retry_after() -> None:
    limited = FAST.model_copy(update={"fault_429": 1.0, "retry_after": 0.02})
    async with SimServer(limited) as busy, SimServer(FAST) as free:
        async with backend(busy.url, free.url) as sg:
            ok = await sg.complete(ask(affinity_key="k"))  # maps to busy, fails over
        assert ok.message.content == "ANSWER: 5"
        assert busy.stats()["faults"]["429"] == 1
        policy = QUICK_RETRY.model_copy(update={"max_attempts": 2})
        async with backend(busy.url, retry=policy) as alone:
            with pytest.raises(RateLimited) as caught:
                await alone.complete(ask())
        assert caught.value.retry_after == pytest.approx(0.02)
        assert busy.stats()["faults"]["429"] == 3


async def test_cut_replies_and_cut_streams_fail_over() -> None:
    cut = FAST.model_copy(update={"fault_cut": 1.0})
    async with SimServer(cut) as broken, SimServer(FAST) as fine:
        sg = backend(broken.url, fine.url)
        async with sg:
            whole = await sg.complete(ask(affinity_key="k"))
            streamed = await collect(sg, ask(affinity_key="k2", request_id="stream-1"))
    assert whole.message.content == "ANSWER: 5"
    assert broken.stats()["faults"]["cut"] == 2
    # The stream was cut after some text: a restart delta, then the whole reply.
    restarts = [i for i, d in enumerate(streamed) if d.restart]
    assert len(restarts) == 1
    before = "".join(d.content for d in streamed[: restarts[0]])
    after = "".join(d.content for d in streamed[restarts[0] + 1 :])
    assert before
    assert "ANSWER: 5".startswith(before)
    assert after == "ANSWER: 5"
    reply = streamed[-1].reply
    assert reply is not None
    assert reply.message.content == "ANSWER: 5"


async def test_bad_input_gets_clear_errors() -> None:
    async with SimServer(FAST) as srv, backend(srv.url) as sg:
        with pytest.raises(UnknownModelError, match="'gpt-9'"):
            await sg.complete(ask(model="gpt-9"))
        with pytest.raises(InvalidRequestError, match="HTTP 400"):
            await sg.complete(ask(n=0))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    # Wrong URL: one error on opening, before any call.
    with pytest.raises(BackendUnavailable, match=r"no replica answers /health: .*cannot connect"):
        async with backend(dead):
            pass
    with pytest.raises(RuntimeError, match="not opened"):
        await backend(dead, model="m").complete(ask())
    # A model name the server does not serve: on opening too.
    async with SimServer(FAST) as srv:
        with pytest.raises(UnknownModelError, match=r"configured for model 'gpt-9'.*serves 'sim'"):
            async with backend(srv.url, model="gpt-9"):
                pass


async def test_without_a_model_the_backend_takes_the_served_name() -> None:
    # ``--served-model-name`` (``/v1/models``), not the model's file path.
    config = FAST.model_copy(update={"model": "smol"})
    async with SimServer(config) as srv, backend(srv.url) as sg:
        assert sg.models == ["smol"]
        reply = await sg.complete(ask(model="smol"))
    assert reply.model == "smol"
    # The sim's model_path is the same name; the real server's is a path
    # (tests/integration/test_sglang.py), so this asks the listing.
    assert srv.engine.requests["/v1/models"] == 1
    assert srv.engine.requests["/get_model_info"] == 0


async def test_cancelling_a_call_leaves_nothing_running() -> None:
    async with SimServer(FAST.model_copy(update={"ttft_ms": 5000})) as srv:
        async with backend(srv.url) as sg:
            with anyio.move_on_after(0.2) as scope:
                await sg.complete(ask())
            assert scope.cancelled_caught
            assert [r.outstanding for r in sg.replicas] == [0]
        with anyio.fail_after(5):
            while srv.engine.in_flight:  # noqa: ASYNC110 - the server's view, polled
                await anyio.sleep(0.02)


async def test_a_server_still_loading_is_named_so() -> None:
    # SGLang listens before its model is warmed up and answers /health 503 until then.
    loading = httpx.MockTransport(lambda _: httpx.Response(503))
    sg = SGLangBackend(
        SGLangBackendConfig(urls=["http://sglang.test:30000"], health_interval_s=0),
        transport=loading,
    )
    with pytest.raises(BackendUnavailable, match=r"/health: HTTP 503 \(still loading"):
        async with sg:
            pass


def test_a_required_tool_call_is_a_constrained_decode() -> None:
    """``tool_choice = "required"`` on the native API: the prompt ends with
    the opening ``<tool_call>`` line and SGLang's grammar holds the rest to
    a call's JSON; the reply parses as that call (non-streamed and
    streamed).  The real server decodes it: tests/integration/test_sglang.py."""
    request = ask(tools=[SEARCH], tool_choice="required")
    body = build_payload(request)
    assert body["text"].endswith("<|im_start|>assistant\n<tool_call>\n")
    schema = json.loads(body["sampling_params"]["json_schema"])
    assert schema["properties"]["name"] == {"enum": ["search"]}
    assert schema["properties"]["arguments"] == SEARCH.parameters
    # Not required: no constraint, no tag in the prompt.
    free = build_payload(ask(tools=[SEARCH]))
    assert "json_schema" not in free["sampling_params"]
    assert not free["text"].endswith("<tool_call>\n")

    generated = '{"name": "search", "arguments": {"q": "sglang"}}'
    output = GenerateOutput(text=generated)
    reply = outputs_to_reply([output], request, model="m", latency_s=0.0, backend="sg")
    [call] = reply.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("search", {"q": "sglang"})
    assert reply.choices[0].finish_reason == "tool_calls"
    assembly = StreamAssembly(1, False, forced_tool_call(request))
    assert [d.content for d in assembly.add(output)] == []  # nothing leaks as text
    [delta] = assembly.finish("call_")
    assert (delta.tool_name, delta.tool_arguments) == ("search", call.function.arguments)


async def drain(deltas: AsyncGenerator[StreamDelta, None]) -> None:
    async with contextlib.aclosing(deltas):
        async for _ in deltas:
            pass


async def test_garbage_from_generate_is_a_malformed_reply() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path != "/generate":  # /health, /get_model_info
            return web.json_response({"model_path": "m"})
        body = await request.json()
        if body.get("stream"):
            return web.Response(body=b"data: {nope}\n\n", content_type="text/event-stream")
        return web.Response(body=b"<html>502</html>", content_type="application/json")

    async with loopback_server(handler) as v1:
        url = v1.removesuffix("/v1")
        async with backend(url, model="m") as sg:
            with pytest.raises(
                MalformedReply, match=r"/generate\] not a /generate reply \(.*'<html>502"
            ):
                await sg.complete(ask())
            # Not retried, but a fault of the replica: its breaker counts it.
            assert [(r.failures, r.outstanding) for r in sg.replicas] == [(1, 0)]
            with pytest.raises(
                MalformedReply,
                match=r"/generate\] stream event is not a /generate reply \(.*{nope}",
            ):
                await drain(sg.stream(ask()))
            assert [(r.failures, r.outstanding) for r in sg.replicas] == [(2, 0)]
