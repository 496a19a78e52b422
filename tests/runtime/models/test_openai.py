"""The OpenAI-compatible backend against small in-test aiohttp servers:
request shape, tool calls, ``n``, logprobs, usage, error mapping and
cancellation (non-streaming path; streaming is in test_openai_stream.py)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from aiohttp import web
from multidict import CIMultiDict

from agentrt.protocols import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    InvalidRequestError,
    MalformedReply,
    UnknownModelError,
)
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._retry import RetryPolicy
from agentrt.runtime.models.http._http_client import HttpClientConfig
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from tests._support.ports import free_port
from tests.runtime.models._loopback import (
    Handler,
    HangsOnce,
    loopback_server,
    openai_backend,
)

pytestmark = pytest.mark.anyio


class Seen:
    """What the test server saw."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[CIMultiDict[str]] = []
        self.paths: list[str] = []
        self.sizes: list[int] = []
        self.disconnects = 0
        self.finished = 0


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[tuple[str, Seen]]:
    """An aiohttp server on an ephemeral port; yields its /v1 URL and what
    it saw.  ``handler_cancellation`` makes a client disconnect cancel the
    handler, which is how the tests observe it."""
    seen = Seen()

    async def wrapped(request: web.Request) -> web.StreamResponse:
        seen.paths.append(request.path)
        seen.headers.append(CIMultiDict(request.headers))
        raw = await request.read()
        seen.sizes.append(len(raw))
        seen.bodies.append(json.loads(raw) if raw else {})
        try:
            response = await handler(request)
        except BaseException:
            seen.disconnects += 1
            raise
        seen.finished += 1
        return response

    async with loopback_server(wrapped) as url:
        yield url, seen


def completion(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "served-model-v2",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }
    body.update(overrides)
    return body


def reply_with(body: dict[str, Any], *, delay: float = 0.0) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        if delay:
            await anyio.sleep(delay)
        return web.json_response(body)

    return handler


def backend(url: str, **overrides: Any) -> OpenAIBackend:
    return openai_backend(
        url,
        **{
            "name": "test",
            "models": ["m1", "m2"],
            "retry": RetryPolicy(max_attempts=1, deadline_s=10),
            **overrides,
        },
    )


def ask(text: str = "hi", **overrides: Any) -> ModelRequest:
    return ModelRequest(messages=[UserMessage(text)], **overrides)


def test_the_backend_is_a_model_backend() -> None:
    b = backend("http://127.0.0.1:1/v1")
    assert isinstance(b, ModelBackend)
    assert b.models == ["m1", "m2"]
    assert b.endpoint == "http://127.0.0.1:1/v1/chat/completions"


def test_a_malformed_base_url_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="base_url must be an http"):
        OpenAIBackendConfig(base_url="localhost:8000", models=["m"])
    with pytest.raises(ValueError, match="models"):
        OpenAIBackendConfig(base_url="http://h/v1", models=[])


async def test_request_shape() -> None:
    tools = [ToolSpec(name="add", description="add two ints", parameters={"type": "object"})]
    request = ModelRequest(
        messages=[
            SystemMessage("be brief"),
            UserMessage("2+2?"),
            AssistantMessage(tool_calls=[ToolCall("c1", FunctionCall("add", '{"a":2,"b":2}'))]),
            ToolMessage("4", tool_call_id="c1"),
            AssistantMessage("it is 4"),
        ],
        model="m2",
        tools=tools,
        tool_choice="required",
        sampling=SamplingParams(temperature=0.2, top_p=0.9, max_tokens=64, stop=["\n"], seed=7),
        n=2,
        top_logprobs=3,
        request_id="req-42",
    )
    extra = {"X-Team": "blue"}
    async with (
        serve(reply_with(completion())) as (url, seen),
        backend(url, api_key="sk-secret", extra_headers=extra) as b,
    ):
        await b.complete(request)
    assert seen.paths == ["/v1/chat/completions"]
    headers = seen.headers[0]
    assert headers["Authorization"] == "Bearer sk-secret"
    assert headers["X-Team"] == "blue"
    assert headers["X-Request-Id"] == "req-42"
    assert headers["Content-Type"] == "application/json"
    assert headers["Host"] == url.split("/")[2]
    assert "Transfer-Encoding" not in headers  # a plain body, not a chunked stream
    assert int(headers["Content-Length"]) == seen.sizes[0]
    assert seen.bodies[0] == {
        "model": "m2",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "function": {"name": "add", "arguments": '{"a":2,"b":2}'},
                        "type": "function",
                    }
                ],
            },
            {"role": "tool", "content": "4", "tool_call_id": "c1"},
            {"role": "assistant", "content": "it is 4"},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 64,
        "n": 2,
        "stop": ["\n"],
        "seed": 7,
        "tools": [
            {
                "function": {
                    "name": "add",
                    "parameters": {"type": "object"},
                    "description": "add two ints",
                },
                "type": "function",
            }
        ],
        "tool_choice": "required",
        "logprobs": True,
        "top_logprobs": 3,
    }


