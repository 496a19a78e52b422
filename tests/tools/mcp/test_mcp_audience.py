"""Content annotations acted on: a block meant only for the user
(``audience: ["user"]``) does not reach the model but is in the run's
events; ``priority`` puts what matters first, so a clipped result keeps it."""

from __future__ import annotations

import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig, EventLog
from agentrt.agents._context import clip
from agentrt.protocols import ModelRequest, StepRecorded, ToolMessage
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContent, ToolOutput
from agentrt.tools.mcp._mcp_config import StdioServerConfig

pytestmark = pytest.mark.process  # the unit test here is cheap; the other starts a server


def test_the_model_sees_its_blocks_most_important_first() -> None:
    output = ToolOutput(
        content=[
            ToolContent(text="debug noise " * 20, priority=0.1),
            ToolContent(text="for the person", audience=("user",)),
            ToolContent(text="plain"),
            ToolContent(text="THE ANSWER", audience=("user", "assistant"), priority=1.0),
        ]
    )
    assert output.text.splitlines()[:2] == ["THE ANSWER", "plain"]
    assert "for the person" not in output.text
    assert output.user_text == "for the person\nTHE ANSWER"
    # Clipped to a few characters, the context keeps the top of the result.
    assert clip(output.text, 100).startswith("THE ANSWER\nplain")
    only_user = ToolOutput(content=[ToolContent(text="hi", audience=("user",))])
    assert only_user.text == "[the tool's result is meant for the user and was shown to them]"


@pytest.mark.anyio
async def test_a_block_for_the_user_is_in_the_events_not_the_request(
    everything: StdioServerConfig,
) -> None:
    def script(request: ModelRequest) -> ReplySpec:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedToolCall("everything__get-annotated-message", {"messageType": "success"})
        return "done"

    backend = ScriptedBackend(script)
    agent = AgentConfig(name="a", tools=["everything__get-annotated-message"])
    log = EventLog()
    config = {"mcp": {"everything": everything.model_dump()}}
    async with Runtime(config, backends=[backend], agents={"a": agent}) as rt:
        result = await rt.run("go", agent="a", events=log)
    assert result.answer == "done"
    [tool_message] = [m for m in backend.requests[1].messages if isinstance(m, ToolMessage)]
    assert "Operation completed successfully" not in str(backend.requests[1])
    assert tool_message.content == (
        "[the tool's result is meant for the user and was shown to them]"
    )
    [shown] = [r for e in log.of_type(StepRecorded) for r in e.step.tool_results]
    assert shown.for_user == "Operation completed successfully"
