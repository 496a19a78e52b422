"""A run's ``RunOptions`` in the agent loop: sampling over the agent's, the
client's tools (a call to one ends the rollout, nothing run), the answer's
JSON schema (validated, sent back, retried), and options an agent cannot
take refused before any model call."""

from __future__ import annotations

import json

import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig
from agentrt.agents._run_options import structured_answer
from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ModelRequest,
    RequiredTool,
    RunOptions,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._function import tool

pytestmark = pytest.mark.anyio

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def runtime(script: object, seen: list[ModelRequest]) -> Runtime:
    def record(request: ModelRequest) -> object:
        seen.append(request)
        return script(request) if callable(script) else script

    return Runtime(
        {"agents": {"a": AgentConfig(name="a", temperature=0.3)}, "warm_prefix": False},
        backends=[ScriptedBackend(record)],  # type: ignore[arg-type]
        tools=[add],
    )


async def test_sampling_options_override_the_agents_own() -> None:
    seen: list[ModelRequest] = []
    async with runtime("42", seen) as rt:
        await rt.run("hi", agent="a")
        await rt.run(
            "hi",
            agent="a",
            options=RunOptions(temperature=0.9, top_p=0.5, max_tokens=7, stop=["X"], seed=3),
        )
    first, second = (r.sampling for r in seen)
    assert (first.temperature, first.top_p, first.stop, first.seed) == (0.3, 1.0, [], None)
    assert (second.temperature, second.top_p, second.max_tokens) == (0.9, 0.5, 7)
    assert (second.stop, second.seed) == (["X"], 3)


async def test_a_client_tool_call_ends_the_rollout_unrun() -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> object:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return [ScriptedToolCall("add", {"a": 1, "b": 2})]  # the agent's own tool first
        return [ScriptedToolCall("get_weather", {"city": "Oslo"}, id="c9")]

    async with runtime(script, seen) as rt:
        result = await rt.run("hi", agent="a", options=RunOptions(client_tools=[WEATHER]))
    assert result.status == "succeeded"
    (call,) = json.loads(result.answer or "")
    assert (call["id"], call["name"]) == ("c9", "get_weather")
    assert json.loads(call["arguments"]) == {"city": "Oslo"}
    assert len(seen) == 2
    assert sorted(t.name for t in seen[0].tools) == ["add", "get_weather"]
    assert result.summaries[0].answer == result.answer


async def test_an_answer_off_the_schema_goes_back_and_is_retried() -> None:
    seen: list[ModelRequest] = []
    answers = iter(["nope", '{"n": "x"}', '{"n": 3}'])
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with runtime(lambda _r: next(answers), seen) as rt:
        result = await rt.run("hi", agent="a", options=RunOptions(response_schema=schema))
    assert json.loads(result.answer or "") == {"n": 3}
    assert len(seen) == 3
    feedback = [m for m in seen[2].messages if isinstance(m, UserMessage)][-2:]
    assert "not JSON" in str(feedback[0].content)
    assert "at /n" in str(feedback[1].content)


async def test_out_of_retries_the_rollout_fails_saying_why() -> None:
    seen: list[ModelRequest] = []
    async with runtime("prose", seen) as rt:
        result = await rt.run(
            "hi",
            agent="a",
            options=RunOptions(response_schema={"type": "object"}, response_retries=1),
        )
    assert result.status == "failed"
    assert len(seen) == 2
    assert "response schema" in (result.error or "")


@pytest.mark.parametrize(
    ("options", "where"),
    [
        (RunOptions(client_tools=[ToolSpec(name="add")]), "client_tools[0].name"),
        (RunOptions(client_tools=[WEATHER, WEATHER]), "client_tools[1].name"),
        (RunOptions(response_schema={"type": "no-such-type"}), "response_schema"),
        (RunOptions(tool_choice="required"), "tool_choice"),
        (
            RunOptions(client_tools=[WEATHER], tool_choice=RequiredTool(name="get_time")),
            "tool_choice.name",
        ),
    ],
)
async def test_options_an_agent_cannot_take_are_refused_before_any_call(
    options: RunOptions, where: str
) -> None:
    seen: list[ModelRequest] = []
    async with runtime("42", seen) as rt:
        with pytest.raises(ConfigError) as caught:
            await rt.run("hi", agent="a", options=options)
    assert where in str(caught.value)
    assert seen == []


async def test_a_conversation_reaches_the_model_as_its_messages() -> None:
    seen: list[ModelRequest] = []
    call = ToolCall(id="c1", function=FunctionCall("get_weather", '{"city": "Oslo"}'))
    conversation: list[ChatMessage] = [
        UserMessage(content="Weather in Oslo?"),
        AssistantMessage(tool_calls=[call]),
        ToolMessage(content="rain", tool_call_id="c1"),
    ]
    options = RunOptions(
        client_tools=[WEATHER], instructions="Be brief.", conversation=conversation
    )
    async with runtime("Rain in Oslo.", seen) as rt:
        result = await rt.run("Weather in Oslo?", agent="a", options=options)
    assert result.answer == "Rain in Oslo."
    (request,) = seen
    assert request.messages == [
        SystemMessage(content=AgentConfig(name="a").instructions + "\n\nBe brief."),
        *conversation,
    ]


def test_a_result_for_a_call_never_made_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"conversation\[1\]\.tool_call_id: .*'c7'"):
        RunOptions(
            conversation=[UserMessage(content="hi"), ToolMessage(content="x", tool_call_id="c7")]
        )


async def test_a_forced_call_the_model_does_not_make_fails_the_rollout() -> None:
    seen: list[ModelRequest] = []
    async with runtime("prose only", seen) as rt:
        result = await rt.run(
            "hi", agent="a", options=RunOptions(client_tools=[WEATHER], tool_choice="required")
        )
    assert result.status == "failed"
    assert "required to call a client tool (get_weather)" in (result.error or "")
    # one answer, one forced call: never a loop
    assert [r.tool_choice for r in seen] == ["auto", "required"]


def test_structured_answer_reads_a_fenced_answer() -> None:
    schema = {"type": "array"}
    assert structured_answer(schema, "```json\n[1, 2]\n```") == ("[1, 2]", None)
    body, problem = structured_answer(schema, '{"a": 1}')
    assert body == '{"a": 1}'
    assert problem is not None
    assert "not of type 'array'" in problem
