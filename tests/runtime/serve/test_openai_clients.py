"""The OpenAI-compatible endpoints driven by the real clients as their model:
the official ``openai`` client (chat completions and responses), the OpenAI
Agents SDK (its default model: the Responses API) and pydantic-ai (chat
completions).  The daemon (``serve_manager``: uvicorn on a real socket) runs
the agent on a scripted model that records every request it gets, so each
test sees what the client's fields became in the agent's model calls."""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import msgspec
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import ToolChoiceFunction
from pydantic import BaseModel
from pydantic_ai import Agent as PaiAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider as PaiProvider

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    ModelReply,
    ModelRequest,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agentrt.runtime.config._config_file import ServerConfig
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.serve._metrics import DaemonMetrics
from agentrt.testing import ScriptedBackend, ScriptedReply, ScriptedToolCall
from tests._support.backends import ForwardingBackend
from tests._support.daemon import ServedManager, serving_manager, solver_daemon_config

pytestmark = [pytest.mark.anyio, pytest.mark.process]

# The OpenAI Agents SDK's import name is ``agents``, which type checkers here
# resolve to agentrt's own ``agents`` folder: it is loaded by name, untyped.
sdk: Any = importlib.import_module("agents")
assert hasattr(sdk, "Runner"), (
    "`agents` here is agentrt's folder, not the OpenAI Agents SDK: run `pytest`, "
    "not `python -m pytest`, from the repository"
)
sdk_provider: Any = importlib.import_module("agents.models.openai_provider")

Reply = str | ScriptedReply | ScriptedToolCall


def sdk_run_config(client: openai.AsyncOpenAI) -> Any:
    """An OpenAI Agents SDK run configuration whose models are served by ``client``."""
    return sdk.RunConfig(
        model_provider=sdk_provider.OpenAIProvider(openai_client=client),
        tracing_disabled=True,
    )


def travel_tools(ran: list[str]) -> list[Any]:
    """The SDK tools ``get_weather`` ("sunny") and ``get_time`` ("noon");
    each call is noted in ``ran`` as ``"weather <city>"`` or ``"time <city>"``."""

    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(f"weather {city}")
        return "sunny"

    def clock(city: str) -> str:
        """The time in a city."""
        ran.append(f"time {city}")
        return "noon"

    return [
        sdk.function_tool(weather, name_override="get_weather"),
        sdk.function_tool(clock, name_override="get_time"),
    ]


@dataclass
class Model:
    """A scripted model that keeps every request."""

    script: Callable[[ModelRequest], Reply]
    requests: list[ModelRequest] = field(default_factory=list)

    def __call__(self, request: ModelRequest) -> Reply:
        self.requests.append(request)
        return self.script(request)


@asynccontextmanager
async def daemon(
    tmp_path: Path, model: Model | WithoutLogprobs, *, token_delay_s: float = 0.0
) -> AsyncIterator[ServedManager]:
    config = solver_daemon_config(
        tmp_path, ServerConfig(port=0, sse_keepalive_s=0.1, shutdown_grace_s=0.5)
    )
    backend = (
        model
        if isinstance(model, WithoutLogprobs)
        else ScriptedBackend(model, token_delay_s=token_delay_s)
    )
    metrics = DaemonMetrics(process_metrics=False)
    async with serving_manager(config, [backend], metrics=metrics) as served:
        yield served


def task_of(request: ModelRequest) -> str:
    """The run's task as the model sees it (the first user message)."""
    return next(str(m.content) for m in request.messages if isinstance(m, UserMessage))


def roles(messages: list[ChatMessage]) -> list[str]:
    return [type(m).__struct_config__.tag for m in messages]  # type: ignore[misc]


def tool_names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


def weather_script(request: ModelRequest) -> Reply:
    """Calls the client's ``get_weather`` until its result is in the conversation."""
    if any(isinstance(m, ToolMessage) for m in request.messages):
        return "It is sunny in Paris."
    if "get_weather" in tool_names(request):
        return ScriptedToolCall("get_weather", {"city": "Paris"}, id="call_w1")
    return "no tool"


WEATHER_PARAMETERS: dict[str, object] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": WEATHER_PARAMETERS,
    },
}


# -- chat completions, the openai client ------------------------------------------


