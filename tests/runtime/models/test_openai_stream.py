"""Streaming through the OpenAI-compatible backend: SSE framing, tool-call
deltas assembled by index, ``n`` and logprobs in streams, usage from the
final chunk, cut streams, garbage events and cancellation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

from agentrt.agents import EventLog
from agentrt.protocols import ModelRequest, StepRecorded, TokenDelta, ToolSpec, UserMessage
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.kernel._errors import BackendUnavailable, MalformedReply
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.runtime.models._retry import RetryPolicy
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend
from tests.runtime.models._loopback import Handler, loopback_server, retrying_backend

pytestmark = pytest.mark.anyio


class Seen:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.accept: list[str] = []
        self.peers: list[Any] = []
        self.disconnects = 0


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()

    async def wrapped(request: web.Request) -> web.StreamResponse:
        seen.bodies.append(json.loads(await request.read()))
        seen.accept.append(request.headers.get("Accept", ""))
        seen.peers.append(
            request.transport.get_extra_info("peername") if request.transport else None
        )
        try:
            return await handler(request)
        except BaseException:
            seen.disconnects += 1
            raise

    async with loopback_server(wrapped) as url:
        yield url, seen


def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "c-1",
        "object": "chat.completion.chunk",
        "model": "srv",
        "choices": choices,
        **extra,
    }


def delta(
    index: int = 0, finish: str | None = None, logprobs: Any = None, **d: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "delta": d, "finish_reason": finish}
    if logprobs is not None:
        out["logprobs"] = logprobs
    return out


def sse(
    events: list[Any],
    *,
    done: bool = True,
    sep: bytes = b"\n",
    cut: bool = False,
    linger: float = 0.0,
) -> Handler:
    """A handler that streams ``events`` (dicts as JSON, bytes verbatim)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            data = event if isinstance(event, bytes) else json.dumps(event).encode()
            await response.write(b"data: " + data + sep + sep)
        if cut:
            assert request.transport is not None
            request.transport.close()
            return response
        if done:
            await response.write(b"data: [DONE]" + sep + sep)
        if linger:
            await anyio.sleep(linger)  # the end of the body comes later
        await response.write_eof()
        return response

    return handler


def backend(url: str, **overrides: Any) -> OpenAIBackend:
    return retrying_backend(url, "st", **overrides)


async def collect(b: OpenAIBackend, request: ModelRequest) -> list[StreamDelta]:
    async with aclosing(b.stream(request)) as deltas:
        return [d async for d in deltas]


ASK = ModelRequest(messages=[UserMessage("hi")], tools=[ToolSpec(name="f"), ToolSpec(name="g")])


def call_opens(index: int, call_id: str, name: str, arguments: str) -> Any:
    """The chunk that opens tool call ``index``: its id, name and first arguments."""
    call = {"index": index, "id": call_id, "type": "function"}
    return chunk([delta(tool_calls=[{**call, "function": {"name": name, "arguments": arguments}}])])


TOOL_STREAM: list[Any] = [
    chunk([delta(role="assistant", content="")]),
    chunk([delta(content="Let me ")]),
    chunk([delta(content="check.")]),
    call_opens(0, "call_a", "f", ""),
    chunk([delta(tool_calls=[{"index": 0, "function": {"arguments": '{"x": '}}])]),
    call_opens(1, "call_b", "g", '{"q"'),
    chunk([delta(tool_calls=[{"index": 0, "function": {"arguments": "1}"}}])]),
    chunk([delta(tool_calls=[{"index": 1, "function": {"arguments": ': "a'}}])]),
    chunk([delta(finish="tool_calls")]),
    chunk(
        [],
        usage={
            "prompt_tokens": 321,
            "completion_tokens": 45,
            "total_tokens": 366,
            "prompt_tokens_details": {"cached_tokens": 256},
        },
    ),
]


async def test_tool_call_deltas_are_assembled_by_index() -> None:
    async with serve(sse(TOOL_STREAM)) as (url, seen), backend(url) as b:
        deltas = await collect(b, ASK)
    body = seen.bodies[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert seen.accept == ["text/event-stream"]

    *parts, last = deltas
    assert "".join(d.content for d in parts) == "Let me check."
    tool_parts = [d for d in parts if d.tool_call_index is not None]
    assert [(d.tool_call_index, d.tool_call_id, d.tool_name) for d in tool_parts[:3]] == [
        (0, "call_a", "f"),
        (0, None, None),
        (1, "call_b", "g"),
    ]
    assert all(d.reply is None for d in parts)
    reply = last.reply
    assert reply is not None
    calls = reply.message.tool_calls
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_a", "f", '{"x": 1}'),
        ("call_b", "g", '{"q": "a'),  # malformed arguments pass through raw
    ]
    assert reply.message.content == "Let me check."
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.usage.prompt_tokens == 321
    assert reply.usage.completion_tokens == 45
    assert reply.usage.cached_prompt_tokens == 256
    assert reply.model == "srv"
    assert reply.latency_s > 0


