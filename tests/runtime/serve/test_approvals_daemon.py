"""Approvals through the daemon and ``agentrt.client``: a run whose tool is
under ``[approvals.TOOL]`` is ``waiting`` with its question listed (``GET
/v1/elicitations``) and on its event stream; approving runs the tool,
denying gives the model a tool result saying so; the wait's webhook is
signed and its delivery listed (``GET /v1/runs/{id}/webhook-deliveries``);
an answer to a run that waits on nothing is a 409, to a question it does
not wait on a 404."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import pytest
from mcp import Client as McpClient

from agentrt.client import AsyncClient, Client, RequestRefused, verify_webhook
from agentrt.protocols import (
    ElicitationAnswered,
    ElicitationRequested,
    ModelRequest,
    RunRequest,
    ToolCalled,
    ToolMessage,
)
from agentrt.runtime.serve._keys import digest, new_key
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from tests._support.approvals import Ide

from .test_webhooks import SECRET, receiver

pytestmark = [pytest.mark.anyio, pytest.mark.process]


def _one_call(latency_s: float = 0.0) -> ScriptedBackend:
    """Ask the calculator once, then answer with what it said."""

    def script(request: ModelRequest) -> Any:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return ScriptedToolCall("calculator", {"expression": "6*7"})
        return f"tool said: {results[0].content}"

    return ScriptedBackend(script, latency_s=latency_s)


def _config(daemon_kit: Any, tmp_path: Path, **server: Any) -> Any:
    return daemon_kit.config(tmp_path, approvals={"calculator": {"timeout_s": 600}}, server=server)


async def _question(client: AsyncClient, run_id: str) -> ElicitationRequested:
    with anyio.fail_after(20):
        while True:
            found = await client.list_elicitations(run_id)
            if found:
                [question] = found
                return question
            await anyio.sleep(0.02)


async def _until(done: Callable[[], bool]) -> None:
    with anyio.fail_after(20):
        while True:
            if done():
                return
            await anyio.sleep(0.02)


@pytest.mark.parametrize("approve", [True, False])
async def test_a_waiting_run_is_listed_then_approved_or_denied(
    tmp_path: Path, daemon_kit: Any, approve: bool
) -> None:
    async with (
        daemon_kit.running(_config(daemon_kit, tmp_path), _one_call()) as daemon,
        AsyncClient(daemon.url) as client,
    ):
        run = await client.create_run(RunRequest(task="6*7?", agent="solver"))
        question = await _question(client, run.run_id)
        assert (question.mode, question.tool, question.server) == ("approval", "calculator", "")
        assert question.arguments == {"expression": "6*7"}
        assert (await client.get_run(run.run_id)).run.status == "waiting"
        waiting = await client.list_runs(status="waiting")
        assert [r.run_id for r in waiting.runs] == [run.run_id]
        with pytest.raises(RequestRefused) as unknown:
            await client.deny(run.run_id, "approve-nosuchquestion")
        assert unknown.value.status == 404
        answered = await (client.approve if approve else client.deny)(
            run.run_id, question.question_id
        )
        assert answered.status == "running"  # at once, not when the event lands
        assert await client.list_elicitations() == []
        async with client.follow(run.run_id) as events:
            seen = [event async for event in events]
        with pytest.raises(RequestRefused) as late:
            await client.approve(run.run_id, question.question_id)
        assert late.value.status == 409
        assert late.value.where == "run_id"
    [asked] = [e for e in seen if isinstance(e, ElicitationRequested)]
    [ended] = [e for e in seen if isinstance(e, ElicitationAnswered)]
    [called] = [e for e in seen if isinstance(e, ToolCalled)]
    assert asked.seq < ended.seq < called.seq
    assert ended.action == ("accept" if approve else "decline")
    detail = await _detail(daemon_kit, tmp_path, run.run_id)
    if approve:
        assert detail == "tool said: 42"
    else:
        assert detail is not None
        assert "the person denied it" in detail
        assert "42" not in detail


async def _detail(daemon_kit: Any, tmp_path: Path, run_id: str) -> str | None:
    """The run's answer, read back by a daemon on the same store."""
    async with (
        daemon_kit.running(_config(daemon_kit, tmp_path), _one_call()) as daemon,
        AsyncClient(daemon.url) as client,
    ):
        return (await client.get_run(run_id)).run.answer


async def test_the_wait_fires_a_signed_webhook_whose_delivery_is_listed(
    tmp_path: Path, daemon_kit: Any
) -> None:
    with receiver(fail=0) as rec:
        config = _config(daemon_kit, tmp_path, webhook={"secret": SECRET, "backoff_s": 0.01})
        async with daemon_kit.running(config, _one_call()) as daemon:
            with Client(daemon.url) as client:  # the blocking client, on a thread
                run = await anyio.to_thread.run_sync(
                    lambda: client.create_run(
                        RunRequest(task="6*7?", agent="solver", webhook=rec.url)
                    )
                )
                await _until(lambda: len(rec.requests) >= 1)
                headers, body = rec.requests[0]
                event = verify_webhook(body, headers, SECRET)
                [question] = await anyio.to_thread.run_sync(client.list_elicitations)
                await anyio.to_thread.run_sync(
                    lambda: client.approve(run.run_id, question.question_id)
                )
                await _until(lambda: len(rec.requests) >= 2)
                deliveries = await anyio.to_thread.run_sync(
                    lambda: client.webhook_deliveries(run.run_id)
                )
    assert event.kind == "run.waiting"
    assert event.run.status == "waiting"
    assert event.question is not None
    assert event.question.question_id == question.question_id
    assert [d.kind for d in deliveries] == ["run.waiting", "run.succeeded"]
    assert {d.status for d in deliveries} <= {"pending", "delivered"}
    assert all(d.run_id == run.run_id for d in deliveries)