async def test_sampling_fields_reach_every_model_call(tmp_path: Path) -> None:
    model = Model(lambda _request: "42")
    async with daemon(tmp_path, model) as d, d.openai() as client:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            temperature=0.25,
            top_p=0.5,
            max_tokens=5,
            stop="END",
            seed=7,
        )
        assert reply.choices[0].message.content == "42"
        sampling = model.requests[-1].sampling
        assert (sampling.temperature, sampling.top_p, sampling.max_tokens) == (0.25, 0.5, 5)
        assert (sampling.stop, sampling.seed) == (["END"], 7)
        # max_completion_tokens is the same bound; without fields, the agent's own
        await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "again"}],
            max_completion_tokens=9,
        )
        assert model.requests[-1].sampling.max_tokens == 9
        await client.chat.completions.create(
            model="agentrt/solver", messages=[{"role": "user", "content": "plain"}]
        )
        plain = model.requests[-1].sampling
        assert (plain.temperature, plain.max_tokens, plain.stop) == (0.7, 1024, [])


async def test_a_client_tool_call_round_trip(tmp_path: Path) -> None:
    model = Model(weather_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        first = await client.chat.completions.create(
            model="agentrt/solver", messages=messages, tools=[WEATHER_TOOL]
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert len(calls) == 1
        call = calls[0]
        assert call.type == "function"
        assert call.id == "call_w1"
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        # the client's tool was offered beside the agent's own, with its schema
        offered = {t.name: t for t in model.requests[-1].tools}
        assert offered["get_weather"].parameters["required"] == ["city"]
        # the client runs it and continues the conversation
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"},
        ]
        second = await client.chat.completions.create(
            model="agentrt/solver", messages=messages, tools=[WEATHER_TOOL]
        )
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content == "It is sunny in Paris."
        # the model got the conversation as it is, not retold
        assert roles(model.requests[-1].messages) == ["system", "user", "assistant", "tool"]
        _, user, assistant, result = model.requests[-1].messages
        assert user == UserMessage(content="Weather in Paris?")
        assert isinstance(assistant, AssistantMessage)
        assert [(c.id, c.function.name) for c in assistant.tool_calls] == [
            ("call_w1", "get_weather")
        ]
        assert result == ToolMessage(content="sunny, 24 C", tool_call_id="call_w1")


async def test_client_tools_stream_their_calls(tmp_path: Path) -> None:
    async with daemon(tmp_path, Model(weather_script)) as d, d.openai() as client:
        stream = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER_TOOL],
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
        deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
        assert [(d.index, d.id, d.function and d.function.name) for d in deltas] == [
            (0, "call_w1", "get_weather")
        ]
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] == "tool_calls"


def calculator_first_script(request: ModelRequest) -> Reply:
    """Uses the agent's own calculator, then answers in text, unless a
    client tool call is required: then it calls the first one offered."""
    if request.tool_choice == "required":
        return ScriptedToolCall(request.tools[0].name, {"city": "Paris"}, id="call_forced")
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return ScriptedToolCall("calculator", {"expression": "6 * 7"}, id="call_calc")
    return "42, and no tool of yours needed."


GET_TIME_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_time", "parameters": WEATHER_PARAMETERS},
}


async def test_required_tool_choice_ends_the_turn_on_a_client_call(tmp_path: Path) -> None:
    model = Model(calculator_first_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER_TOOL, GET_TIME_TOOL],
            tool_choice="required",
        )
    assert reply.choices[0].finish_reason == "tool_calls"
    calls = reply.choices[0].message.tool_calls or []
    assert [c.id for c in calls] == ["call_forced"]
    # the agent used its own tool under `auto` (a required choice it could
    # satisfy would loop), answered, and was asked once more for a client call
    asked = [(r.tool_choice, sorted(tool_names(r))) for r in model.requests]
    assert asked == [
        ("auto", ["calculator", "get_time", "get_weather"]),
        ("auto", ["calculator", "get_time", "get_weather"]),
        ("required", ["get_time", "get_weather"]),
    ]
    assert roles(model.requests[1].messages)[-2:] == ["assistant", "tool"]  # the calculator ran


