"""The MCP client's answers to what servers ask, against the reference
servers from npm (``npx -y``, pinned in conftest.py): sampling served by
agentrt's models and charged to the calling run, elicitation under each
policy (URL mode included), roots with ``roots/list_changed``, a tool that
requires task augmentation, ``server-memory``, and ``server-everything``
over HTTP restarted between calls."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.testing import RecordingSink
from agentrt.tools._tool import ElicitationReply, ToolContext
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_tool import McpTool
from agentrt.tools.mcp._server_requests import (
    Caller,
    ElicitationQuestion,
    McpClientHooks,
    ServerRequestHandler,
)
from tests._support.approvals import Person
from tests._support.ports import free_port

from .conftest import EVERYTHING, MEMORY

pytestmark = [pytest.mark.anyio, pytest.mark.process]


def _with(config: StdioServerConfig, **changes: Any) -> StdioServerConfig:
    return StdioServerConfig.model_validate({**config.model_dump(), **changes})


def _tools(conn: McpConnection) -> dict[str, McpTool]:
    return {t.remote_name: t for t in conn.tools()}


async def _until(tool: McpTool, arguments: dict[str, Any], done: Callable[[str], bool]) -> str:
    """Call ``tool`` until its text satisfies ``done`` (10 s at most)."""
    with anyio.fail_after(10):
        while not done(text := (await tool.call(arguments, ToolContext())).text):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return text


# -- sampling -----------------------------------------------------------------------


async def test_sampling_the_policy_forbids_is_refused_and_the_session_goes_on(
    everything: StdioServerConfig,
) -> None:
    async with McpConnection(everything) as conn:  # sampling.mode defaults to deny
        tools = _tools(conn)
        refused = await tools["trigger-sampling-request"].call(
            {"prompt": "x"}, ToolContext(run_id="r")
        )
        echo = await tools["echo"].call({"message": "still here"}, ToolContext())
    assert refused.is_error
    assert "not allowed (sampling.mode: deny)" in refused.text
    assert echo.text == "Echo: still here"


# -- elicitation --------------------------------------------------------------------


async def _ask_name(question: ElicitationQuestion) -> ElicitationReply:
    if question.mode == "url":
        return ElicitationReply(action="accept")
    return ElicitationReply(action="accept", content={"name": f"Ada ({question.run_id})"})


@pytest.mark.parametrize(
    ("policy", "person", "expected"),
    [
        ({"mode": "decline"}, True, ['"action": "decline"']),
        ({"mode": "defaults"}, True, ['"action": "decline"']),  # "name" has no default
        (
            {"mode": "defaults", "values": {"name": "Grace"}},
            False,
            ['"action": "accept"', '"name": "Grace"', '"integer": 42'],
        ),
        ({"mode": "ask"}, True, ['"action": "accept"', '"name": "Ada (r1)"']),
        ({"mode": "ask"}, False, ['"action": "decline"']),
    ],
    ids=["decline", "defaults-missing", "defaults", "ask", "ask-nobody"],
)
async def test_elicitation_follows_the_servers_policy(
    everything: StdioServerConfig, policy: dict[str, Any], person: bool, expected: list[str]
) -> None:
    hooks = McpClientHooks(ask=_ask_name if person else None)
    async with McpConnection(_with(everything, elicitation=policy), hooks=hooks) as conn:
        out = await _tools(conn)["trigger-elicitation-request"].call({}, ToolContext(run_id="r1"))
    assert not out.is_error, out.text
    for text in expected:
        assert text in out.text, out.text


@pytest.mark.parametrize(("url", "action"), [("ask", "accept"), ("decline", "decline")])
async def test_url_elicitation(everything: StdioServerConfig, url: str, action: str) -> None:
    ask = Person()
    config = _with(everything, elicitation={"url": url})
    async with McpConnection(config, hooks=McpClientHooks(ask=ask)) as conn:
        out = await _tools(conn)["trigger-url-elicitation"].call(
            {"url": "https://example.com/consent"}, ToolContext()
        )
    assert f'"action": "{action}"' in out.text, out.text
    assert [q.url for q in ask.asked] == (["https://example.com/consent"] if url == "ask" else [])


# -- roots --------------------------------------------------------------------------


async def test_roots_are_offered_and_their_changes_announced(
    everything: StdioServerConfig, tmp_path: Path
) -> None:
    configured, workspace = tmp_path / "configured", tmp_path / "workspace"
    async with McpConnection(_with(everything, roots=[configured])) as conn:
        roots_tool = _tools(conn)["get-roots-list"]
        before = await _until(roots_tool, {}, lambda text: configured.as_uri() in text)
        await conn.set_roots("run-1", [workspace])
        # The server re-reads the roots when it hears roots/list_changed.
        after = await _until(roots_tool, {}, lambda text: workspace.as_uri() in text)
        await conn.set_roots("run-1", [])
        gone = await _until(roots_tool, {}, lambda text: workspace.as_uri() not in text)
    assert workspace.as_uri() not in before
    assert configured.as_uri() in after
    assert configured.as_uri() in gone


async def test_filesystem_server_confined_to_the_roots(npx: str, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "note.txt").write_text("from the second root")
    # Given no folder on its command line, server-filesystem serves the client's roots.
    config = StdioServerConfig(
        name="fs",
        command=npx,
        args=["-y", "@modelcontextprotocol/server-filesystem@2026.8.31"],
        roots=[first],
    )
    async with McpConnection(config) as conn:
        tools = _tools(conn)
        # It asks for the roots once initialized, in the background.
        listed = await _until(
            tools["list_allowed_directories"], {}, lambda text: str(first.resolve()) in text
        )
        denied = await tools["read_text_file"].call(
            {"path": str(second / "note.txt")}, ToolContext()
        )
        await conn.set_roots("run-1", [second])
        read = await _until(
            tools["read_text_file"],
            {"path": str(second / "note.txt")},
            lambda text: text == "from the second root",
        )
    assert str(second.resolve()) not in listed
    assert denied.is_error
    assert read == "from the second root"


# -- content annotations ------------------------------------------------------------


async def test_content_annotations_are_kept(everything: StdioServerConfig) -> None:
    async with McpConnection(everything) as conn:
        annotated = _tools(conn)["get-annotated-message"]
        error = await annotated.call({"messageType": "error", "includeImage": True}, ToolContext())
        debug = await annotated.call({"messageType": "debug"}, ToolContext())
    text, image = error.content
    assert (text.kind, text.audience, text.priority) == ("text", ("user", "assistant"), 1.0)
    assert (image.kind, image.audience, image.priority) == ("image", ("user",), 0.5)
    [note] = debug.content
    assert note.audience == ("assistant",)
    assert note.priority is not None
    assert note.priority < 0.5


# -- tasks --------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_tool_that_requires_a_task_completes_past_the_step_timeout(
    everything: StdioServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[str] = []  # every task the server made for us
    task_started = ServerRequestHandler.task_started

    def counted(self: ServerRequestHandler, task_id: str, caller: Caller) -> None:
        created.append(task_id)
        task_started(self, task_id, caller)

    monkeypatch.setattr(ServerRequestHandler, "task_started", counted)
    async with McpConnection(everything) as conn:
        research = _tools(conn)["simulate-research-query"]
        # Four 1-second stages; the caller waits 2.5 s at a time.
        first = await research.call({"topic": "cats"}, ToolContext(run_id="r", timeout_s=2.5))
        second = await research.call({"topic": "cats"}, ToolContext(run_id="r", timeout_s=10))
    assert first.is_error
    assert "still running as task" in first.text
    assert not second.is_error, second.text
    assert "Research Report: cats" in second.text
    # One task, rejoined, not a second one started from scratch.
    [task] = created
    assert f"still running as task {task} " in first.text


@pytest.mark.slow
async def test_a_task_that_needs_input_asks_the_person_behind_its_run(
    everything: StdioServerConfig,
) -> None:
    asked: list[ElicitationQuestion] = []

    async def ask(question: ElicitationQuestion) -> ElicitationReply:
        asked.append(question)
        options = (question.requested_schema or {})["properties"]["interpretation"]["oneOf"]
        return ElicitationReply(action="accept", content={"interpretation": options[0]["const"]})

    config = _with(everything, elicitation={"mode": "ask"})
    async with McpConnection(config, hooks=McpClientHooks(ask=ask)) as conn:
        # The task goes input_required; tasks/result delivers its question.
        out = await _tools(conn)["simulate-research-query"].call(
            {"topic": "python", "ambiguous": True}, ToolContext(run_id="r9", timeout_s=30)
        )
    assert not out.is_error, out.text
    [question] = asked
    assert (question.run_id, question.mode) == ("r9", "form")
    assert "**Clarification**: programming" in out.text


@pytest.mark.slow
async def test_a_task_that_outlives_its_run_is_cancelled(everything: StdioServerConfig) -> None:
    async with McpConnection(everything) as conn:
        research = _tools(conn)["simulate-research-query"]
        first = await research.call({"topic": "dogs"}, ToolContext(run_id="r", timeout_s=1.5))
        assert "still running" in first.text
        assert await conn.cancel_run("r") == 1
        assert await conn.cancel_run("r") == 0
        # The same call now starts afresh (the old task is gone).
        again = await research.call({"topic": "dogs"}, ToolContext(run_id="r", timeout_s=1.5))
    assert "still running" in again.text


# -- server-memory ------------------------------------------------------------------


async def test_memory_server_tools_with_their_annotations(npx: str, tmp_path: Path) -> None:
    config = StdioServerConfig(
        name="memory",
        command=npx,
        args=["-y", MEMORY],
        env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
    )
    async with McpConnection(config) as conn:
        tools = _tools(conn)
        created = await tools["create_entities"].call(
            {"entities": [{"name": "agentrt", "entityType": "project", "observations": ["MCP"]}]},
            ToolContext(),
        )
        graph = await tools["read_graph"].call({}, ToolContext())
    assert not created.is_error, created.text
    assert "agentrt" in graph.text
    assert tools["read_graph"].spec.annotations.get("readOnlyHint") is True


# -- HTTP: a restarted server -------------------------------------------------------


def _serve_everything(npx: str, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [npx, "-y", EVERYTHING, "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # npx and node in one group, stopped together
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    _stop(process)
    raise AssertionError(f"server-everything did not listen on port {port} within 60 s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _wait_closed(port: int) -> None:
    """Until nothing accepts on ``port``: ``_stop`` waits for npx alone, and
    its node child, killed with it, may still accept for a moment; a new
    server's readiness check must not take the old one's answer for it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return
        time.sleep(0.02)
    raise AssertionError(f"port {port} still accepted connections 10 s after the server was killed")


