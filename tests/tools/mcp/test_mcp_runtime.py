"""MCP servers' requests through whole runs of a ``Runtime``: the agent
calls ``server-everything``'s sampling tool and the server's
``sampling/createMessage`` is served by the runtime's backend under the
server's policy (its token cap) and charged to the run that called the
tool; a server's question reaches the embedding's callback, or becomes
the run's ``ElicitationRequested`` event answered through the Runtime."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig
from agentrt.protocols import (
    ElicitationRequested,
    ModelRequest,
    RunFinished,
    ScalingSpec,
    ToolMessage,
    UserMessage,
)
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ElicitationReply
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from tests._support.approvals import Person

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def test_sampling_is_served_by_the_runs_model_and_charged_to_the_run(
    everything: StdioServerConfig,
) -> None:
    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and "trigger-sampling-request context" in str(
            last.content
        ):
            return "a haiku about tests"  # the server's sampling request
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedToolCall(
                "everything__trigger-sampling-request", {"prompt": "write", "maxTokens": 500}
            )
        return "done"

    backend = ScriptedBackend(script, name="scripted", models=["scripted"])
    server = StdioServerConfig.model_validate(
        {**everything.model_dump(), "sampling": {"mode": "allow", "max_tokens": 64}}
    )
    config = {"mcp": {"everything": server.model_dump(mode="json")}}
    agent = AgentConfig(name="sampler", tools=["everything__trigger-sampling-request"])
    async with Runtime(config, backends=[backend], agents={"sampler": agent}) as rt:
        result = await rt.run("go", agent="sampler", scaling=ScalingSpec(rollouts=1))
    assert result.answer == "done"
    [sampling] = [r for r in backend.requests if "trigger-sampling-request context" in str(r)]
    assert sampling.sampling.max_tokens == 64  # the policy's cap, not the server's 500
    assert sampling.messages[0].content == "You are a helpful test server."
    # Three model calls, all on the run's ledger: two steps and the server's sampling.
    assert result.cost.model_calls == 3


def _calls_then_answers(tool: str, answer: str = "done") -> ScriptedBackend:
    def script(request: ModelRequest) -> Any:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedToolCall(tool, {})
        return answer

    return ScriptedBackend(script, name="scripted", models=["scripted"])


async def test_the_embeddings_callback_answers_a_servers_question(
    everything: StdioServerConfig,
) -> None:
    ask = Person(content={"name": "Lovelace"})
    backend = _calls_then_answers("everything__trigger-elicitation-request")
    server = StdioServerConfig.model_validate(
        {**everything.model_dump(), "elicitation": {"mode": "ask"}}
    )
    config = {"mcp": {"everything": server.model_dump(mode="json")}}
    agent = AgentConfig(name="asker", tools=["everything__trigger-elicitation-request"])
    async with Runtime(
        config, backends=[backend], agents={"asker": agent}, on_elicitation=ask
    ) as rt:
        result = await rt.run("go", agent="asker", run_id="run-ask")
    assert result.answer == "done"
    [question] = ask.asked
    assert (question.run_id, question.server, question.mode) == ("run-ask", "everything", "form")
    assert "name" in (question.requested_schema or {}).get("properties", {})
    [tool_message] = [m for m in backend.requests[-1].messages if isinstance(m, ToolMessage)]
    assert '"name": "Lovelace"' in tool_message.content


async def test_a_question_relayed_as_a_run_event_is_answered_through_the_runtime(
    everything: StdioServerConfig,
) -> None:
    backend = _calls_then_answers("everything__trigger-elicitation-request")
    server = StdioServerConfig.model_validate(
        {**everything.model_dump(), "elicitation": {"mode": "ask"}}
    )
    config = {"mcp": {"everything": server.model_dump(mode="json")}}
    agent = AgentConfig(name="asker", tools=["everything__trigger-elicitation-request"])
    seen: list[ElicitationRequested] = []
    async with (
        Runtime(config, backends=[backend], agents={"asker": agent}, on_elicitation="events") as rt,
        rt.stream("go", agent="asker") as events,
    ):
        async for event in events:
            if isinstance(event, ElicitationRequested):
                seen.append(event)
                answered = rt.answer_elicitation(
                    event.question_id,
                    ElicitationReply(action="accept", content={"name": "Hopper"}),
                )
                assert answered
                assert not rt.answer_elicitation(
                    event.question_id, ElicitationReply(action="decline")
                )
            if isinstance(event, RunFinished):
                finished = event
    [question] = seen
    assert (question.server, question.mode, question.tool) == (
        "everything",
        "form",
        "everything__trigger-elicitation-request",
    )
    assert finished.answer == "done"
    [tool_message] = [m for m in backend.requests[-1].messages if isinstance(m, ToolMessage)]
    assert '"name": "Hopper"' in tool_message.content
