"""The daemon relays an MCP server's question to the person behind a run:
``server-everything`` (``elicitation.mode = "ask"``) asks during a run's
tool call, the question arrives as the run's ``elicitation`` event on its
SSE stream, and the answer posted to
``/v1/runs/{run_id}/elicitations/{question_id}`` reaches the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.runtime.serve._daemon import serve_manager
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.mcp._mcp_config import StdioServerConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.process]


async def _first_question(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "elicitation":
                found: dict[str, Any] = msgspec.json.decode(line.partition(":")[2])
                return found
    raise AssertionError("the run ended without asking")


async def _finished(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    while True:
        run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()["run"]
        if run["status"] not in ("queued", "running"):
            return run
        await anyio.sleep(0.05)


async def test_a_question_is_relayed_as_an_event_and_answered_over_rest(
    everything: StdioServerConfig, tmp_path: Path
) -> None:
    def script(request: ModelRequest) -> Any:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedToolCall("everything__trigger-elicitation-request", {})
        [answer] = [m for m in request.messages if isinstance(m, ToolMessage)]
        return "got: " + ("Turing" if '"name": "Turing"' in answer.content else answer.content)

    server = {**everything.model_dump(mode="json"), "elicitation": {"mode": "ask"}}
    config = config_from_mapping(
        {
            "server": {"port": 0, "shutdown_grace_s": 0.5},
            "store": {"path": str(tmp_path / "runs.db")},
            "mcp": {"everything": server},
            "agents": {"asker": {"tools": ["everything__trigger-elicitation-request"]}},
            "warm_prefix": False,
        },
        source="test",
    )
    backend = ScriptedBackend(script)
    async with (
        RunManager(config, backends=[backend]) as manager,
        anyio.create_task_group() as tg,
    ):
        endpoint = await tg.start(
            lambda task_status: serve_manager(manager, task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=60) as client:
            created = await client.post("/v1/runs", json={"task": "go", "agent": "asker"})
            run_id = created.json()["run_id"]
            with anyio.fail_after(60):
                question = await _first_question(client, run_id)
            assert (question["server"], question["mode"]) == ("everything", "form")
            assert "name" in question["requested_schema"]["properties"]
            path = f"/v1/runs/{run_id}/elicitations/{question['question_id']}"
            wrong = await client.post(path, json={"action": "maybe"})
            assert wrong.status_code in (400, 422), wrong.text
            unknown = await client.post(path + "x", json={"action": "decline"})
            assert unknown.status_code == 404
            assert unknown.json()["where"] == "question_id"
            answered = await client.post(
                path, json={"action": "accept", "content": {"name": "Turing"}}
            )
            assert answered.status_code == 200, answered.text
            again = await client.post(path, json={"action": "decline"})
            assert again.status_code == 404  # answered once
            with anyio.fail_after(60):
                run = await _finished(client, run_id)
        tg.cancel_scope.cancel()
    assert run["status"] == "succeeded", run
    assert run["answer"] == "got: Turing"