async def test_default_model_and_no_optional_fields() -> None:
    async with serve(reply_with(completion())) as (url, seen), backend(url) as b:
        await b.complete(ask())
    body = seen.bodies[0]
    assert body["model"] == "m1"
    for absent in ("tools", "tool_choice", "logprobs", "top_logprobs", "stream", "n", "stop"):
        assert absent not in body
    assert "Authorization" not in seen.headers[0]


async def test_reply_usage_model_latency_exact() -> None:
    body = completion(
        usage={
            "prompt_tokens": 1234,
            "completion_tokens": 56,
            "total_tokens": 1290,
            "prompt_tokens_details": {"cached_tokens": 1024},
        }
    )
    async with serve(reply_with(body, delay=0.05)) as (url, _), backend(url) as b:
        reply = await b.complete(ask(request_id="r-1"))
    assert reply.usage.prompt_tokens == 1234
    assert reply.usage.completion_tokens == 56
    assert reply.usage.cached_prompt_tokens == 1024
    assert reply.model == "served-model-v2"
    assert reply.backend == "test"
    assert reply.request_id == "r-1"
    assert reply.latency_s >= 0.05
    assert reply.message.content == "hello"
    assert reply.choices[0].finish_reason == "stop"


async def test_parallel_tool_calls_pass_raw_arguments_through() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
            # malformed JSON is data for the agent loop, not an error here
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"y": '}},
            # some servers send parsed arguments
            {"id": "c", "type": "function", "function": {"name": "h", "arguments": {"z": 2}}},
        ],
    }
    body = completion(choices=[{"index": 0, "message": message, "finish_reason": "tool_calls"}])
    async with serve(reply_with(body)) as (url, _), backend(url) as b:
        reply = await b.complete(ask(tools=[ToolSpec(name="f")]))
    calls = reply.message.tool_calls
    assert [c.id for c in calls] == ["a", "b", "c"]
    assert [c.function.name for c in calls] == ["f", "g", "h"]
    assert calls[0].function.arguments == '{"x": 1}'
    assert calls[1].function.arguments == '{"y": '
    assert json.loads(calls[2].function.arguments) == {"z": 2}
    assert reply.message.content is None
    assert reply.choices[0].finish_reason == "tool_calls"


async def test_n_sampling_returns_every_choice_in_order() -> None:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": f"s{i}"}, "finish_reason": r}
        for i, r in [(2, "stop"), (0, "length"), (1, "stop")]
    ]
    async with serve(reply_with(completion(choices=choices))) as (url, seen), backend(url) as b:
        reply = await b.complete(ask(n=3))
    assert seen.bodies[0]["n"] == 3
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert [c.message.content for c in reply.choices] == ["s0", "s1", "s2"]
    assert reply.choices[0].finish_reason == "length"


async def test_logprobs_are_mapped() -> None:
    logprobs = {
        "content": [
            {
                "token": "he",
                "logprob": -0.1,
                "bytes": [104, 101],
                "top_logprobs": [
                    {"token": "he", "logprob": -0.1},
                    {"token": "hi", "logprob": -2.5},
                ],
            },
            {"token": "llo", "logprob": -0.01, "top_logprobs": []},
        ]
    }
    choices = [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello"},
            "finish_reason": "stop",
            "logprobs": logprobs,
        }
    ]
    async with serve(reply_with(completion(choices=choices))) as (url, _), backend(url) as b:
        reply = await b.complete(ask(logprobs=True, top_logprobs=2))
    lps = reply.choices[0].logprobs
    assert lps is not None
    assert [(t.token, t.logprob) for t in lps] == [("he", -0.1), ("llo", -0.01)]
    assert [(a.token, a.logprob) for a in lps[0].top] == [("he", -0.1), ("hi", -2.5)]
    assert lps[1].top == []


