"""MCP servers as actors: spawning, calls through the actor (overlapping,
cancellable, with progress), a killed server restarted through its actor,
giving up and reconnecting, and servers that cannot start."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import psutil
import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.testing import RecordingSink
from agentrt.tools._tool import Tool, ToolContext
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from agentrt.tools.mcp._mcp_tool import McpTool
from agentrt.tools.mcp._server_actor import McpServerStatus
from agentrt.tools.mcp._server_health import ConnectionState
from agentrt.tools.mcp._servers import McpServerHandle, McpServers, McpToolSource, spawn_mcp_servers
from tests.tools.mcp._restarts import BOTH_BACKENDS, FAST_RESTART

pytestmark = pytest.mark.process

Factory = Callable[..., StdioServerConfig]


def _by_remote(tools: list[McpTool]) -> dict[str, McpTool]:
    return {t.remote_name: t for t in tools}


def _server_pids() -> set[int]:
    """The fixture-server processes this test process started."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if any(arg.endswith("fixture_server.py") for arg in child.cmdline()):
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


async def _status_until(
    handle: McpServerHandle, predicate: Callable[[McpServerStatus], bool], within: float
) -> McpServerStatus:
    with anyio.fail_after(within):
        while not predicate(status := await handle.status()):  # noqa: ASYNC110 - polls a server
            await anyio.sleep(0.02)
    return status


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", BOTH_BACKENDS)
async def test_a_killed_server_is_restarted_through_its_actor_and_later_calls_succeed(
    fixture_server: Factory,
) -> None:
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(system, [fixture_server("fx", restart=FAST_RESTART)])
        handle = servers.connections["fx"]
        assert str(handle.ref.address).endswith("/user/mcp:fx")
        tools = _by_remote(servers.tools("fx"))
        assert all(isinstance(t, Tool) for t in tools.values())
        assert (await tools["lookup"].call({"key": "a"}, ToolContext())).text == "value-of-a"

        (pid,) = _server_pids()
        os.kill(pid, signal.SIGKILL)
        restarting = await _status_until(handle, lambda s: s.state is not ConnectionState.READY, 10)
        assert restarting.state is ConnectionState.RESTARTING
        assert "exited" in restarting.reason

        status = await _status_until(handle, lambda s: s.state is ConnectionState.READY, 20)
        assert (status.restarts, status.actor_restarts) == (1, 0)
        (fresh,) = _server_pids()
        assert fresh != pid
        # The same tool objects call the fresh server through the actor.
        after = await tools["lookup"].call({"key": "b"}, ToolContext())
        assert (after.text, after.is_error) == ("value-of-b", False)
        # The server died, the actor did not.
        assert system.root.failures == ()


@pytest.mark.anyio
async def test_calls_through_the_actor_overlap_report_progress_and_can_be_cancelled(
    fixture_server: Factory, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    server_sink, call_sink = RecordingSink(), RecordingSink()
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(
            system,
            [fixture_server("fx", "--marker-dir", str(markers))],
            on_notification=server_sink,
        )
        tools = _by_remote(servers.tools("fx"))

        out = await tools["sleep"].call(
            {"seconds": 0.2}, ToolContext(call_id="c1", notify=call_sink)
        )
        assert out.text == "slept 0.2"
        mine = call_sink.of("progress")
        assert mine
        assert {(p["call_id"], p["tool"], p["server"]) for p in mine} == {("c1", "fx__sleep", "fx")}
        assert all("route" not in p for p in mine)
        # The server-wide sink sees the progress too, without the route.
        assert server_sink.of("progress")
        assert all("route" not in p for p in server_sink.of("progress"))

        # A long call does not hold up the actor: another call finishes meanwhile.
        with anyio.move_on_after(30) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(tools["sleep"].call, {"seconds": 30}, ToolContext())
                quick = await tools["lookup"].call({"key": "q"}, ToolContext())
                assert quick.text == "value-of-q"
                # Cancelling the caller cancels the call on the server.
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        with anyio.fail_after(5):
            while not list(markers.iterdir()):  # noqa: ASYNC110 - a file the server writes
                await anyio.sleep(0.02)

        # A caller's deadline is the call's deadline.
        late = await tools["sleep"].call({"seconds": 30}, ToolContext(timeout_s=0.3))
        assert late.is_error
        assert "timed out after 0.3 s" in late.text
        assert system.root.failures == ()


@pytest.mark.anyio
async def test_a_server_given_up_stays_down_until_reconnected(fixture_server: Factory) -> None:
    config = fixture_server("fx", restart={**FAST_RESTART, "max_failures": 1})
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(system, [config])
        handle = servers.connections["fx"]
        tools = _by_remote(handle.tools())
        await tools["crash"].call({}, ToolContext())
        failed = await _status_until(handle, lambda s: s.state is ConnectionState.FAILED, 10)
        assert "failed 1 times in a row" in failed.reason
        down = await tools["lookup"].call({"key": "a"}, ToolContext())
        assert down.is_error
        assert "MCP server 'fx' is down" in down.text

        reply = await handle.reconnect()
        assert reply.state is ConnectionState.CONNECTING
        # A call while the new connection opens waits for it.
        during = await tools["lookup"].call({"key": "r"}, ToolContext())
        assert (during.text, during.is_error) == ("value-of-r", False)
        status = await _status_until(handle, lambda s: s.state is ConnectionState.READY, 20)
        assert status.restarts == 0  # a fresh connection
        assert (await tools["lookup"].call({"key": "b"}, ToolContext())).text == "value-of-b"
        assert len(_server_pids()) == 1
        assert await handle.refresh() == handle.tools()
        assert system.root.failures == ()


@pytest.mark.anyio
async def test_servers_that_cannot_start_are_reported_and_left_out(
    fixture_server: Factory,
) -> None:
    servers = [
        fixture_server("good"),
        StdioServerConfig(name="ghost", command="agentrt-no-such-command-7f3a"),
    ]
    async with ActorSystem() as system:
        started = await spawn_mcp_servers(system, servers)
        assert set(started.connections) == {"good"}
        assert isinstance(started.failures["ghost"], ConfigError)
        assert started.tools("ghost") == []
        assert {t.server for t in started.tools()} == {"good"}
        with pytest.raises(KeyError, match="no MCP server 'nope' was spawned"):
            started.tools("nope")
        # What an agent's MCP bindings read.
        source: McpToolSource = started
        assert [t.spec.name for t in source.connections["good"].tools()] == [
            t.spec.name for t in started.tools("good")
        ]
        # No actor is left behind for the server that failed.
        assert [a.name for a in system.root.children] == ["mcp:good"]
        await started.stop()
        assert system.root.children == ()

        with pytest.raises(ConfigError, match="ghost"):
            await spawn_mcp_servers(system, servers, require_all=True)
        assert system.root.children == ()
    with pytest.raises(ValueError, match="share a name"):
        async with ActorSystem() as system:
            await spawn_mcp_servers(system, [servers[0], servers[0]])


def test_an_empty_set_of_servers_has_no_tools() -> None:
    servers = McpServers({}, {})
    assert servers.tools() == []
    assert dict(servers.connections) == {}
