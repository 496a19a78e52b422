"""MCP prompts for agents, through ``Runtime.run`` with a scripted model: a
spec starts from a server's prompt (arguments completed by the server), and
so do an agent of ``agentrt.toml`` and an ``AgentConfig`` built in Python;
the model lists and gets prompts through the prompt tools; a prompt that
cannot be got fails the rollout, saying why."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig, PromptStartSpec
from agentrt.protocols import ModelRequest, SystemMessage, ToolMessage, UserMessage
from agentrt.runtime.config._config_file import load_config
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.mcp._mcp_config import StdioServerConfig

pytestmark = [pytest.mark.anyio, pytest.mark.process]

RESOURCE_SERVER = Path(__file__).with_name("resource_server.py")


def _tool_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, ToolMessage)]


async def test_a_spec_starts_from_a_completed_prompt_and_the_model_gets_prompts(
    everything: StdioServerConfig, tmp_path: Path
) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(
        "name: lead\n"
        "tools: [{mcp: everything, tools: ['prompts/list', 'prompts/get']}]\n"
        "prompt:\n"
        "  mcp: everything\n"
        "  name: completable-prompt\n"
        "  arguments: {department: Eng, name: A}\n"
        "  complete: [department, name]\n"
    )
    calls = [
        ScriptedToolCall("everything__prompts_list", {}),
        ScriptedToolCall(
            "everything__prompts_get", {"name": "args-prompt", "arguments": {"city": "Paris"}}
        ),
    ]

    def script(request: ModelRequest) -> Any:
        done = len(_tool_texts(request))
        return calls[done] if done < len(calls) else "done"

    backend = ScriptedBackend(script)
    server = everything.model_dump() | {"prompts": {"tools": True}}
    config = {"mcp": {"everything": server}, "agents": {"lead": str(spec)}}
    async with Runtime(config, backends=[backend]) as rt:
        result = await rt.run("the task", agent="lead")
    assert result.answer == "done"
    first = backend.requests[0].messages
    assert isinstance(first[0], SystemMessage)
    # "Eng" completed to Engineering, then "A" among Engineering's people to Alice.
    assert first[1] == UserMessage(
        content="Please promote Alice to the head of the Engineering team."
    )
    assert first[2] == UserMessage(content="the task")
    assert {t.name for t in backend.requests[0].tools or ()} == {
        "everything__prompts_list",
        "everything__prompts_get",
    }
    listed, got = _tool_texts(backend.requests[-1])
    assert {"simple-prompt", "args-prompt", "completable-prompt"} <= {
        p["name"] for p in json.loads(listed)["prompts"]
    }
    assert got == "user: What's weather in Paris?"
    # Every step starts from the prompt, got once.
    assert all(r.messages[1] == first[1] for r in backend.requests)


async def test_an_agent_of_agentrt_toml_and_an_agent_config_start_from_a_prompt(
    everything: StdioServerConfig, tmp_path: Path
) -> None:
    path = tmp_path / "agentrt.toml"
    path.write_text(
        "[mcp.everything]\n"
        f"command = {json.dumps(everything.command)}\n"
        f"args = {json.dumps(everything.args)}\n"
        "\n"
        "[agents.lead]\n"
        "prompt = { mcp = 'everything', name = 'completable-prompt', "
        "arguments = { department = 'Eng', name = 'A' }, complete = ['department', 'name'] }\n"
    )
    in_python = AgentConfig(
        name="lead2",
        prompt=PromptStartSpec(
            mcp="everything", name="args-prompt", arguments={"city": "Paris", "state": "TX"}
        ),
    )
    backend = ScriptedBackend(["done", "done"])
    async with Runtime(
        load_config(path).runtime, backends=[backend], agents={"lead2": in_python}
    ) as rt:
        from_toml = await rt.run("the task", agent="lead")
        from_python = await rt.run("the task", agent="lead2")
    assert from_toml.answer == from_python.answer == "done"
    toml_request, python_request = backend.requests
    assert toml_request.messages[1:] == [
        UserMessage(content="Please promote Alice to the head of the Engineering team."),
        UserMessage(content="the task"),
    ]
    assert python_request.messages[1:] == [
        UserMessage(content="What's weather in Paris, TX?"),
        UserMessage(content="the task"),
    ]


async def test_a_prompt_the_server_cannot_give_fails_the_rollout(tmp_path: Path) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(
        "name: lead\n"
        "mcp_servers:\n"
        f"  fx: {{command: {sys.executable}, args: [-W, ignore, {RESOURCE_SERVER}]}}\n"
        "prompt: {mcp: fx, name: missing}\n"
    )
    backend = ScriptedBackend(["never asked"])
    async with Runtime({"agents": {"lead": str(spec)}}, backends=[backend]) as rt:
        result = await rt.run("the task", agent="lead")
    assert result.status == "failed"
    assert backend.requests == []
    assert "MCP prompt 'missing'" in (result.error or "")
    assert "MCP server 'fx'" in (result.error or "")