async def test_unknown_model_is_refused_before_sending() -> None:
    async with serve(reply_with(completion())) as (url, seen), backend(url) as b:
        with pytest.raises(UnknownModelError, match="'gpt-9' is not served by backend 'test'"):
            await b.complete(ask(model="gpt-9"))
    assert seen.paths == []


async def test_server_side_unknown_model_is_an_unknown_model_error() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "object": "error",
                "message": "The model `m1` does not exist.",
                "type": "NotFoundError",
                "code": 404,
            },
            status=404,
        )

    async with serve(handler) as (url, _), backend(url) as b:
        with pytest.raises(UnknownModelError, match="does not exist") as info:
            await b.complete(ask())
    assert url in str(info.value)


async def test_a_refused_connection_is_backend_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.01, deadline_s=5)
    async with backend(url, retry=policy) as b:
        with pytest.raises(BackendUnavailable, match="cannot connect") as info:
            await b.complete(ask())
        assert b.stats.attempts == 3  # connect errors are retried
    assert info.value.endpoint == f"{url}/chat/completions"


@pytest.mark.parametrize(
    "body",
    [b"<html>502 Bad Gateway</html>", b'{"choices": "nope"}', b'{"choices": []}', b""],
)
async def test_garbage_bodies_are_malformed_replies(body: bytes) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, content_type="application/json")

    async with serve(handler) as (url, _), backend(url) as b:
        with pytest.raises(MalformedReply) as info:
            await b.complete(ask())
    assert "test" in str(info.value)
    assert f"{url}/chat/completions" in str(info.value)


async def test_a_server_that_does_not_speak_http_is_a_malformed_reply() -> None:
    async def garbage(reader: anyio.abc.SocketStream) -> None:
        async with reader:
            await reader.receive()
            await reader.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, garbage)
        async with backend(f"http://127.0.0.1:{port}/v1") as b:
            with pytest.raises(MalformedReply, match="not a valid HTTP reply"):
                await b.complete(ask())
        tg.cancel_scope.cancel()


async def test_a_silent_server_times_out() -> None:
    async def hang(request: web.Request) -> web.StreamResponse:
        await anyio.sleep(3600)
        return web.json_response(completion())

    http = HttpClientConfig(read_timeout_s=0.2)
    async with serve(hang) as (url, seen), backend(url, http=http) as b:
        # A hang guard: only the read timeout ends the wait for an hour's answer.
        with anyio.fail_after(60), pytest.raises(BackendTimeout, match="timed out"):
            await b.complete(ask())
        await wait_for(lambda: seen.disconnects == 1)  # the client went away


async def never_answers(request: web.Request) -> web.StreamResponse:
    await anyio.sleep(30)
    return web.json_response(completion())


async def test_the_call_deadline_bounds_a_slow_reply() -> None:
    policy = RetryPolicy(max_attempts=3, deadline_s=0.3)
    async with serve(never_answers) as (url, seen), backend(url, retry=policy) as b:
        with pytest.raises(BackendTimeout, match="call deadline"):
            await b.complete(ask())
        await wait_for(lambda: seen.disconnects == 1)


async def test_a_compressed_reply_is_decoded() -> None:
    # We ask for identity; a server (or proxy) may compress anyway.
    async def gzipped(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=gzip.compress(json.dumps(completion()).encode()),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )

    async with serve(gzipped) as (url, _), backend(url) as b:
        reply = await b.complete(ask())
    assert reply.message.content == "hello"