async def test_another_key_sees_no_question_and_cannot_answer(
    tmp_path: Path, daemon_kit: Any
) -> None:
    alice_key, bob_key = new_key()[0], new_key()[0]
    scopes = ["runs:create", "runs:read"]
    keys = {
        "alice": {"sha256": digest(alice_key), "scopes": scopes},
        "bob": {"sha256": digest(bob_key), "scopes": scopes},
    }
    config = _config(daemon_kit, tmp_path, keys=keys)
    async with (
        daemon_kit.running(config, _one_call()) as daemon,
        AsyncClient(daemon.url, token=alice_key) as alice,
        AsyncClient(daemon.url, token=bob_key) as bob,
    ):
        run = await alice.create_run(RunRequest(task="6*7?", agent="solver"))
        question = await _question(alice, run.run_id)
        assert await bob.list_elicitations() == []
        for call in (
            bob.list_elicitations(run.run_id),
            bob.approve(run.run_id, question.question_id),
            bob.webhook_deliveries(run.run_id),
        ):
            with pytest.raises(RequestRefused) as refused:
                await call
            assert refused.value.status == 404
        await alice.deny(run.run_id, question.question_id)


@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_the_ide_that_started_the_run_is_asked_to_approve(
    tmp_path: Path, daemon_kit: Any, action: Literal["accept", "decline"]
) -> None:
    ide = Ide(action)
    with anyio.fail_after(60):
        async with (
            daemon_kit.running(_config(daemon_kit, tmp_path), _one_call()) as daemon,
            McpClient(f"{daemon.url}/mcp", mode="legacy", elicitation_callback=ide) as ide_client,
        ):
            result = await ide_client.call_tool("run_agent", {"task": "6*7?", "agent": "solver"})
    assert result.structured_content is not None
    assert result.structured_content["status"] == "succeeded", result
    [question] = ide.asked
    assert "'calculator'" in question.message
    assert '{"expression":"6*7"}' in question.message
    answer = result.structured_content["answer"]
    if action == "accept":
        assert answer == "tool said: 42"
    else:
        assert "the person denied it" in answer


async def test_the_api_document_names_the_waiting_state_and_its_routes(
    tmp_path: Path, daemon_kit: Any
) -> None:
    async with (
        daemon_kit.running(_config(daemon_kit, tmp_path), _one_call()) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as http,
    ):
        document = (await http.get("/openapi.json")).json()
    events = document["components"]["schemas"]["Event"]["discriminator"]["mapping"]
    assert {"elicitation", "elicitation_answered"} <= set(events)
    statuses = document["components"]["schemas"]["RunInfo"]["properties"]["status"]["enum"]
    assert "waiting" in statuses
    paths = document["paths"]
    assert paths["/v1/elicitations"]["get"]["operationId"] == "listElicitations"
    deliveries = paths["/v1/runs/{run_id}/webhook-deliveries"]["get"]
    assert deliveries["operationId"] == "listWebhookDeliveries"
    answer = paths["/v1/runs/{run_id}/elicitations/{question_id}"]["post"]["responses"]
    assert "409" in answer


@pytest.mark.parametrize("approve", [True, False])
async def test_a_sandboxed_shell_command_waits_for_approval(
    tmp_path: Path, daemon_kit: Any, approve: bool
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (bwrap) for the sandboxed shell")
    command = "echo approved > proof.txt && cat proof.txt"

    def script(request: ModelRequest) -> Any:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return ScriptedToolCall("shell", {"command": command})
        return f"shell said: {results[0].content}"

    config = daemon_kit.config(
        tmp_path,
        tools={"shell": True},
        agents={"sh": {"tools": ["shell"], "stop_on": []}},
        approvals={"shell": {"message": "Run this command?"}},
    )
    async with (
        daemon_kit.running(config, ScriptedBackend(script)) as daemon,
        AsyncClient(daemon.url) as client,
    ):
        run = await client.create_run(RunRequest(task="prove it", agent="sh"))
        question = await _question(client, run.run_id)
        assert (question.tool, question.message) == ("shell", "Run this command?")
        assert question.arguments == {"command": command}
        await (client.approve if approve else client.deny)(run.run_id, question.question_id)
        async with client.follow(run.run_id) as events:
            async for _ in events:  # to the run's end
                pass
        ended = await client.get_run(run.run_id)
    answer = ended.run.answer or ""
    if approve:
        assert "approved" in answer
        assert "exit code 0" in answer.lower() or "exit 0" in answer.lower(), answer
    else:
        assert "the person denied it" in answer
        assert "approved" not in answer


async def test_the_store_says_waiting_then_running_again(tmp_path: Path, daemon_kit: Any) -> None:
    """What a restarted daemon (and a listing by status) reads."""
    async with (
        # Its answer takes a while: the run is still running when read.
        daemon_kit.running(_config(daemon_kit, tmp_path), _one_call(latency_s=2)) as daemon,
        AsyncClient(daemon.url) as client,
    ):
        run = await client.create_run(RunRequest(task="6*7?", agent="solver"))
        question = await _question(client, run.run_id)
        assert _stored_status(tmp_path, run.run_id) == "waiting"
        await client.approve(run.run_id, question.question_id)
        assert _stored_status(tmp_path, run.run_id) == "running"


def _stored_status(tmp_path: Path, run_id: str) -> str:
    with sqlite3.connect(tmp_path / "runs.db") as db:
        [(status,)] = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,))
    return str(status)