async def test_a_named_tool_choice_calls_that_tool(tmp_path: Path) -> None:
    model = Model(calculator_first_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "What time is it in Paris?"}],
            tools=[WEATHER_TOOL, GET_TIME_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
        calls = reply.choices[0].message.tool_calls or []
        assert [(c.id, c.function.name) for c in calls if c.type == "function"] == [
            ("call_forced", "get_time")
        ]
        assert [sorted(tool_names(r)) for r in model.requests] == [
            ["calculator", "get_time"],  # the named tool only, beside the agent's own
            ["calculator", "get_time"],
            ["get_time"],
        ]
        # the Responses API's spelling of it
        time_tool: Any = {"type": "function", "name": "get_time", "parameters": WEATHER_PARAMETERS}
        response = await client.responses.create(
            model="agentrt/solver",
            input="What time is it in Paris?",
            tools=[time_tool],
            tool_choice={"type": "function", "name": "get_time"},
        )
        assert [i.type for i in response.output] == ["function_call"]
        assert response.tool_choice == ToolChoiceFunction(type="function", name="get_time")


async def test_tool_choice_none_hides_the_client_tools(tmp_path: Path) -> None:
    model = Model(calculator_first_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            tools=[WEATHER_TOOL],
            tool_choice="none",
        )
    assert reply.choices[0].message.content == "42, and no tool of yours needed."
    assert [tool_names(r) for r in model.requests] == [["calculator"], ["calculator"]]


async def test_response_format_is_validated_and_retried(tmp_path: Path) -> None:
    answers = iter(['{"city": 3}', '```json\n{"city": "Paris", "temp": 24}\n```'])
    model = Model(lambda _request: next(answers))
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
        "required": ["city", "temp"],
    }
    async with daemon(tmp_path, model) as d, d.openai() as client:
        create: Any = client.chat.completions.create
        reply = await create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "Weather in Paris as JSON"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": schema, "strict": True},
            },
        )
        assert json.loads(reply.choices[0].message.content or "") == {"city": "Paris", "temp": 24}
        assert len(model.requests) == 2
        system = str(model.requests[0].messages[0].content)
        assert '"required": ["city", "temp"]' in system
        feedback = model.requests[1].messages[-1]
        assert isinstance(feedback, UserMessage)
        assert "does not match the schema" in str(feedback.content)


async def test_a_streamed_structured_answer_is_only_the_valid_json(tmp_path: Path) -> None:
    answers = iter(["not json", '{"city": "Paris"}'])
    model = Model(lambda _request: next(answers))
    async with daemon(tmp_path, model) as d, d.openai() as client:
        create: Any = client.chat.completions.create
        stream = await create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "Weather in Paris as JSON"}],
            response_format={"type": "json_object"},
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(content) == {"city": "Paris"}
    assert len(model.requests) == 2


async def test_an_answer_that_never_matches_fails_the_run(tmp_path: Path) -> None:
    model = Model(lambda _request: "not json")
    async with daemon(tmp_path, model) as d, d.openai() as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="agentrt/solver",
                messages=[{"role": "user", "content": "JSON please"}],
                response_format={"type": "json_object"},
            )
        assert caught.value.status_code == 502
        assert "not JSON" in caught.value.message
        assert len(model.requests) == 3  # the answer and two retries


async def test_logprobs_of_the_final_reply(tmp_path: Path) -> None:
    model = Model(lambda _request: "42")
    async with daemon(tmp_path, model) as d, d.openai() as client:
        reply = await client.chat.completions.create(
            model="agentrt/solver",
            messages=[{"role": "user", "content": "6 x 7?"}],
            logprobs=True,
            top_logprobs=2,
        )
        logprobs = reply.choices[0].logprobs
        assert logprobs is not None
        assert logprobs.content
        assert "".join(t.token for t in logprobs.content) == "42"
        assert model.requests[-1].logprobs
        assert model.requests[-1].top_logprobs == 2


def _assert_refused(error: openai.BadRequestError, param: str, says: str) -> None:
    """A 400 naming ``param``, its message saying ``says``."""
    body = error.body
    assert isinstance(body, dict)
    assert body["param"] == param
    assert says in body["message"]


