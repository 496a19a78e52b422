"""An agent, driven by the scripted backend, completes a task end to end
through real MCP servers from npm: it reads a file through
``server-filesystem``, adds numbers with ``server-everything``'s ``get-sum``
and runs its long operation (progress notifications become run events),
in one step with three parallel tool calls, then answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.agents import Agent, AgentConfig, EventLog
from agentrt.protocols import ToolCalled, ToolMessage, ToolProgress
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from agentrt.tools.mcp._servers import spawn_mcp_servers

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def test_agent_completes_a_task_through_real_mcp_servers(
    everything: StdioServerConfig, filesystem: StdioServerConfig, tmp_path: Path
) -> None:
    numbers = tmp_path / "root" / "numbers.txt"
    numbers.write_text("17 25\n")
    backend = ScriptedBackend(
        [
            [
                ScriptedToolCall("fs__read_text_file", {"path": str(numbers)}),
                ScriptedToolCall("everything__get-sum", {"a": 17, "b": 25}),
                ScriptedToolCall(
                    "everything__trigger-long-running-operation", {"duration": 0.3, "steps": 3}
                ),
            ],
            "The file holds 17 and 25; their sum is 42.",
        ],
        name="scripted",
        models=["scripted"],
    )
    log = EventLog()
    async with ActorSystem() as system:
        box = await spawn_mcp_servers(system, [everything, filesystem])
        assert not box.failures, box.failures
        agent = Agent(
            AgentConfig(name="mcp-user", temperature=0.0),
            backends=[backend],
            tools=box.tools(),
            events=log,
        )
        result = await agent.run("Read numbers.txt and add the two numbers.")

    trajectory = result.trajectory
    assert trajectory.status == "finished", trajectory.stop_reason
    assert trajectory.answer == "The file holds 17 and 25; their sum is 42."
    [first, _final] = trajectory.steps
    by_name = {r.name: r for r in first.tool_results}
    assert not by_name["fs__read_text_file"].is_error, by_name["fs__read_text_file"].content
    assert "17 25" in by_name["fs__read_text_file"].content
    assert "42" in by_name["everything__get-sum"].content
    # The server's progress notifications became run events, tied to the call.
    [long_call] = [
        e for e in log.of_type(ToolCalled) if e.tool == "everything__trigger-long-running-operation"
    ]
    progress = [e for e in log.of_type(ToolProgress) if e.kind == "progress"]
    assert [(e.progress, e.total) for e in progress] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    assert {e.call_id for e in progress} == {long_call.call_id}
    # The model saw every result, in call order, before answering.
    seen = [m for m in backend.requests[1].messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in seen] == [
        c.id
        for c in first.reply.choices[0].message.tool_calls  # type: ignore[union-attr]
    ]