async def test_a_restarted_http_server_gets_a_new_session_without_backoff(npx: str) -> None:
    port = free_port()
    server = _serve_everything(npx, port)
    sink = RecordingSink()
    try:
        config = HttpServerConfig(name="ev", url=f"http://127.0.0.1:{port}/mcp")
        async with McpConnection(config, on_notification=sink) as conn:
            echo = _tools(conn)["echo"]
            assert (await echo.call({"message": "a"}, ToolContext())).text == "Echo: a"
            for restart in (1, 2):  # twice in a row: no growing crash-loop backoff
                before = conn.restarts
                _stop(server)
                _wait_closed(port)
                server = _serve_everything(npx, port)  # a new process: it knows no session
                # The old session id gets HTTP 400; a new session, and echo (read-only) retried.
                out = await echo.call({"message": f"b{restart}"}, ToolContext())
                assert (out.text, out.is_error) == (f"Echo: b{restart}", False)
                # At least one new session per restart; under load a reconnect
                # can also land while the new process is still starting.
                assert conn.restarts > before
    finally:
        _stop(server)
    # Each forgotten session was replaced after the first step of the backoff,
    # the second one too (the crash loop's next step would be twice that).
    restarts = [p for p in sink.of("state") if p["state"] == "restarting"]
    forgotten = [p for p in restarts if "no longer knows our session" in p["reason"]]
    assert len(forgotten) >= 2, restarts
    assert all(p["retry_in_s"] <= config.restart.initial_delay_s for p in forgotten), restarts