class WithoutLogprobs(ForwardingBackend[ScriptedBackend]):
    """A backend that never gives log-probabilities (a server that ignores
    ``logprobs``): the scripted model's replies, their logprobs dropped."""

    def __init__(self, script: Callable[[ModelRequest], Reply]) -> None:
        super().__init__(ScriptedBackend(script))

    @property
    def name(self) -> str:
        return "no-logprobs"

    @staticmethod
    def _drop(reply: ModelReply) -> ModelReply:
        choices = [msgspec.structs.replace(c, logprobs=None) for c in reply.choices]
        return msgspec.structs.replace(reply, choices=choices)

    async def complete(self, request: ModelRequest) -> ModelReply:
        return self._drop(await self.inner.complete(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        async for delta in self.inner.stream(request):
            reply = None if delta.reply is None else self._drop(delta.reply)
            yield msgspec.structs.replace(delta, logprobs=[], reply=reply)


async def test_logprobs_a_backend_does_not_give_are_a_400(tmp_path: Path) -> None:
    backend = WithoutLogprobs(lambda _request: "42")
    async with backend, daemon(tmp_path, backend) as d, d.openai() as client:
        plain = await client.chat.completions.create(
            model="agentrt/solver", messages=[{"role": "user", "content": "6 x 7?"}]
        )
        assert plain.choices[0].message.content == "42"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="agentrt/solver",
                messages=[{"role": "user", "content": "6 x 7?"}],
                logprobs=True,
            )
    _assert_refused(caught.value, "logprobs", "gave no log-probabilities")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [WEATHER_TOOL], "extra_body": {"rollouts": 3}}, "rollouts"),
        ({"logprobs": True, "extra_body": {"agentrt": {"rollouts": 2}}}, "agentrt.rollouts"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"n": 2}, "n"),
        ({"extra_body": {"rolouts": 2}}, "rolouts"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
        (
            {
                "tools": [WEATHER_TOOL],
                "tool_choice": {"type": "function", "function": {"name": "x"}},
            },
            "tool_choice.function.name",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"reasoning_effort": "high"}, "reasoning_effort"),
    ],
)
async def test_fields_agentrt_cannot_honour_are_refused_by_name(
    tmp_path: Path, extra: dict[str, Any], param: str
) -> None:
    model = Model(lambda _request: "42")
    async with daemon(tmp_path, model) as d, d.openai() as client:
        create: Any = client.chat.completions.create
        with pytest.raises(openai.BadRequestError) as caught:
            await create(
                model="agentrt/solver", messages=[{"role": "user", "content": "hi"}], **extra
            )
        body = caught.value.body
        assert isinstance(body, dict)
        assert body["param"] == param, body
        assert body["type"] == "invalid_request_error"
        assert model.requests == []  # nothing ran


# -- the Responses API, the openai client ------------------------------------------


async def test_responses_create_and_stream(tmp_path: Path) -> None:
    model = Model(lambda _request: "42")
    async with daemon(tmp_path, model) as d, d.openai() as client:
        response = await client.responses.create(
            model="agentrt/solver",
            input="6 x 7?",
            instructions="Be exact.",
            max_output_tokens=16,
            temperature=0.1,
        )
        assert response.status == "completed"
        assert response.output_text == "42"
        assert response.usage is not None
        assert response.usage.total_tokens > 0
        assert model.requests[-1].sampling.max_tokens == 16
        system = model.requests[-1].messages[0]
        assert system == SystemMessage(content="Answer briefly.\n\nBe exact.")

        events = [
            event
            async for event in await client.responses.create(
                model="agentrt/solver", input="6 x 7?", stream=True
            )
        ]
        kinds = [e.type for e in events]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        assert "response.output_text.delta" in kinds
        assert [e.sequence_number for e in events] == list(range(len(events)))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == "42"


async def test_responses_stream_the_answer_while_it_is_generated(tmp_path: Path) -> None:
    answer = "one two three four five six seven eight"
    model = Model(lambda _request: answer)
    async with (
        daemon(tmp_path, model, token_delay_s=0.05) as d,
        d.openai() as client,
    ):
        stream = await client.responses.create(model="agentrt/solver", input="Count", stream=True)
        deltas: list[str] = []
        status_at_first = None
        final_text = None
        async for event in stream:
            if event.type == "response.output_text.delta":
                if not deltas:
                    info = await d.manager.get(event.item_id.removeprefix("msg_"))
                    status_at_first = info.status if info is not None else None
                deltas.append(event.delta)
            if event.type == "response.completed":
                final_text = event.response.output_text
    assert status_at_first == "running"  # the text came while the model generated it
    assert len(deltas) > 1
    assert "".join(deltas) == answer == final_text


