"""McpConnection against the in-repo fixture server over stdio: listing
with pagination, namespacing, progress, timeouts and cancellation, a dying
server, and servers that are broken in the ways real ones are."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.testing import RecordingSink
from agentrt.tools._tool import Tool, ToolContext
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._server_health import ConnectionState
from agentrt.tools.mcp._servers import spawn_mcp_servers
from tests.tools.mcp._restarts import BOTH_BACKENDS, FAST_RESTART

pytestmark = pytest.mark.process

Factory = Callable[..., StdioServerConfig]


def _tools(conn: McpConnection) -> dict[str, Any]:
    return {t.remote_name: t for t in conn.tools()}


@pytest.mark.anyio
async def test_listing_calls_progress_and_noise(fixture_server: Factory) -> None:
    sink, seen = RecordingSink(), RecordingSink()
    config = fixture_server("fx", "--page-size", "2", "--extra", "3")
    async with McpConnection(config, on_notification=sink) as conn:
        tools = _tools(conn)
        assert all(isinstance(t, Tool) for t in tools.values())
        names = [t.spec.name for t in conn.tools()]
        out = await tools["lookup"].call({"key": "k1"}, ToolContext())
        assert (out.text, out.is_error) == ("value-of-k1", False)
        out = await tools["sleep"].call({"seconds": 0.2}, ToolContext(call_id="c7", notify=seen))
        assert out.text == "slept 0.2"
        unknown = await conn.call_tool("no-such-tool", {})
        # A non-JSON line on the wire is reported, and the session goes on.
        assert (await tools["noisy"].call({}, ToolContext())).text == "noisy done"
        log = await sink.wait_for("log", lambda p: "not JSON-RPC" in str(p["data"]), 5)
        assert (await tools["lookup"].call({"key": "z"}, ToolContext())).text == "value-of-z"

    remote = ["lookup", "sleep", "crash", "noisy", "weird.name/with spaces", "mutate"]
    remote += ["retitle", "wipe", "peek", *(f"t{i:02d}" for i in range(3))]
    assert len(names) == len(remote) == 12  # six pages of two
    assert "fx__weird_name_with_spaces" in names
    assert {f"fx__{n}" for n in remote if "." not in n} <= set(names)
    assert names == sorted(names)
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names)

    progress = seen.of("progress")
    assert [p["progress"] for p in progress] == [1, 2, 3, 4]
    assert {(p["total"], p["tool"], p["call_id"], p["server"]) for p in progress} == {
        (4, "fx__sleep", "c7", "fx")
    }
    assert progress[-1]["message"] == "step 4"
    assert sink.of("progress") == progress  # the connection's sink sees them too
    assert unknown.is_error
    assert "does not offer a tool 'no-such-tool'" in unknown.text
    assert log["level"] == "warning"
    assert log["server"] == "fx"


@pytest.mark.anyio
async def test_timeout_and_cancellation_reach_the_server_and_the_session_stays_usable(
    fixture_server: Factory, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()

    async def cancelled_on_server(count: int) -> None:
        with anyio.fail_after(5):
            # The server saw notifications/cancelled: it leaves a file, polled.
            while len(list(markers.iterdir())) < count:  # noqa: ASYNC110
                await anyio.sleep(0.02)

    async with McpConnection(fixture_server("fx", "--marker-dir", str(markers))) as conn:
        tools = _tools(conn)
        with anyio.fail_after(60):  # a hang guard: only the timeout ends an hour's sleep
            out = await tools["sleep"].call({"seconds": 3600}, ToolContext(timeout_s=0.3))
        assert out.is_error
        assert "'fx__sleep'" in out.text
        assert "timed out after 0.3 s" in out.text
        await cancelled_on_server(1)
        assert (await tools["lookup"].call({"key": "a"}, ToolContext())).text == "value-of-a"

        with anyio.move_on_after(0.3) as scope:
            await tools["sleep"].call({"seconds": 30}, ToolContext())
        assert scope.cancelled_caught
        await cancelled_on_server(2)
        assert (await tools["lookup"].call({"key": "b"}, ToolContext())).text == "value-of-b"
        assert conn.state is ConnectionState.READY


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", BOTH_BACKENDS)
async def test_a_call_to_a_restarting_server_waits_for_it_and_runs(
    fixture_server: Factory,
) -> None:
    sink = RecordingSink()
    config = fixture_server("fx", restart=FAST_RESTART)
    async with McpConnection(config, on_notification=sink) as conn:
        tools = _tools(conn)
        out = await tools["crash"].call({}, ToolContext())
        assert out.is_error
        assert "connection lost during a call to 'fx__crash'" in out.text
        # At once, before the restart: the call waits for the new session.
        meanwhile = await tools["lookup"].call({"key": "a"}, ToolContext(timeout_s=60))
        assert (meanwhile.text, meanwhile.is_error) == ("value-of-a", False)
        state = sink.of("state")
        assert [s["state"] for s in state] == ["ready", "restarting", "ready"]
        assert "exited" in state[1]["reason"]
        assert "crashing on purpose" in state[1]["reason"]
        assert conn.restarts == 1


@pytest.mark.anyio
async def test_a_server_that_stays_down_fails_the_call_with_its_reason(
    fixture_server: Factory,
) -> None:
    # The restart waits a minute: the call's deadline passes first.
    config = fixture_server("fx", restart={"initial_delay_s": 60, "jitter": 0.0})
    async with McpConnection(config) as conn:
        await _tools(conn)["crash"].call({}, ToolContext())
        out = await _tools(conn)["lookup"].call({"key": "a"}, ToolContext(timeout_s=0.2))
        assert conn.state is ConnectionState.RESTARTING
    assert out.is_error
    assert "MCP server 'fx' did not come back within the call's 0.2 s" in out.text
    assert "crashing on purpose" in out.text  # the reason, from its stderr


@pytest.mark.anyio
async def test_a_server_that_keeps_failing_is_given_up(
    fixture_server: Factory, tmp_path: Path
) -> None:
    description = tmp_path / "description.txt"
    description.write_text("Look a key up.")
    config = fixture_server(
        "fx", "--description-file", str(description), restart={**FAST_RESTART, "max_failures": 2}
    )
    async with McpConnection(config) as conn:
        description.unlink()  # every restart now dies at start-up
        await _tools(conn)["crash"].call({}, ToolContext())
        with pytest.raises(McpServerError, match="failed"):
            await conn.wait_ready(30)
        assert conn.state is ConnectionState.FAILED
        out = await conn.call_tool("lookup", {"key": "a"})
    assert out.is_error
    assert "MCP server 'fx' is down: failed 2 times in a row" in out.text
    assert "FileNotFoundError" in out.text  # quoted from the server's stderr


@pytest.mark.anyio
async def test_a_banner_on_stdout_before_the_handshake_is_logged_and_skipped(
    fixture_server: Factory,
) -> None:
    # As the SDK's own client does: a line that is not JSON-RPC is not fatal.
    sink = RecordingSink()
    async with McpConnection(
        fixture_server("junk", "--garbage-first"), on_notification=sink
    ) as conn:
        assert conn.state is ConnectionState.READY
        out = await conn.call_tool("lookup", {"key": "q"})
        assert out.text == "value-of-q"
    logged = [str(p.get("data")) for p in sink.of("log")]
    assert any("Welcome to the fixture server" in text for text in logged), logged


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "agentrt-no-such-command-7f3a",
            "command 'agentrt-no-such-command-7f3a' not found on PATH",
        ),
        ("/nonexistent/bin/mcp-server", "does not exist or is not executable"),
    ],
)
async def test_a_missing_command_is_a_config_error(command: str, expected: str) -> None:
    config = StdioServerConfig(name="ghost", command=command, args=["--flag"])
    with pytest.raises(ConfigError) as caught:
        async with McpConnection(config):
            pass
    assert expected in str(caught.value)
    assert "mcp server 'ghost'" in str(caught.value)


@pytest.mark.anyio
async def test_spawned_servers_go_on_with_the_ones_that_started(fixture_server: Factory) -> None:
    servers = [
        fixture_server("good"),
        StdioServerConfig(name="ghost", command="agentrt-no-such-command-7f3a"),
        fixture_server("junk", "--garbage-first"),
    ]
    async with ActorSystem() as system:
        box = await spawn_mcp_servers(system, servers)
        assert set(box.failures) == {"ghost"}
        assert isinstance(box.failures["ghost"], ConfigError)
        tools = {t.spec.name: t for t in box.tools()}
        assert {n.split("__")[0] for n in tools} == {"good", "junk"}
        out = await tools["good__lookup"].call({"key": "q"}, ToolContext())
        assert out.text == "value-of-q"
    async with ActorSystem() as system:
        with pytest.raises(ConfigError, match="ghost"):
            await spawn_mcp_servers(system, servers[1:2], require_all=True)


@pytest.mark.anyio
async def test_cancelling_a_connection_while_it_starts_leaves_no_process(
    fixture_server: Factory,
) -> None:
    # The autouse no_orphan_processes fixture checks the server process is gone.
    with anyio.move_on_after(0.3) as scope:
        async with McpConnection(fixture_server()):
            pytest.fail("the server cannot be ready within 0.3 s")
    assert scope.cancelled_caught
