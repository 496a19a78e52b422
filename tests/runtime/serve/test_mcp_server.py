"""The daemon's MCP endpoint, driven by the official ``mcp`` SDK client: at
``/mcp`` of a daemon app served by uvicorn (scripted model backend), and
over stdio through ``agentrt mcp`` in a subprocess."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as mcp
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.routing import Route

from agentrt.protocols import ModelRequest
from agentrt.runtime.config._config_file import (
    load_config,
)
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve.mcp._mcp_server import mcp_asgi
from agentrt.runtime.serve.mcp._mcp_stdio import mcp_main
from agentrt.testing import ScriptedBackend, ScriptedReply
from agentrt.tools.hosting._tool_server import RESOURCE_NOT_FOUND
from tests._support.daemon import ServedManager, serving_manager, solver_daemon_config
from tests._support.mcp_raw import INIT, MCP_HEADERS

pytestmark = [pytest.mark.anyio, pytest.mark.process]

Script = Callable[[ModelRequest], str | ScriptedReply | BaseException]
_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


def votes(request: ModelRequest) -> str | ScriptedReply:
    """Rollout 1 says 41, the others 42; a task saying "slowly" takes 30 s."""
    last = request.messages[-1]
    if "slowly" in str(getattr(last, "content", "")):
        return ScriptedReply(content="late", delay_s=30.0)
    found = _ROLLOUT.search(request.request_id or "")
    index = int(found.group(1)) if found else 0
    # Later rollouts finish later, so progress arrives in rollout order.
    return ScriptedReply(content="41" if index == 1 else "42", delay_s=0.02 * index)


@asynccontextmanager
async def daemon(tmp_path: Path, script: Script = votes) -> AsyncIterator[ServedManager]:
    """The real daemon (``serve_manager``: REST, its Guard, ``/mcp``...) over
    a manager the test holds."""
    config = solver_daemon_config(tmp_path)
    async with serving_manager(config, [ScriptedBackend(script)]) as served:
        yield served


def text_of(result: mcp.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp.TextContent)
    return block.text


async def read_json(client: Client, uri: str) -> Any:
    read = await client.read_resource(uri)
    contents = read.contents[0]
    assert isinstance(contents, mcp.TextResourceContents)
    assert contents.mime_type == "application/json"
    return json.loads(contents.text)


async def test_run_agent_reports_progress_per_rollout_and_round(tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with anyio.fail_after(30):
        async with daemon(tmp_path) as d, Client(d.mcp_url, mode="legacy") as client:
            result = await client.call_tool(
                "run_agent",
                {"task": "What is 6 x 7?", "agent": "solver", "rollouts": 3},
                progress_callback=on_progress,
            )
            structured = result.structured_content
            assert structured is not None
            info = await d.manager.get(structured["run_id"])

    assert result.is_error is False
    text = text_of(result)
    assert text.startswith("42\n\n")
    assert info is not None
    assert info.status == structured["status"] == "succeeded"
    assert info.answer == structured["answer"] == "42"
    assert structured["rollouts"] == 3
    assert structured["cost"]["model_calls"] == info.cost.model_calls == 3
    assert f"run {info.run_id} succeeded · 3 rollouts · majority" in text
    assert f"agentrt://runs/{info.run_id}" in text
    # One notification per finished rollout, then one per aggregation round,
    # numbered 1, 2, 3... in the order they happened.
    assert [p for p, _, _ in seen] == [1.0, 2.0, 3.0, 4.0]
    assert all(total is None for _, total, _ in seen)
    messages = [m or "" for _, _, m in seen]
    for i, message in enumerate(messages[:3]):
        assert re.fullmatch(rf"rollout \S+ finished \({i + 1}/3\): answer '4[12]'", message)
    assert "answer '41'" in messages[1]
    assert re.fullmatch(r"majority round 1: winner \S+ \('42'\); votes .*=2, .*=1", messages[3])


async def test_runs_rollouts_and_summaries_are_tools_and_resources(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with daemon(tmp_path) as d, Client(d.mcp_url, mode="legacy") as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            submitted = await client.call_tool(
                "run_agent", {"task": "What is 6 x 7?", "rollouts": 2, "wait": False}
            )
            assert submitted.structured_content is not None
            run_id = submitted.structured_content["run_id"]
            await d.manager.wait(run_id, timeout=20)
            agents = await client.call_tool("list_agents", {})
            got = await client.call_tool("get_run", {"run_id": run_id})
            templates = (await client.list_resource_templates()).resource_templates
            listed = (await client.list_resources()).resources
            run = await read_json(client, f"agentrt://runs/{run_id}")
            summaries = await read_json(client, f"agentrt://runs/{run_id}/summaries")
            rollout_id = run["rollouts"][0]["rollout_id"]
            trajectory = await read_json(client, f"agentrt://runs/{run_id}/rollouts/{rollout_id}")
            page = await read_json(client, "agentrt://runs?status=succeeded&limit=5")
            none_running = await read_json(client, "agentrt://runs?status=running")
            agent_list = await read_json(client, "agentrt://agents")
            with pytest.raises(MCPError) as missing:
                await client.read_resource("agentrt://runs/run-nope")

    assert tools == ["run_agent", "list_agents", "get_run", "cancel_run"]
    assert text_of(submitted) == f"run {run_id} submitted (pending); see agentrt://runs/{run_id}"
    assert submitted.structured_content["status"] == "pending"

    assert agents.structured_content is not None
    names = [a["name"] for a in agents.structured_content["agents"]]
    assert names == [a.name for a in d.manager.agents()]
    assert "solver" in names
    assert "default (default)" in text_of(agents)
    assert agent_list == agents.structured_content

    detail = got.structured_content
    assert detail is not None
    assert detail["run"]["run_id"] == run_id
    assert detail["run"]["status"] == "succeeded"
    assert detail["request"]["task"] == "What is 6 x 7?"
    assert detail["request"]["metadata"] == {"via": "mcp"}
    assert detail["result"]["answer"] == "42"
    assert len(detail["rollouts"]) == 2
    assert run == detail

    assert {t.uri_template for t in templates} == {
        "agentrt://runs{?status,limit}",
        "agentrt://runs/{run_id}",
        "agentrt://runs/{run_id}/summaries",
        "agentrt://runs/{run_id}/rollouts/{rollout_id}",
    }
    # The agents, then the newest runs (each readable at its URI).
    assert [r.uri for r in listed] == ["agentrt://agents", f"agentrt://runs/{run_id}"]
    assert listed[1].description == "succeeded, agent default: What is 6 x 7?"
    assert sorted(s["rollout_id"] for s in summaries) == sorted(
        r["rollout_id"] for r in run["rollouts"]
    )
    assert sorted(s["answer"] for s in summaries) == ["41", "42"]
    assert trajectory["rollout_id"] == rollout_id
    assert trajectory["run_id"] == run_id
    assert trajectory["answer"] == "42"
    assert len(trajectory["steps"]) >= 1
    assert [r["run_id"] for r in page["runs"]] == [run_id]
    assert none_running["runs"] == []
    assert missing.value.error.code == RESOURCE_NOT_FOUND
    assert missing.value.error.message == "Resource not found: no run 'run-nope'"


async def test_cancel_run_and_cancelling_a_waiting_call(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with daemon(tmp_path) as d, Client(d.mcp_url, mode="legacy") as client:
            submitted = await client.call_tool("run_agent", {"task": "think slowly", "wait": False})
            assert submitted.structured_content is not None
            first = submitted.structured_content["run_id"]
            cancelled = await client.call_tool("cancel_run", {"run_id": first})

            # A waiting call the client abandons takes its run with it.
            with anyio.move_on_after(1.0):
                await client.call_tool("run_agent", {"task": "think slowly again"})
            page = await d.manager.list(limit=5)
            second = next(r.run_id for r in page.runs if r.task == "think slowly again")
            final = await d.manager.wait(second, timeout=10)

    assert cancelled.is_error is False
    assert text_of(cancelled) == f"run {first} is cancelled"
    assert cancelled.structured_content is not None
    assert cancelled.structured_content["status"] == "cancelled"
    assert final.status == "cancelled"


async def test_bad_calls_come_back_as_tool_errors(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with daemon(tmp_path) as d, Client(d.mcp_url, mode="legacy") as client:
            unknown_agent = await client.call_tool("run_agent", {"task": "x", "agent": "nobody"})
            no_rollouts = await client.call_tool("run_agent", {"task": "x", "rollouts": 0})
            negative_cap = await client.call_tool("run_agent", {"task": "x", "max_tokens": -1})
            bad_aggregate = await client.call_tool("run_agent", {"task": "x", "aggregate": "coin"})
            typo = await client.call_tool("run_agent", {"task": "x", "rollout": 2})
            no_run = await client.call_tool("get_run", {"run_id": "run-nope"})
            no_cancel = await client.call_tool("cancel_run", {"run_id": "run-nope"})
            runs = await d.manager.list()

    bad = (unknown_agent, no_rollouts, negative_cap, bad_aggregate, typo, no_run, no_cancel)
    for result in bad:
        assert result.is_error is True
    assert "unknown agent 'nobody'; known: default, solver" in text_of(unknown_agent)
    assert "ScalingSpec.rollouts must be >= 1, got 0" in text_of(no_rollouts)
    assert "Budget.max_tokens must be >= 0, got -1" in text_of(negative_cap)
    assert "coin" in text_of(bad_aggregate)
    assert "rollout" in text_of(typo)
    assert text_of(no_run) == "get_run: no run 'run-nope'"
    assert text_of(no_cancel) == "cancel_run: no run 'run-nope'"
    assert runs.runs == []  # nothing invalid was admitted


async def test_foreign_host_gets_421_and_foreign_origin_403(tmp_path: Path) -> None:
    async with daemon(tmp_path) as d, httpx.AsyncClient(timeout=10) as http:
        origin = f"http://127.0.0.1:{d.port}"
        good = await http.post(d.mcp_url, json=INIT, headers={**MCP_HEADERS, "Origin": origin})
        host = await http.post(d.mcp_url, json=INIT, headers={**MCP_HEADERS, "Host": "evil.com"})
        rebound = await http.post(
            d.mcp_url,
            json=INIT,
            headers={**MCP_HEADERS, "Host": f"evil.com:{d.port}", "Origin": "http://evil.com"},
        )
        cross = await http.post(
            d.mcp_url, json=INIT, headers={**MCP_HEADERS, "Origin": "http://evil.com"}
        )
    assert good.status_code == 200
    assert good.headers["mcp-session-id"]
    assert host.status_code == rebound.status_code == 421
    assert cross.status_code == 403
    assert "evil.com" in host.json()["message"]


class _Server(uvicorn.Server):
    @contextmanager
    def capture_signals(self) -> Any:  # the test runner owns the signals
        yield


def listen() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    return sock


@asynccontextmanager
async def serving(app: Any, sock: socket.socket) -> AsyncIterator[int]:
    """Serve a bare ASGI app (no daemon around it) with uvicorn; yields the port."""
    server = _Server(
        uvicorn.Config(
            app, lifespan="off", log_config=None, log_level="warning", timeout_graceful_shutdown=1
        )
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
                await anyio.sleep(0.01)
        try:
            yield int(sock.getsockname()[1])
        finally:
            server.should_exit = True


async def test_the_mount_checks_host_and_origin_itself(tmp_path: Path) -> None:
    """Mounted without the daemon's own guard, the endpoint still refuses
    foreign names, before looking at the body or the session."""
    config = solver_daemon_config(tmp_path)
    async with RunManager(config, backends=[ScriptedBackend(votes)]) as manager:
        mount = mcp_asgi(manager, port=None, allowed_hosts=["agentrt.internal:8765"])
        app = Starlette(routes=[Route("/mcp", endpoint=mount.app)])
        async with (
            mount.lifespan,
            serving(app, listen()) as port,
            httpx.AsyncClient(timeout=10) as http,
        ):
            url = f"http://127.0.0.1:{port}/mcp"

            async def post(headers: dict[str, str], content: str = json.dumps(INIT)) -> Any:
                return await http.post(url, content=content, headers={**MCP_HEADERS, **headers})

            ok = await post({})
            extra = await post({"Host": "agentrt.internal:8765"})
            other_port = await post({"Host": "agentrt.internal:9999"})
            # Not JSON and not a session: still the Host that is refused first.
            foreign = await post({"Host": "evil.com", "mcp-session-id": "x"}, content="nonsense")
            origin = await post({"Origin": "http://evil.com"})
            same_origin = await post({"Origin": f"http://localhost:{port}"})
    assert ok.status_code == extra.status_code == same_origin.status_code == 200
    assert other_port.status_code == foreign.status_code == 421
    assert origin.status_code == 403
    body = foreign.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["message"] == "Host header 'evil.com' is not served here"
    assert origin.json()["error"]["message"] == "Origin 'http://evil.com' is not allowed"


async def test_agentrt_mcp_serves_over_stdio_with_the_daemons_store(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config_file = tmp_path / "agentrt.toml"
    config_file.write_text(daemon_kit.scripted_toml)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agentrt", "mcp", "--config", str(config_file)]
    )
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            result = await client.call_tool(
                "run_agent", {"task": "What is 6 x 7?", "agent": "solver", "rollouts": 2}
            )
            agents = await client.call_tool("list_agents", {})
        assert result.structured_content is not None
        run_id = result.structured_content["run_id"]
        # The run is in the store the daemon would open.
        async with RunManager(load_config(config_file)) as manager:
            stored = await manager.detail(run_id)
    assert result.is_error is False
    assert text_of(result).startswith("42\n\n")
    assert "solver" in text_of(agents)
    assert stored is not None
    assert stored.run.status == "succeeded"
    assert stored.run.answer == "42"
    assert len(stored.rollouts) == 2


def test_agentrt_mcp_rejects_a_bad_configuration_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "agentrt.toml"
    bad.write_text('[server]\nport = "x"\n')
    assert mcp_main(["--config", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout belongs to the protocol
    assert captured.err.startswith(f"agentrt mcp: {bad}:2: server.port: ")