async def test_responses_stream_the_progress_of_several_rollouts(tmp_path: Path) -> None:
    model = Model(lambda _request: "42")
    async with daemon(tmp_path, model) as d, d.openai() as client:
        stream = await client.responses.create(
            model="agentrt/solver", input="6 x 7?", stream=True, extra_body={"rollouts": 2}
        )
        events = [event async for event in stream]
        kinds = [e.type for e in events]
        # progress first, as a reasoning summary, closed before the answer opens
        first_progress = kinds.index("response.reasoning_summary_text.delta")
        assert first_progress < kinds.index("response.reasoning_summary_text.done")
        assert kinds.index("response.reasoning_summary_text.done") < kinds.index(
            "response.output_text.delta"
        )
        progress = "".join(
            e.delta for e in events if e.type == "response.reasoning_summary_text.delta"
        )
        assert "rollout r0 finished: answer: 42" in progress
        assert "rollout r1 finished: answer: 42" in progress
        assert [e.sequence_number for e in events] == list(range(len(events)))
        final = events[-1]
        assert final.type == "response.completed"
        output = final.response.output
        assert [item.type for item in output] == ["reasoning", "message"]
        assert final.response.output_text == "42"
        # a client sending the output back (the summary too) continues the conversation
        again = await client.responses.create(
            model="agentrt/solver",
            input=[
                {"role": "user", "content": "6 x 7?"},
                *[cast(Any, item.model_dump(exclude_none=True)) for item in output],
                {"role": "user", "content": "And 7 x 6?"},
            ],
        )
        assert again.output_text == "42"
        assert roles(model.requests[-1].messages) == ["system", "user", "assistant", "user"]


async def test_responses_function_call_round_trip(tmp_path: Path) -> None:
    model = Model(weather_script)
    tool: Any = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": WEATHER_PARAMETERS,
        "strict": True,
    }
    async with daemon(tmp_path, model) as d, d.openai() as client:
        first = await client.responses.create(
            model="agentrt/solver",
            input="Weather in Paris?",
            tools=[tool],
        )
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1
        call = calls[0]
        assert (call.name, call.call_id) == ("get_weather", "call_w1")
        second = await client.responses.create(
            model="agentrt/solver",
            input=[
                {"role": "user", "content": "Weather in Paris?"},
                *[cast(Any, item.model_dump(exclude_none=True)) for item in first.output],
                {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
            ],
            tools=[tool],
        )
        assert second.output_text == "It is sunny in Paris."


async def test_a_result_for_an_unknown_call_is_a_400_naming_it(tmp_path: Path) -> None:
    model = Model(weather_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="agentrt/solver",
                input=[
                    {"role": "user", "content": "Weather in Paris?"},
                    {"type": "function_call_output", "call_id": "call_nope", "output": "sunny"},
                ],
            )
        _assert_refused(caught.value, "input[1].call_id", "'call_nope'")
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="agentrt/solver",
                messages=[
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "tool", "tool_call_id": "call_nope", "content": "sunny"},
                ],
            )
        _assert_refused(caught.value, "messages[1].tool_call_id", "'call_nope'")
    assert model.requests == []


