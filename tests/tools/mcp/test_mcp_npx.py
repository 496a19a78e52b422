"""The MCP client against real servers from npm, started with ``npx -y``
(versions pinned in conftest.py): ``server-everything`` (tools, content
kinds, progress, logging, resources, cancellation, a server killed mid-run)
and ``server-filesystem``."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import anyio
import mcp_types
import psutil
import pytest

from agentrt.testing import RecordingSink
from agentrt.tools._tool import ToolContext
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from agentrt.tools.mcp._mcp_tool import McpTool
from agentrt.tools.mcp._server_health import ConnectionState

pytestmark = pytest.mark.process


def _by_name(conn: McpConnection) -> dict[str, McpTool]:
    return {t.spec.name: t for t in conn.tools()}


@pytest.mark.anyio
async def test_everything_tools_content_progress_logs_resources_and_cancel(
    everything: StdioServerConfig,
) -> None:
    sink, progress = RecordingSink(), RecordingSink()
    config = StdioServerConfig.model_validate({**everything.model_dump(), "log_level": "debug"})
    async with McpConnection(config, on_notification=sink) as conn:
        tools = _by_name(conn)
        assert {"everything__echo", "everything__get-sum", "everything__get-tiny-image"} <= set(
            tools
        )

        echo = await tools["everything__echo"].call({"message": "hi"}, ToolContext())
        assert (echo.text, echo.is_error) == ("Echo: hi", False)
        total = await tools["everything__get-sum"].call({"a": 2, "b": 3}, ToolContext())
        assert "5" in total.text
        bad = await tools["everything__echo"].call({}, ToolContext())  # the server rejects it
        assert bad.is_error
        assert "message" in bad.text

        image = await tools["everything__get-tiny-image"].call({}, ToolContext())
        [png] = [c for c in image.content if c.kind == "image"]
        assert png.mime_type == "image/png"
        assert png.data.startswith(b"\x89PNG")
        ref = await tools["everything__get-resource-reference"].call({}, ToolContext())
        assert any(c.kind == "resource" and c.uri.startswith("demo://") for c in ref.content)
        weather = await tools["everything__get-structured-content"].call(
            {"location": "Chicago"}, ToolContext()
        )
        assert isinstance(weather.structured, dict)
        assert "temperature" in weather.structured

        long_op = tools["everything__trigger-long-running-operation"]
        done = await long_op.call(
            {"duration": 0.4, "steps": 4}, ToolContext(call_id="L", notify=progress)
        )
        assert not done.is_error
        assert "completed" in done.text
        steps = [(p["progress"], p["total"]) for _, p in progress.events]
        assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]

        await tools["everything__toggle-simulated-logging"].call({}, ToolContext())
        log = await sink.wait_for("log", lambda p: "message" in str(p["data"]), 10)
        assert log["server"] == "everything"
        assert log["level"] in get_args(mcp_types.LoggingLevel)  # the protocol's eight

        resources = await conn.list_resources()
        assert resources
        [content] = await conn.read_resource(str(resources[0].uri))
        assert content.kind == "resource"
        assert content.text

        timed_out = await long_op.call({"duration": 30, "steps": 30}, ToolContext(timeout_s=0.5))
        assert timed_out.is_error
        assert "timed out after 0.5 s" in timed_out.text
        again = await tools["everything__echo"].call({"message": "still here"}, ToolContext())
        assert again.text == "Echo: still here"  # the session is not wedged


def _server_process(name: str) -> psutil.Process:
    """The node process running the server (npx's grandchild), not npx."""
    leaves = [
        p
        for p in psutil.Process().children(recursive=True)
        if any(name in part for part in p.cmdline()) and not p.children()
    ]
    assert len(leaves) == 1, leaves
    return leaves[0]


@pytest.mark.anyio
async def test_everything_killed_mid_call_the_next_call_waits_for_its_restart(
    everything: StdioServerConfig,
) -> None:
    sink = RecordingSink()
    restart = {"initial_delay_s": 0.2, "jitter": 0.0}
    config = StdioServerConfig.model_validate({**everything.model_dump(), "restart": restart})
    async with McpConnection(config, on_notification=sink) as conn:
        tools = _by_name(conn)
        victim = _server_process("server-everything")
        outputs = []

        async def long_call() -> None:
            outputs.append(
                await tools["everything__trigger-long-running-operation"].call(
                    {"duration": 20, "steps": 20}, ToolContext()
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            await sink.wait_for("progress", lambda p: True, 10)  # the call is running
            victim.kill()
        [lost] = outputs
        assert lost.is_error
        assert "MCP server 'everything': connection lost during a call" in lost.text
        # At once, while npx starts the server again (about 5 s): the call waits.
        back = await tools["everything__echo"].call({"message": "back"}, ToolContext())
        assert (back.text, back.is_error) == ("Echo: back", False)
        assert conn.state is ConnectionState.READY
        assert conn.restarts == 1
        assert _server_process("server-everything").pid != victim.pid


@pytest.mark.anyio
async def test_filesystem_reads_and_writes_inside_its_root_only(
    filesystem: StdioServerConfig, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the root")
    async with McpConnection(filesystem) as conn:
        tools = _by_name(conn)
        target = root / "notes" / "a.txt"
        made = await tools["fs__create_directory"].call(
            {"path": str(root / "notes")}, ToolContext()
        )
        assert not made.is_error, made.text
        wrote = await tools["fs__write_file"].call(
            {"path": str(target), "content": "written by agentrt"}, ToolContext()
        )
        assert not wrote.is_error, wrote.text
        assert target.read_text() == "written by agentrt"
        read = await tools["fs__read_text_file"].call({"path": str(target)}, ToolContext())
        assert read.text == "written by agentrt"
        listing = await tools["fs__list_directory"].call(
            {"path": str(root / "notes")}, ToolContext()
        )
        assert "a.txt" in listing.text
        denied = await tools["fs__read_text_file"].call({"path": str(secret)}, ToolContext())
        assert denied.is_error
        assert "outside the root" not in denied.text