async def test_n_choices_and_logprobs_stream_separately() -> None:
    def lp(token: str, value: float) -> dict[str, Any]:
        return {
            "content": [
                {
                    "token": token,
                    "logprob": value,
                    "top_logprobs": [{"token": token, "logprob": value}],
                }
            ]
        }

    events: list[Any] = [
        chunk([delta(0, content="a", logprobs=lp("a", -0.5))]),
        chunk([delta(1, content="x", logprobs=lp("x", -1.5))]),
        chunk([delta(0, content="b", logprobs=lp("b", -0.25)), delta(1, finish="length")]),
        chunk([delta(0, finish="stop")]),
        chunk([], usage={"prompt_tokens": 5, "completion_tokens": 3}),
    ]
    async with serve(sse(events)) as (url, seen), backend(url) as b:
        deltas = await collect(b, ModelRequest(messages=[UserMessage("hi")], n=2, top_logprobs=1))
    assert seen.bodies[0]["n"] == 2
    assert seen.bodies[0]["logprobs"] is True
    assert [(d.index, d.content) for d in deltas if d.content] == [(0, "a"), (1, "x"), (0, "b")]
    reply = deltas[-1].reply
    assert reply is not None
    assert [c.message.content for c in reply.choices] == ["ab", "x"]
    assert [c.finish_reason for c in reply.choices] == ["stop", "length"]
    lps = reply.choices[0].logprobs
    assert lps is not None
    assert [(t.token, t.logprob) for t in lps] == [("a", -0.5), ("b", -0.25)]
    assert lps[0].top[0].token == "a"
    assert reply.usage.completion_tokens == 3


async def test_crlf_framing_comments_and_multiline_data() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        one = json.dumps(chunk([delta(content="he")])).encode()
        two = json.dumps(chunk([delta(content="llo")]), indent=1).encode()
        await response.write(b": keep-alive\r\n\r\nevent: message\r\ndata: " + one[:10])
        await response.write(one[10:] + b"\r\n\r")
        await response.write(
            b"\n" + b"".join(b"data: " + line + b"\r\n" for line in two.split(b"\n"))
        )
        await response.write(b"\r\ndata: [DONE]\r\n\r\n")
        await response.write_eof()
        return response

    async with serve(handler) as (url, _), backend(url) as b:
        deltas = await collect(b, ASK)
    reply = deltas[-1].reply
    assert reply is not None
    assert reply.message.content == "hello"


async def test_a_stream_cut_before_any_delta_is_retried() -> None:
    calls = 0
    good = sse(TOOL_STREAM)
    empty_then_cut = sse([chunk([delta(role="assistant", content="")])], cut=True)

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        return await (empty_then_cut if calls == 1 else good)(request)

    async with serve(handler) as (url, _), backend(url) as b:
        deltas = await collect(b, ASK)
        assert b.stats.attempts == 2
    assert calls == 2
    reply = deltas[-1].reply
    assert reply is not None
    assert len(reply.message.tool_calls) == 2


async def consume_into(b: OpenAIBackend, got: list[StreamDelta]) -> None:
    async with aclosing(b.stream(ASK)) as deltas:
        async for d in deltas:
            got.append(d)


async def test_a_stream_ended_without_done_is_a_cut_stream_retried_per_the_policy() -> None:
    got: list[StreamDelta] = []
    handler = sse([chunk([delta(content="partial")])], done=False)
    async with serve(handler) as (url, seen), backend(url) as b:
        with pytest.raises(BackendUnavailable, match=r"before \[DONE\]"):
            await consume_into(b, got)
        assert b.stats.attempts == 3  # the policy's max_attempts, then it gives up
    # Each retry after a delta was handed on starts with a restart delta.
    assert [("restart" if d.restart else d.content) for d in got] == [
        "partial",
        "restart",
        "partial",
        "restart",
        "partial",
    ]
    assert len(seen.bodies) == 3


