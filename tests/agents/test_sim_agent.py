"""The agent loop over real HTTP: the in-process sim-server and the
OpenAI-compatible backend, with parallel tool rounds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentrt.agents import Agent, AgentConfig, EventLog
from agentrt.protocols import StepRecorded, ToolSpec
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools._tool import ToolContext, ToolOutput
from tests._support.backends import sim_backend

pytestmark = pytest.mark.anyio


class Lookup:
    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind
        self.calls: list[dict[str, Any]] = []

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=f"look something up by {self.kind}",
            parameters={
                "type": "object",
                "properties": {"key": {"type": self.kind}},
                "required": ["key"],
            },
        )

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls.append(dict(arguments))
        return ToolOutput.of_text(f"{self.name} found {arguments['key']} (call {len(self.calls)})")


async def test_tool_rounds_against_the_sim_server() -> None:
    config = SimServerConfig(ttft_ms=0, token_ms=0, tool_rounds=3, parallel_tool_calls=2)
    async with SimServer(config) as server:
        async with sim_backend(server, models=["sim"]) as backend:
            by_word, by_number = Lookup("by_word", "string"), Lookup("by_number", "integer")
            log = EventLog()
            agent = Agent(
                AgentConfig(name="sim-agent", stop_on=[]),
                backends={"sim": backend},
                tools=[by_word, by_number],
                events=log,
            )
            result = await agent.run("Look up two things, then answer.")
        stats = server.stats()

    traj = result.trajectory
    assert traj.status == "finished"
    assert traj.answer
    # Two rounds of two parallel calls reach 3+ results; then the model answers.
    tool_steps = [s for s in traj.steps if s.tool_results]
    assert len(tool_steps) == 2
    for step in tool_steps:
        assert len(step.tool_results) == 2
        assert not any(r.is_error for r in step.tool_results)
    assert traj.steps[-1].tool_results == ()
    assert by_word.calls == [{"key": "x"}, {"key": "x"}]
    assert by_number.calls == [{"key": 1}, {"key": 1}]
    # Usage is what the server reported; later prompts reuse the cached prefix.
    assert traj.cost.model_calls == len(traj.steps) == 3
    assert traj.cost.usage.prompt_tokens > 0
    assert traj.cost.usage.cached_prompt_tokens > 0
    assert len(log.of_type(StepRecorded)) == 3
    assert stats["requests_total"] == 3
    assert stats["tokens"]["prompt"] == traj.cost.usage.prompt_tokens
    assert stats["tokens"]["cached"] == traj.cost.usage.cached_prompt_tokens
