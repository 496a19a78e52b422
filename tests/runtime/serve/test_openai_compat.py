"""The OpenAI-compatible endpoint, driven by the official ``openai`` client
against the daemon (``serve_manager``: uvicorn on a real socket, scripted model)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentrt.protocols import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.runtime.config._config_file import ServerConfig
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.serve._metrics import DaemonMetrics
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve.openai._chat_translate import Asked, chat_asked
from agentrt.runtime.serve.openai._openai_error import OpenAIError
from agentrt.runtime.wire._chat import FunctionCallIn, MessageIn, ToolCallIn
from agentrt.testing import ScriptedBackend, ScriptedReply, SimServer, SimServerConfig
from tests._support.daemon import ServedManager, serving_manager, solver_daemon_config

pytestmark = pytest.mark.anyio

Script = Callable[[ModelRequest], str | ScriptedReply | BaseException]
_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


def votes(request: ModelRequest) -> str:
    """Rollout 1 disagrees, the others say 42."""
    found = _ROLLOUT.search(request.request_id or "")
    return "41" if found and found.group(1) == "1" else "42"


@asynccontextmanager
async def daemon(tmp_path: Path, model: Script | ModelBackend) -> AsyncIterator[ServedManager]:
    """The real daemon app (``serve_manager``) on a free port, on a scripted
    model (a script) or the backend given."""
    config = solver_daemon_config(
        tmp_path, ServerConfig(port=0, sse_keepalive_s=0.1, shutdown_grace_s=0.5)
    )
    backend = model if isinstance(model, ModelBackend) else ScriptedBackend(model)
    metrics = DaemonMetrics(process_metrics=False)
    async with serving_manager(config, [backend], metrics=metrics) as served:
        yield served


async def test_models_are_the_agents(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client:
        listed = await client.models.list()
        ids = [m.id for m in listed.data]
        assert ids == [a.model for a in d.manager.agents()]
        assert "agentrt/solver" in ids
        assert all(m.owned_by == "agentrt" and m.object == "model" for m in listed.data)
        one = await client.models.retrieve("agentrt/solver")
        assert one.id == "agentrt/solver"
        with pytest.raises(openai.NotFoundError) as caught:
            await client.models.retrieve("agentrt/nobody")
        assert "agentrt/solver" in caught.value.message


async def test_chat_completion_answers_from_a_run(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client:
        reply = await client.chat.completions.create(
            model="agentrt/solver", messages=[{"role": "user", "content": "What is 6 x 7?"}]
        )
        assert reply.object == "chat.completion"
        assert reply.choices[0].message.content == "42"
        assert reply.choices[0].finish_reason == "stop"
        ext = (reply.model_extra or {})["agentrt"]
        run_id = ext["run_id"]
        assert reply.id == f"chatcmpl-{run_id}"
        info = await d.manager.get(run_id)
        assert info is not None
        assert info.status == ext["status"] == "succeeded"
        assert info.task == "What is 6 x 7?"
        assert reply.usage is not None
        assert reply.usage.prompt_tokens == info.cost.usage.prompt_tokens > 0
        assert reply.usage.completion_tokens == info.cost.usage.completion_tokens > 0
        # the bare agent name is the same model
        again = await client.chat.completions.create(
            model="solver", messages=[{"role": "user", "content": "and 6 x 7 again?"}]
        )
        assert again.choices[0].message.content == "42"


def marked(request: ModelRequest) -> str:
    """Answers with reasoning and an ``ANSWER:`` line; rollout 1 says 41."""
    found = _ROLLOUT.search(request.request_id or "")
    value = "41" if found and found.group(1) == "1" else "42"
    return f"6 x 7 is {value}.\nANSWER: {value}"


async def test_each_surface_shows_the_answer_it_promises(tmp_path: Path) -> None:
    """The run's answer is what the vote compared (``42``) in the daemon's
    API; a chat client gets the winning rollout's reply as the model wrote
    it, and the result keeps that text as ``raw_answer``."""
    async with daemon(tmp_path, marked) as d, d.openai() as client, d.http() as http:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            extra_body={"rollouts": 3},
        )
        assert reply.choices[0].message.content == "6 x 7 is 42.\nANSWER: 42"
        run_id = (reply.model_extra or {})["agentrt"]["run_id"]
        detail = (await http.get(f"/v1/runs/{run_id}")).json()
        assert detail["run"]["answer"] == "42"
        assert detail["result"]["answer"] == "42"
        assert detail["result"]["raw_answer"] == "6 x 7 is 42.\nANSWER: 42"


async def test_extra_body_scales_the_run(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client, d.http() as http:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            extra_body={"rollouts": 3, "aggregate": "majority", "budget": {"max_tokens": 50_000}},
        )
        assert reply.choices[0].message.content == "42"  # two of three say 42
        ext = (reply.model_extra or {})["agentrt"]
        assert ext["rollouts"] == 3
        assert sorted(r["answer"] for r in ext["rollout_details"]) == ["41", "42", "42"]
        detail = (await http.get(f"/v1/runs/{ext['run_id']}")).json()
        assert detail["run"]["rollouts"] == 3
        assert len(detail["rollouts"]) == 3
        assert detail["request"]["scaling"]["aggregate"] == "majority"
        assert detail["request"]["budget"]["max_tokens"] == 50_000
        # the same options in an `agentrt` object
        nested = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            extra_body={"agentrt": {"rollouts": 2}},
        )
        run = await d.manager.detail((nested.model_extra or {})["agentrt"]["run_id"])
        assert run is not None
        assert run.run.rollouts == len(run.rollouts) == 2


async def test_streaming_sends_role_answer_stop_usage_done(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client:
        stream = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"rollouts": 3},
        )
        chunks = [chunk async for chunk in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "42"
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] == "stop"
        assert finishes.count("stop") == 1
        last = chunks[-1]
        assert last.choices == []
        assert last.usage is not None
        run_id = chunks[0].id.removeprefix("chatcmpl-")
        info = await d.manager.get(run_id)
        assert info is not None
        assert last.usage.total_tokens == info.cost.usage.total_tokens > 0
        assert all(c.usage is None for c in chunks[:-1])

        # on the wire: progress as reasoning deltas (clients drop comments), then [DONE] last
        async with d.http() as http:
            body = {
                "model": "agentrt/solver",
                "messages": [{"role": "user", "content": "6 x 7?"}],
                "stream": True,
                "rollouts": 2,
            }
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                lines = [line async for line in response.aiter_lines() if line]
        data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
        assert data[-1] == "[DONE]"
        assert all(line.startswith((": ", "data: ")) for line in lines)
        assert not any(line.startswith(": rollout ") for line in lines)
        contents = [json.loads(x)["choices"] for x in data[:-1]]
        reasoning = "".join(c[0]["delta"].get("reasoning_content") or "" for c in contents if c)
        assert "rollout r0 finished: answer: 42" in reasoning
        answer = [c[0]["delta"].get("content") for c in contents if c]
        assert [a for a in answer if a is not None] == ["", "42"]


async def test_unknown_model_is_404(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(
                model="agentrt/ghost", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.code == "model_not_found"
        assert caught.value.param == "model"
        assert "agentrt/ghost" in caught.value.message
        assert (await d.manager.list()).runs == []


async def test_malformed_requests_are_400_naming_the_field(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.http() as http, d.openai() as client:
        url = "/v1/chat/completions"
        bad_json = await http.post(url, content=b'{"model": "agentrt/solver", "messages": [')
        assert bad_json.status_code == 400
        assert "not valid JSON" in bad_json.json()["error"]["message"]
        cases: list[tuple[dict[str, Any], str, str]] = [
            ({"messages": [{"role": "user", "content": "x"}]}, "model", "missing required field"),
            ({"model": "agentrt/solver", "messages": []}, "messages", "length >= 1"),
            ({"model": "agentrt/solver", "messages": "hi"}, "messages", "Expected `array`"),
            (
                {"model": "agentrt/solver", "messages": [{"role": "wizard", "content": "x"}]},
                "messages[0].role",
                "Invalid enum value",
            ),
            (
                {"model": "agentrt/solver", "messages": [{"role": "system", "content": "x"}]},
                "messages",
                "user message",
            ),
            (
                {
                    "model": "agentrt/solver",
                    "messages": [{"role": "user", "content": "x"}],
                    "agentrt": {"rolouts": 2},
                },
                "agentrt.rolouts",
                "unknown field",
            ),
            (
                {
                    "model": "agentrt/solver",
                    "messages": [{"role": "user", "content": "x"}],
                    "budget": {"max_tokens": "lots"},
                },
                "budget.max_tokens",
                "Expected `int | null`",
            ),
        ]
        for body, param, words in cases:
            response = await http.post(url, json=body)
            assert response.status_code == 400, body
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["param"] == param, body
            assert words in error["message"], body
        # a value the manager refuses names the request's field, through the client
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="agentrt/solver",
                messages=[{"role": "user", "content": "x"}],
                extra_body={"rollouts": 1000},
            )
        assert caught.value.param == "rollouts"
        assert "max_rollouts" in caught.value.message
        assert (await d.manager.list()).runs == []


async def test_a_failed_run_is_a_clear_error_not_retried(tmp_path: Path) -> None:
    def broken(_request: ModelRequest) -> BaseException:
        return RuntimeError("the model server fell over")

    async with daemon(tmp_path, broken) as d, d.openai(retries=2) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="agentrt/solver", messages=[{"role": "user", "content": "hi"}]
            )
        error = caught.value
        assert error.status_code == 502
        assert error.code == "run_failed"
        runs = (await d.manager.list()).runs
        assert len(runs) == 1  # x-should-retry: false, the client did not run it again
        assert runs[0].status == "failed"
        assert runs[0].run_id in error.message
        assert isinstance(error.body, dict)
        assert error.body["run_id"] == runs[0].run_id


async def rollout_started(manager: RunManager, run_id: str) -> None:
    """Wait until the run's model call is in flight (the client leaves mid-step)."""
    with anyio.fail_after(10):
        while (detail := await manager.detail(run_id)) is None or not detail.rollouts:  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def test_a_client_that_leaves_cancels_its_run(tmp_path: Path) -> None:
    def slow(_request: ModelRequest) -> ScriptedReply:
        return ScriptedReply(content="late", delay_s=60.0)

    async with daemon(tmp_path, slow) as d, d.http() as http:
        body = {
            "model": "agentrt/solver",
            "messages": [{"role": "user", "content": "take your time"}],
            "stream": True,
        }
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            # not `break` out of aiter_lines: its finalizer would close the connection
            lines = cast(AsyncGenerator[str, None], response.aiter_lines())
            line = await anext(lines)
            run_id = json.loads(line.removeprefix("data: "))["id"].removeprefix("chatcmpl-")
            await rollout_started(d.manager, run_id)
            await lines.aclose()
        with anyio.fail_after(10):
            while (info := await d.manager.get(run_id)) is None or info.status != "cancelled":  # noqa: ASYNC110
                await anyio.sleep(0.05)
        # the same without streaming: the run is cancelled when the client gives up
        with pytest.raises(httpx.ReadTimeout):
            await http.post(
                "/v1/chat/completions",
                json={**body, "stream": False},
                timeout=httpx.Timeout(20.0, read=0.3),
            )
        with anyio.fail_after(10):
            while True:
                runs = (await d.manager.list()).runs
                if len(runs) == 2 and all(r.status == "cancelled" for r in runs):
                    break
                await anyio.sleep(0.05)