async def test_a_call_deadline_leaves_its_task_and_outer_scopes_uncancelled() -> None:
    # The deadline cancels the calling task itself: once it became the
    # BackendTimeout, the task must not stay cancelled (the next await and
    # the next call run), nor may an enclosing scope see a cancellation.
    policy = RetryPolicy(max_attempts=1, deadline_s=0.2)
    async with serve(HangsOnce(completion())) as (url, _), backend(url, retry=policy) as b:
        with anyio.CancelScope() as outer:
            with pytest.raises(BackendTimeout, match=r"call deadline of 0\.2s"):
                await b.complete(ask())
            await anyio.sleep(0.01)  # not cancelled
            reply = await b.complete(ask())
        assert not outer.cancelled_caught
        assert reply.message.content == "hello"


async def test_an_outer_cancellation_is_not_taken_for_the_deadline() -> None:
    policy = RetryPolicy(max_attempts=1, deadline_s=0.3)
    async with serve(never_answers) as (url, _), backend(url, retry=policy) as b:
        # The outer timeout fires first: the call is cancelled, no error.
        with anyio.move_on_after(0.1) as outer:
            await b.complete(ask())
        assert outer.cancelled_caught


class _CancelThenStall(httpx.AsyncBaseTransport):
    """Cancels ``scope`` and blocks the loop past the call deadline, so the
    scope's cancellation and the deadline's reach the task together."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert self.scope is not None
        self.scope.cancel()
        time.sleep(0.1)  # noqa: ASYNC251 - the point: the deadline passes meanwhile
        await anyio.sleep(10)
        raise AssertionError("never cancelled")


async def test_an_outer_cancellation_with_the_deadline_is_not_swallowed() -> None:
    transport = _CancelThenStall()
    config = OpenAIBackendConfig(
        base_url="http://127.0.0.1:9/v1",
        models=["m1"],
        retry=RetryPolicy(max_attempts=1, deadline_s=0.05),
    )
    async with OpenAIBackend(config, transport=transport) as b:
        with anyio.CancelScope() as outer:
            transport.scope = outer
            await b.complete(ask())  # cancelled: no BackendTimeout
        assert outer.cancelled_caught
        await anyio.sleep(0.01)  # and the task is not left cancelled


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, InvalidRequestError), (422, InvalidRequestError), (401, BackendError)],
)
async def test_client_errors_are_not_retried(status: int, error: type[Exception]) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "max_tokens too large"}}, status=status)

    policy = RetryPolicy(max_attempts=4, base_delay_s=0.01)
    async with serve(handler) as (url, seen), backend(url, retry=policy) as b:
        with pytest.raises(error, match=f"HTTP {status}"):
            await b.complete(ask())
        assert b.stats.attempts == 1
    assert len(seen.paths) == 1


async def wait_for(condition: Callable[[], bool], within: float = 30.0) -> None:
    """Poll the test server's plain counters until ``condition`` holds
    (``within``: a hang guard)."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - polling counters, not an event
            await anyio.sleep(0.005)


@pytest.mark.parametrize("stall", ["before-headers", "mid-body"])
async def test_cancelling_a_call_leaves_no_request_running(stall: str) -> None:
    started = anyio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        if stall == "before-headers":
            started.set()
            await anyio.sleep(30)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b'{"choices": [')
        started.set()
        await anyio.sleep(30)
        return response

    async with serve(slow) as (url, seen), backend(url) as b:
        async with anyio.create_task_group() as tg:
            tg.start_soon(b.complete, ask())
            await started.wait()
            await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        # The server sees the client go away: its handler is cancelled.
        await wait_for(lambda: seen.disconnects == 1)
        assert seen.finished == 0
        # The backend still works afterwards.
        started = anyio.Event()
        with anyio.move_on_after(0.05):
            await b.complete(ask())
        await wait_for(lambda: seen.disconnects == 2)


async def test_lifecycle_is_one_shot() -> None:
    b = backend("http://127.0.0.1:1/v1")
    with pytest.raises(RuntimeError, match="not opened"):
        await b.complete(ask())
    async with b:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        await b.complete(ask())
    with pytest.raises(RuntimeError, match="already opened"):
        async with b:
            pass


async def test_served_models_lists_the_server_models() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.path == "/v1/models"
        return web.json_response({"object": "list", "data": [{"id": "m1"}, {"id": "m2"}]})

    async with serve(handler) as (url, _), backend(url, api_key="k") as b:
        assert await b.served_models() == ["m1", "m2"]