async def test_a_stream_cut_after_deltas_is_retried_and_charged_once() -> None:
    calls = 0
    cut, good = sse(TOOL_STREAM[:3], cut=True), sse(TOOL_STREAM)

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        return await (cut if calls == 1 else good)(request)

    ledger = BudgetLedger("run")
    async with serve(handler) as (url, seen), backend(url) as b:
        metered = MeteredBackend(b, ledger)
        async with aclosing(metered.stream(ASK)) as deltas:
            got = [d async for d in deltas]
        assert b.stats.attempts == 2
    assert len(seen.bodies) == 2
    restarts = [i for i, d in enumerate(got) if d.restart]
    assert restarts == [2]  # after the cut attempt's two deltas
    assert got[2] == StreamDelta(restart=True)  # carries nothing else
    assert [d.content for d in got[:2]] == ["Let me ", "check."]
    after = got[3:]
    assert "".join(d.content for d in after) == "Let me check."
    reply = after[-1].reply
    assert reply is not None
    assert reply.message.content == "Let me check."
    assert len(reply.message.tool_calls) == 2
    # Charged once, with the usage of the attempt that answered.
    snap = ledger.snapshot()
    assert (snap.in_flight, snap.spent.model_calls) == (0, 1)
    assert snap.spent.usage == reply.usage
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (321, 45)


async def test_garbage_events_and_in_stream_errors() -> None:
    async with serve(sse([b"{not json"])) as (url, _), backend(url) as b:
        with pytest.raises(MalformedReply, match="not a chat-completion chunk") as info:
            await collect(b, ASK)
        assert b.endpoint in str(info.value)
    error_event = {"error": {"message": "engine dead", "type": "InternalServerError"}}
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.01)
    async with serve(sse([error_event])) as (url, seen), backend(url, retry=policy) as b:
        with pytest.raises(BackendUnavailable, match="engine dead"):
            await collect(b, ASK)
    assert len(seen.bodies) == 2  # nothing had been yielded: retried


async def test_a_non_sse_reply_to_a_stream_request_is_malformed() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"choices": []})

    async with serve(handler) as (url, _), backend(url) as b:
        with pytest.raises(MalformedReply, match="expected an event stream"):
            await collect(b, ASK)


async def test_connections_are_reused_after_done() -> None:
    async with serve(sse(TOOL_STREAM, linger=0.05)) as (url, seen), backend(url) as b:
        for _ in range(3):
            await collect(b, ASK)
    assert len(set(seen.peers)) == 1, seen.peers


async def wait_for(condition: Callable[[], bool], within: float = 2.0) -> None:
    """Poll the test server's plain counters until ``condition`` holds."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - polling counters, not an event
            await anyio.sleep(0.005)


def endless(first: anyio.Event) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        while True:
            await response.write(
                b"data: " + json.dumps(chunk([delta(content="x")])).encode() + b"\n\n"
            )
            first.set()
            await anyio.sleep(0.01)

    return handler


async def test_cancelling_a_stream_closes_the_connection() -> None:
    first = anyio.Event()
    async with serve(endless(first)) as (url, seen), backend(url) as b:

        async def consume() -> None:
            async with aclosing(b.stream(ASK)) as deltas:
                async for _ in deltas:
                    pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await first.wait()
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        await wait_for(lambda: seen.disconnects == 1)


async def test_leaving_a_stream_early_closes_the_connection() -> None:
    first = anyio.Event()
    async with serve(endless(first)) as (url, seen), backend(url) as b:
        async with aclosing(b.stream(ASK)) as deltas:
            async for d in deltas:
                assert d.content == "x"
                break
        await wait_for(lambda: seen.disconnects == 1)


async def test_a_rollout_whose_stream_is_cut_mid_reply_still_answers() -> None:
    """The agent loop streams while tokens are read: a cut mid-reply costs
    the rollout a retry of the call, not its life."""
    answer = [chunk([delta(content=w)]) for w in ("The ", "answer ", "is ", "42.")]
    calls = 0
    cut, good = sse(answer[:2], cut=True), sse([*answer, chunk([delta(finish="stop")])])

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        return await (cut if calls == 1 else good)(request)

    async with serve(handler) as (url, _), backend(url) as b, Runtime(backends=[b]) as rt:
        log = EventLog()
        result = await rt.run("what is it?", events=log, tokens=True)
    assert calls == 2
    assert result.status == "succeeded", result.error
    assert result.answer == "The answer is 42."
    steps = [e for e in log.events if isinstance(e, StepRecorded)]
    replies = [s.step.reply for s in steps]
    assert [r.message.content for r in replies if r is not None] == ["The answer is 42."]
    assert any(isinstance(e, TokenDelta) for e in log.events)