async def test_shutting_down_is_503(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client:
        await d.manager.drain(0.0)
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(
                model="agentrt/solver", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == 503
        assert "shutting down" in caught.value.message


async def test_runs_feed_the_metrics(tmp_path: Path) -> None:
    async with daemon(tmp_path, votes) as d, d.openai() as client, d.http() as http:
        await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            extra_body={"rollouts": 3},
        )
        text = (await http.get("/metrics")).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert (
        samples[("agentrt_runs_finished_total", (("agent", "solver"), ("status", "succeeded")))]
        == 1
    )
    assert samples[("agentrt_rollouts_started_total", ())] == 3
    assert samples[("agentrt_steps_total", (("model", "scripted"),))] == 3
    assert samples[("agentrt_model_calls_total", (("agent", "solver"),))] == 3
    # the daemon's scrape-time gauges
    assert samples[("agentrt_runs", (("status", "succeeded"),))] == 1
    assert samples[("agentrt_active_runs", ())] == 0


async def test_prefix_cache_and_backend_metrics_from_a_model_server(tmp_path: Path) -> None:
    """Against the sim-server (an OpenAI-compatible server with a prefix
    cache): a repeated prompt is served from the cache, the server says so,
    and /metrics counts it, with the backend's call counters."""
    sim = SimServerConfig(ttft_ms=0, token_ms=0, tool_rounds=0, answer="answer")
    async with SimServer(sim) as server:
        backend = OpenAIBackend(
            OpenAIBackendConfig(name="sim", base_url=server.url + "/v1", models=["sim"])
        )
        async with (
            backend,
            daemon(tmp_path, backend) as d,
            d.openai() as client,
            d.http() as http,
        ):
            replies = [
                await client.chat.completions.create(
                    model="agentrt/solver",
                    messages=[{"role": "user", "content": "What is 2+3?"}],
                    extra_body={"rollouts": rollouts},
                )
                for rollouts in (3, 1)
            ]
            text = (await http.get("/metrics")).text
    cached = [
        r.usage.prompt_tokens_details.cached_tokens or 0
        for r in replies
        if r.usage is not None and r.usage.prompt_tokens_details is not None
    ]
    assert len(cached) == 2
    assert cached[1] > 0  # the second run's prompt was cached by the first
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    step_cached = samples[("agentrt_step_tokens_total", (("kind", "cached"), ("model", "sim")))]
    assert step_cached == sum(cached)
    run_cached = samples[("agentrt_tokens_total", (("agent", "solver"), ("kind", "cached")))]
    assert run_cached == sum(cached)
    assert samples[("agentrt_backend_calls_total", (("backend", "sim"),))] == 4


def test_a_conversation_reaches_the_run_as_native_messages() -> None:
    call = ToolCallIn(id="call_1", function=FunctionCallIn(name="add", arguments='{"a": 2}'))
    messages = [
        MessageIn(role="system", content="Be terse."),
        MessageIn(role="user", content="What is 2+2?"),
        MessageIn(role="assistant", content="4"),
        MessageIn(role="user", content="And plus 3?"),
        MessageIn(role="assistant", tool_calls=[call]),
        MessageIn(role="tool", tool_call_id="call_1", content="7"),
    ]
    asked = chat_asked(messages)
    assert asked.task == "And plus 3?"  # the last user message
    assert asked.instructions == "Be terse."
    assert asked.conversation == [
        UserMessage(content="What is 2+2?"),
        AssistantMessage(content="4"),
        UserMessage(content="And plus 3?"),
        AssistantMessage(
            tool_calls=[ToolCall(id="call_1", function=FunctionCall("add", '{"a": 2}'))]
        ),
        ToolMessage(content="7", tool_call_id="call_1"),
    ]
    # one user message: the task alone
    assert chat_asked([MessageIn(role="user", content="hi")]) == Asked(task="hi")
    with pytest.raises(OpenAIError) as caught:
        chat_asked([MessageIn(role="user", content="   ")])
    assert caught.value.param == "messages[0].content"
    # a result for a call no assistant message made: a 400 naming it
    stray = MessageIn(role="tool", tool_call_id="call_9", content="?")
    with pytest.raises(OpenAIError) as caught:
        chat_asked([*messages, stray])
    assert caught.value.status == 400
    assert caught.value.param == "messages[6].tool_call_id"
    assert "'call_9'" in caught.value.message
    # answering the same call twice is the same mistake
    with pytest.raises(OpenAIError) as caught:
        chat_asked([*messages, messages[-1]])
    assert caught.value.param == "messages[6].tool_call_id"
