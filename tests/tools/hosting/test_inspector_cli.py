"""A real third-party MCP client drives our hosted servers: the MCP
Inspector's CLI (``@modelcontextprotocol/inspector-cli``, pinned), over
streamable HTTP against an in-test server (a function tool and the built-in
calculator) and over stdio against the example server."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.tools._tool import ToolContext, ToolOutput
from agentrt.tools.builtins._calculator import Calculator
from agentrt.tools.hosting._hosted_catalog import StaticResource
from agentrt.tools.hosting._hosting_config import HttpServeConfig
from agentrt.tools.hosting._tool_server import ToolServer
from agentrt.tools.hosting._transports import serve_streamable_http
from tests._support.inspector import INSPECTOR, inspector_workdir

pytestmark = [pytest.mark.slow, pytest.mark.process]

EXAMPLE = Path(__file__).parents[3] / "examples" / "mcp_conformance_server.py"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return inspector_workdir(tmp_path)


async def inspect(npx: str, workdir: Path, target: Sequence[str], *args: str) -> Any:
    """Run the inspector CLI once; its stdout is the JSON result."""
    with anyio.fail_after(180):
        done = await anyio.run_process(
            [npx, "-y", INSPECTOR, "--cli", *target, *args], cwd=workdir, check=False
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"inspector-cli exited {done.returncode}:\n{out}\n{err}"
    return json.loads(out)


async def add(args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput.of_text(str(args["a"] + args["b"]))


@pytest.mark.anyio
async def test_inspector_lists_and_calls_tools_over_streamable_http(
    npx: str, workdir: Path, make_tool: Any
) -> None:
    numbers = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }
    server = ToolServer(
        "inspected",
        tools=[make_tool("add", add, numbers), Calculator()],
        resources=[StaticResource(uri="mem://note", name="note", text="a note")],
    )
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(serve_streamable_http, server, HttpServeConfig())
        target = [endpoint.url, "--transport", "http"]
        listed = await inspect(npx, workdir, target, "--method", "tools/list")
        called = await inspect(
            npx, workdir, target, "--method", "tools/call", "--tool-name", "add",
            "--tool-arg", "a=2", "b=40",
        )  # fmt: skip
        calculated = await inspect(
            npx, workdir, target, "--method", "tools/call", "--tool-name", "calculator",
            "--tool-arg", "expression=2 * (3 + 4) ** 2",
        )  # fmt: skip
        read = await inspect(
            npx, workdir, target, "--method", "resources/read", "--uri", "mem://note"
        )
        tg.cancel_scope.cancel()
    assert [t["name"] for t in listed["tools"]] == ["add", "calculator"]
    assert listed["tools"][0]["inputSchema"] == numbers
    assert called == {"content": [{"type": "text", "text": "42"}], "isError": False}
    assert calculated == {"content": [{"type": "text", "text": "98"}], "isError": False}
    assert read["contents"] == [{"uri": "mem://note", "mimeType": "text/plain", "text": "a note"}]


@pytest.mark.anyio
async def test_inspector_calls_the_example_server_over_stdio(npx: str, workdir: Path) -> None:
    target = [sys.executable, str(EXAMPLE), "--stdio"]
    listed = await inspect(npx, workdir, target, "--method", "tools/list")
    called = await inspect(
        npx, workdir, target, "--method", "tools/call",
        "--tool-name", "json_schema_2020_12_tool", "--tool-arg", "name=agentrt",
    )  # fmt: skip
    failed = await inspect(
        npx, workdir, target, "--method", "tools/call", "--tool-name", "test_error_handling"
    )
    names = {t["name"] for t in listed["tools"]}
    assert {"test_simple_text", "test_tool_with_progress", "json_schema_2020_12_tool"} <= names
    assert called["content"] == [{"type": "text", "text": 'Received: {"name": "agentrt"}'}]
    assert failed["isError"] is True
    assert failed["content"][0]["text"] == "This tool intentionally returns an error for testing"