async def test_previous_response_id_continues_the_conversation(tmp_path: Path) -> None:
    ran: list[str] = []
    model = Model(two_tools_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        config = sdk_run_config(client)
        agent = sdk.Agent(name="travel", model="solver", tools=travel_tools(ran))
        # the SDK sends only the new items, naming the response before them
        first = await sdk.Runner.run(
            agent, "Weather and time in Paris?", run_config=config, auto_previous_response_id=True
        )
        assert first.final_output == "Turn 1: sunny at noon."
        second = await sdk.Runner.run(
            agent,
            "And tomorrow?",
            run_config=config,
            previous_response_id=first.last_response_id,
            auto_previous_response_id=True,
        )
        assert second.final_output == "Turn 2: sunny at noon."
        assert ran == ["weather Paris", "time Paris"] * 2
        assert len(model.requests) == 6
        last = model.requests[-1].messages
        assert roles(last) == ["system", *NATIVE_TURN, "assistant", *NATIVE_TURN]
        # an unknown response: a 404 naming it
        with pytest.raises(openai.NotFoundError) as missing:
            await client.responses.create(
                model="agentrt/solver", input="hi", previous_response_id="resp_run-nobody"
            )
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["param"] == "previous_response_id"
        assert "'resp_run-nobody'" in missing.value.body["message"]


async def test_a_conversation_holds_the_turns_of_its_responses(tmp_path: Path) -> None:
    model = Model(two_tools_script)
    tools: Any = [
        {"type": "function", "name": name, "parameters": WEATHER_PARAMETERS}
        for name in ("get_weather", "get_time")
    ]
    async with daemon(tmp_path, model) as d, d.openai() as client:
        conversation = await client.conversations.create(metadata={"user": "ann"})
        asked: Any = "Weather and time in Paris?"
        for result in ("sunny", "noon", None):
            # each response sends only what it adds: the question, then a tool's result
            response = await client.responses.create(
                model="agentrt/solver", input=asked, tools=tools, conversation=conversation.id
            )
            assert response.conversation is not None
            assert response.conversation.id == conversation.id
            calls = [item for item in response.output if item.type == "function_call"]
            if result is None:
                assert calls == []
                break
            asked = [
                {"type": "function_call_output", "call_id": calls[0].call_id, "output": result}
            ]
        assert response.output_text == "Turn 1: sunny at noon."
        again = await client.responses.create(
            model="agentrt/solver", input="And tomorrow?", tools=tools, conversation=conversation.id
        )
        while again.output_text == "":  # the client runs the tools
            call = next(item for item in again.output if item.type == "function_call")
            again = await client.responses.create(
                model="agentrt/solver",
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "x"}],
                tools=tools,
                conversation=conversation.id,
            )
        assert again.output_text == "Turn 2: x at x."
        assert len(model.requests) == 6
        assert roles(model.requests[-1].messages) == [
            "system",
            *NATIVE_TURN,
            "assistant",
            *NATIVE_TURN,
        ]
        # the conversation is a thread of the daemon's
        async with d.http() as http:
            thread = (await http.get(f"/v1/threads/{conversation.id}")).json()
        assert len(thread["runs"]) == 6
        assert (await client.conversations.retrieve(conversation.id)).metadata == {"user": "ann"}
        assert (await client.conversations.delete(conversation.id)).deleted
        with pytest.raises(openai.NotFoundError) as missing:
            await client.responses.create(
                model="agentrt/solver", input="hi", conversation=conversation.id
            )
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["param"] == "conversation"
        assert conversation.id in missing.value.body["message"]


async def test_responses_refusals_have_openai_shape(tmp_path: Path) -> None:
    async with daemon(tmp_path, Model(lambda _request: "42")) as d, d.openai() as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="agentrt/solver", input="hi", prompt_cache_retention="24h"
            )
        assert isinstance(caught.value.body, dict)
        assert caught.value.body["param"] == "prompt_cache_retention"
        with pytest.raises(openai.NotFoundError) as missing:
            await client.responses.create(model="agentrt/nobody", input="hi")
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["code"] == "model_not_found"


async def test_errors_under_v1_have_openai_shape(tmp_path: Path) -> None:
    async with daemon(tmp_path, Model(lambda _request: "42")) as d, d.openai() as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.embeddings.create(model="agentrt/solver", input="hi")
        assert isinstance(missing.value.body, dict)
        assert "/v1/chat/completions" in missing.value.body["message"]
        async with d.http() as http:
            wrong_method = await http.get("/v1/chat/completions")
            assert wrong_method.status_code == 405
            assert wrong_method.json()["error"]["type"] == "invalid_request_error"
            own = await http.get("/v1/runs/run-nobody")  # agentrt's own API: its own shape
            assert own.status_code == 404
            assert own.json()["error"] == "not_found"


# -- the OpenAI Agents SDK (its default model: the Responses API) ----------------------


class Weather(BaseModel):
    city: str
    temp: float


