"""MCP servers' lives as a ``Runtime`` sees them: a stdio server that dies
mid-run is waited for by the next call (no model step is spent on "is
restarting"); a required server that cannot start fails the open with its
stderr quoted; an optional one does not delay it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig
from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.runtime.config._config_file import load_config
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.mcp._mcp_errors import McpServerError
from tests.tools.mcp.conftest import FIXTURE_SERVER

pytestmark = [pytest.mark.anyio, pytest.mark.process]


def _fixture(*args: str, **options: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-W", "ignore", str(FIXTURE_SERVER), *args]} | (
        options
    )


def _tool_messages(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


async def test_a_server_killed_mid_run_is_waited_for_by_the_next_call() -> None:
    def script(request: ModelRequest) -> Any:
        match len(_tool_messages(request)):
            case 0:  # the server dies under this call
                return ScriptedToolCall("fx__crash", {})
            case 1:  # at once: the server is restarting now
                return ScriptedToolCall("fx__lookup", {"key": "k"})
            case _:
                return "done"

    backend = ScriptedBackend(script)
    server = _fixture(restart={"initial_delay_s": 0.3, "jitter": 0.0})
    agent = AgentConfig(name="a", tools=["fx__crash", "fx__lookup"])
    async with Runtime({"mcp": {"fx": server}}, backends=[backend], agents={"a": agent}) as rt:
        result = await rt.run("go", agent="a")
        status = (await rt.mcp_status())["fx"]
    assert result.answer == "done"
    crashed, looked_up = (m.content for m in _tool_messages(backend.requests[-1]))
    assert "connection lost during a call to 'fx__crash'" in crashed
    assert looked_up == "value-of-k"
    # Three model calls: no step went to a "restarting" error and a retry.
    assert len(backend.requests) == 3
    assert (status.state, status.restarts) == ("ready", 1)


async def test_a_required_server_that_exits_at_start_fails_the_open_with_its_stderr(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no-such-description.txt"  # the server dies reading it
    server = _fixture("--description-file", str(missing))
    backend = ScriptedBackend(["never asked"])
    with anyio.fail_after(60), pytest.raises(McpServerError) as raised:
        async with Runtime({"mcp": {"fx": server}}, backends=[backend]):
            pass
    message = str(raised.value)
    assert message.startswith("MCP server 'fx' (")
    assert "its stderr ended with" in message
    assert "FileNotFoundError" in message
    assert "no-such-description.txt" in message
    assert backend.requests == []


async def test_an_optional_server_does_not_delay_the_open() -> None:
    # Never speaks MCP, with an hour to do so: the open must not wait for it.
    late = {"command": "sleep", "args": ["3600"], "required": False, "connect_timeout_s": 3600}
    backend = ScriptedBackend(["answered"])
    with anyio.fail_after(60):  # a hang guard: waiting for "late" would take an hour
        async with Runtime({"mcp": {"late": late}}, backends=[backend]) as rt:
            assert (await rt.mcp_status())["late"].state == "connecting"
            result = await rt.run("go")
    assert result.answer == "answered"


async def test_the_daemon_does_not_start_without_its_required_server(tmp_path: Path) -> None:
    toml = tmp_path / "agentrt.toml"
    missing = tmp_path / "no-such-description.txt"
    server = _fixture("--description-file", str(missing))
    toml.write_text(
        f"[store]\npath = '{tmp_path / 'runs.db'}'\n\n[mcp.fx]\n"
        f"command = {json.dumps(server['command'])}\nargs = {json.dumps(server['args'])}\n"
    )
    backend = ScriptedBackend(["never asked"])
    with anyio.fail_after(60), pytest.raises(McpServerError, match="FileNotFoundError"):
        async with RunManager(load_config(toml), backends=[backend]):
            pass
