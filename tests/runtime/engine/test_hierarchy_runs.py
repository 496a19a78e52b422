"""Agent hierarchies from YAML specs run through the ``Runtime``: their
rollouts are supervised actors like any agent's, and the MCP servers their
specs use are opened once by the ``Runtime`` (a server that cannot start
leaves its agents running without its tools)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import anyio
import pytest

from agentrt import ConfigError, Runtime
from agentrt.agents import EventLog, load_spec
from agentrt.protocols import (
    ModelRequest,
    RolloutRestarted,
    ScalingSpec,
    StepRecorded,
    ToolMessage,
)
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.process]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

#: A ``Tool`` object (not a function: a function tool's exceptions are
#: error results) whose first call raises, as a bug would.
FLAKY_TOOL_MODULE = """
from agentrt.protocols import ToolSpec
from agentrt.tools._tool import ToolOutput


class Flaky:
    calls = 0

    @property
    def spec(self):
        return ToolSpec(name="flaky", description="sometimes has a bug")

    async def call(self, arguments, context):
        Flaky.calls += 1
        if Flaky.calls == 1:
            raise RuntimeError("the tool has a bug")
        return ToolOutput.of_text("fine")


flaky = Flaky()
"""


def tool_names(request: ModelRequest) -> set[str]:
    return {t.name for t in request.tools}


def tool_turns(request: ModelRequest) -> int:
    return sum(isinstance(m, ToolMessage) for m in request.messages)


async def test_hierarchy_rollouts_run_as_supervised_actors(tmp_path: Path) -> None:
    module = f"engine_flaky_tool_{uuid.uuid4().hex}"  # a fresh module: its state is per test
    (tmp_path / f"{module}.py").write_text(FLAKY_TOOL_MODULE)
    (tmp_path / "solo.yaml").write_text(f"name: solo\ntools: [calculator, '{module}:flaky']\n")

    turns: list[ReplySpec] = [
        ScriptedToolCall("calculator", {"expression": "6 * 7"}),
        ScriptedToolCall("flaky"),
        "42",
    ]

    def script(request: ModelRequest) -> ReplySpec:
        assert tool_names(request) == {"calculator", "flaky"}
        return turns[tool_turns(request)]

    backend = ScriptedBackend(script)
    log = EventLog()
    config = {"agents": {"solo": str(tmp_path / "solo.yaml")}, "early_stop": False}
    async with Runtime(config, backends=[backend]) as rt:
        with anyio.fail_after(10):
            result = await rt.run(
                "6 * 7?", agent="solo", scaling=ScalingSpec(rollouts=2), events=log
            )

    assert result.answer == "42"
    assert [s.answer for s in result.summaries] == ["42", "42"]
    # The rollout whose tool crashed was restarted after its committed step.
    (restarted,) = log.of_type(RolloutRestarted)
    assert restarted.resumed_steps == 1
    assert "RuntimeError: the tool has a bug" in restarted.error
    steps = [(e.rollout_id, e.step.index) for e in log.of_type(StepRecorded)]
    assert sorted(steps) == sorted({(s.rollout_id, i) for s in result.summaries for i in range(3)})
    # Two rollouts of three steps, plus the crashed step asked for again.
    assert result.cost.model_calls == len(backend.requests) == 7


async def test_mcp_tools_from_a_spec_reach_the_agent(tmp_path: Path) -> None:
    server = EXAMPLES / "mcp_conformance_server.py"
    (tmp_path / "agent.yaml").write_text(
        "name: mcp_user\n"
        "mcp_servers:\n"
        f"  conf: {{command: {sys.executable}, args: [{server}, --stdio]}}\n"
        "tools: [{mcp: conf, tools: [test_simple_text]}]\n"
    )

    def script(request: ModelRequest) -> ReplySpec:
        return (
            ScriptedToolCall("conf__test_simple_text", {}) if not tool_turns(request) else "relayed"
        )

    backend = ScriptedBackend(script)
    log = EventLog()
    results = []
    with anyio.fail_after(60):
        async with Runtime(
            agents={"mcp_user": load_spec(tmp_path / "agent.yaml")}, backends=[backend]
        ) as rt:

            async def run() -> None:
                results.append(await rt.run("use the server", agent="mcp_user", events=log))

            # Two runs at once share the Runtime's one connection to the server.
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                tg.start_soon(run)

    assert [(r.status, r.answer) for r in results] == [("succeeded", "relayed")] * 2
    outputs = [r for e in log.of_type(StepRecorded) for r in e.step.tool_results]
    assert [(o.is_error, o.content) for o in outputs] == [
        (False, "This is a simple text response for testing.")
    ] * 2
    assert all(tool_names(r) == {"conf__test_simple_text"} for r in backend.requests)


async def test_an_optional_mcp_server_that_cannot_start_leaves_its_agent_running(
    tmp_path: Path,
) -> None:
    (tmp_path / "agent.yaml").write_text(
        "name: a\n"
        "tools: [calculator, {mcp: {name: gone, command: /nonexistent/mcp-server, "
        "required: false}}]\n"
    )
    backend = ScriptedBackend(["still here"])
    with anyio.fail_after(60):
        async with Runtime(
            {"agents": {"a": str(tmp_path / "agent.yaml")}}, backends=[backend]
        ) as rt:
            result = await rt.run("t", agent="a")
            while (status := await rt.mcp_status())["gone"].state == "connecting":  # noqa: ASYNC110
                await anyio.sleep(0.02)
    assert status["gone"].state == "failed"
    assert "/nonexistent/mcp-server" in status["gone"].reason
    assert (result.status, result.answer) == ("succeeded", "still here")
    assert tool_names(backend.requests[0]) == {"calculator"}


async def test_a_required_mcp_server_that_cannot_start_fails_the_open(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(
        "name: a\ntools: [calculator, {mcp: {name: gone, command: /nonexistent/mcp-server}}]\n"
    )
    backend = ScriptedBackend(["never asked"])
    with anyio.fail_after(60), pytest.raises(ConfigError, match="/nonexistent/mcp-server"):
        async with Runtime({"agents": {"a": str(tmp_path / "agent.yaml")}}, backends=[backend]):
            pass
    assert backend.requests == []