async def test_openai_agents_sdk_runs_its_tools_through_agentrt(tmp_path: Path) -> None:
    ran: list[str] = []

    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return "sunny, 24 C"

    get_weather = sdk.function_tool(weather, name_override="get_weather")

    model = Model(weather_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        config = sdk_run_config(client)
        agent = sdk.Agent(name="weather", model="solver", tools=[get_weather])
        result = await sdk.Runner.run(agent, "Weather in Paris?", run_config=config)
        assert result.final_output == "It is sunny in Paris."
        assert ran == ["Paris"]

        streamed = sdk.Runner.run_streamed(agent, "Weather in Paris?", run_config=config)
        kinds = [event.type async for event in streamed.stream_events()]
        assert streamed.final_output == "It is sunny in Paris."
        assert "raw_response_event" in kinds
        assert ran == ["Paris", "Paris"]


async def test_openai_agents_sdk_structured_output(tmp_path: Path) -> None:
    model = Model(lambda _request: '{"city": "Paris", "temp": 24}')
    async with daemon(tmp_path, model) as d, d.openai() as client:
        config = sdk_run_config(client)
        agent = sdk.Agent(name="weather", model="solver", output_type=Weather)
        result = await sdk.Runner.run(agent, "Weather in Paris?", run_config=config)
        assert result.final_output == Weather(city="Paris", temp=24)
        assert '"temp"' in str(model.requests[-1].messages[0].content)  # the schema, told


def two_tools_script(request: ModelRequest) -> Reply:
    """Each user turn: the client's ``get_weather``, then its ``get_time``,
    then an answer from both results (ids numbered by turn)."""
    messages = request.messages
    turn = sum(isinstance(m, UserMessage) for m in messages)
    last_user = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    results = [m for m in messages[last_user:] if isinstance(m, ToolMessage)]
    if not results:
        return ScriptedToolCall("get_weather", {"city": "Paris"}, id=f"call_w{turn}")
    if len(results) == 1:
        return ScriptedToolCall("get_time", {"city": "Paris"}, id=f"call_t{turn}")
    return f"Turn {turn}: {results[0].content} at {results[1].content}."


NATIVE_TURN = ["user", "assistant", "tool", "assistant", "tool"]
"""The roles of one user turn's messages: the question, a call and its
result twice (then, in the next turn's prompt, the answer)."""


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_openai_agents_sdk_multi_tool_conversation(tmp_path: Path, api: str) -> None:
    ran: list[str] = []
    tools = travel_tools(ran)
    model = Model(two_tools_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        config = sdk_run_config(client)
        chosen: Any = (
            "solver"
            if api == "responses"
            else sdk.OpenAIChatCompletionsModel(model="solver", openai_client=client)
        )
        agent = sdk.Agent(name="travel", model=chosen, tools=tools)
        first = await sdk.Runner.run(agent, "Weather and time in Paris?", run_config=config)
        assert first.final_output == "Turn 1: sunny at noon."
        assert ran == ["weather Paris", "time Paris"]  # each tool ran once
        assert len(model.requests) == 3  # two calls and the answer: no loop
        last = model.requests[-1].messages
        assert roles(last) == ["system", *NATIVE_TURN]
        assert [m.tool_call_id for m in last if isinstance(m, ToolMessage)] == [
            "call_w1",
            "call_t1",
        ]
        # the next turn: the conversation so far, then a new question
        follow_up = [*first.to_input_list(), {"role": "user", "content": "And tomorrow?"}]
        second = await sdk.Runner.run(agent, follow_up, run_config=config)
        assert second.final_output == "Turn 2: sunny at noon."
        assert len(ran) == 4
        assert len(model.requests) == 6
        last = model.requests[-1].messages
        assert roles(last) == ["system", *NATIVE_TURN, "assistant", *NATIVE_TURN]
        assert last[6] == AssistantMessage(content="Turn 1: sunny at noon.")


# -- pydantic-ai (chat completions) --------------------------------------------------


def final_result_script(request: ModelRequest) -> Reply:
    """pydantic-ai's output tool: call it with the answer."""
    if "final_result" in tool_names(request):
        return ScriptedToolCall("final_result", {"city": "Paris", "temp": 24})
    return "no output tool"


async def test_pydantic_ai_output_type(tmp_path: Path) -> None:
    model = Model(final_result_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        agent = PaiAgent(
            OpenAIChatModel("agentrt/solver", provider=PaiProvider(openai_client=client)),
            output_type=Weather,
        )
        result = await agent.run("Weather in Paris?")
        assert result.output == Weather(city="Paris", temp=24)
        assert len(model.requests) == 1  # the model called the output tool at once
        # a model that answers in text first is asked once more, for the output tool
        model.script = lambda r: (
            final_result_script(r) if r.tool_choice == "required" else "Paris, 24 C"
        )
        result = await agent.run("Weather in Paris?")
        assert result.output == Weather(city="Paris", temp=24)
        asked = [(r.tool_choice, sorted(tool_names(r))) for r in model.requests[1:]]
        assert asked == [("auto", ["calculator", "final_result"]), ("required", ["final_result"])]


async def test_pydantic_ai_tools_and_streaming(tmp_path: Path) -> None:
    model = Model(weather_script)
    async with daemon(tmp_path, model) as d, d.openai() as client:
        agent = PaiAgent(
            OpenAIChatModel("agentrt/solver", provider=PaiProvider(openai_client=client))
        )
        ran: list[str] = []

        @agent.tool_plain
        def get_weather(city: str) -> str:
            """The weather in a city."""
            ran.append(city)
            return "sunny, 24 C"

        result = await agent.run("Weather in Paris?")
        assert result.output == "It is sunny in Paris."
        assert ran == ["Paris"]
        async with agent.run_stream("Weather in Paris?") as stream:
            text = await stream.get_output()
        assert text == "It is sunny in Paris."
        assert ran == ["Paris", "Paris"]


# -- langchain-openai (chat completions) ----------------------------------------------


async def test_langchain_structured_output_through_function_calling(tmp_path: Path) -> None:
    from langchain_openai import ChatOpenAI

    def script(request: ModelRequest) -> Reply:
        # an answer in prose first: the named tool choice asks once more
        if request.tool_choice != "required":
            return "It is sunny and 24 C in Paris."
        return ScriptedToolCall(request.tools[0].name, {"city": "Paris", "temp": 24})

    model = Model(script)
    async with daemon(tmp_path, model) as d, httpx.AsyncClient(timeout=20.0) as http:
        chat = ChatOpenAI(
            model="agentrt/solver",
            base_url=d.url + "/v1",
            api_key="x",
            max_retries=0,
            http_async_client=http,
        )
        structured = chat.with_structured_output(Weather, method="function_calling")
        answer = await structured.ainvoke("Weather in Paris?")
    assert answer == Weather(city="Paris", temp=24)
    asked = [(r.tool_choice, sorted(tool_names(r))) for r in model.requests]
    assert asked == [("auto", ["Weather", "calculator"]), ("required", ["Weather"])]


# -- strict REST ------------------------------------------------------------------


async def test_unknown_run_fields_are_a_400_naming_them(tmp_path: Path) -> None:
    model = Model(lambda _request: "42")
    async with daemon(tmp_path, model) as d, d.http() as http:
        refused = await http.post("/v1/runs", json={"task": "x", "rollouts": 4})
        assert refused.status_code == 400, refused.text
        assert refused.json()["where"] == "rollouts"
        nested = await http.post("/v1/runs", json={"task": "x", "scaling": {"rollout": 2}})
        assert nested.status_code == 400
        assert nested.json()["where"] == "scaling.rollout"
        talk = {"conversation": [{"role": "user", "content": "hi"}]}
        conversation = await http.post("/v1/runs", json={"task": "hi", "options": talk})
        assert conversation.status_code == 400, conversation.text
        assert conversation.json()["where"] == "options.conversation"
        empty = await http.post("/v1/runs", json={"task": "  "})
        assert empty.status_code == 422
        assert empty.json()["where"] == "task"
        assert model.requests == []
        # JSON does not tell 3.0 from 3 (nor does the OpenAPI document's integer)
        ok = await http.post(
            "/v1/runs", json={"task": "x", "options": {"temperature": 0.1, "max_tokens": 3.0}}
        )
        assert ok.status_code == 201, ok.text
        await d.manager.wait(ok.json()["run_id"])
        assert model.requests[-1].sampling.temperature == 0.1
        assert model.requests[-1].sampling.max_tokens == 3


# -- docs/openai.md ------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[3] / "docs" / "openai.md"


def doc_script(request: ModelRequest) -> Reply:
    """What the doc's examples ask: the weather (a client tool), or the
    answer through pydantic-ai's output tool."""
    if "final_result" in tool_names(request):
        return ScriptedToolCall("final_result", {"city": "Paris", "temp": 24})
    return weather_script(request)


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_the_python_blocks_of_the_openai_doc_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3
    expected = ["It is sunny in Paris.", "It is sunny in Paris.", "city='Paris' temp=24.0"]
    async with daemon(tmp_path, Model(doc_script)) as d:
        env = {**os.environ, "AGENTRT_URL": d.url + "/v1", "PYTHONWARNINGS": "error"}
        for block, output in zip(blocks, expected, strict=True):
            # cwd: not the repository, whose `agents` folder would shadow the SDK's
            done = await anyio.run_process(
                [sys.executable, "-"], input=block.encode(), cwd=tmp_path, env=env, check=False
            )
            assert done.returncode == 0, done.stderr.decode()[-3000:]
            assert done.stdout.decode().strip() == output
