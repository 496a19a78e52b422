"""The daemon relays an MCP server's question to the person behind a run:
``server-everything`` (``elicitation.mode = "ask"``) asks during a run's
tool call, the question arrives as the run's ``elicitation`` event on its
SSE stream, and the answer posted to
``/v1/runs/{run_id}/elicitations/{question_id}`` reaches the server."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import mcp_types
import msgspec
import pytest
from mcp import Client, StdioServerParameters
from mcp.client import session as mcp_session
from mcp.client.context import ClientRequestContext

from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.runtime.config._config_file import AgentrtConfig, config_from_mapping
from agentrt.testing import ScriptedBackend, ScriptedToolCall, SimServer, SimServerConfig
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from tests._support.approvals import Ide
from tests._support.daemon import serving_manager

from .conftest import EVERYTHING

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

    config = _asker_config(everything, tmp_path)
    backend = ScriptedBackend(script)
    async with (
        serving_manager(config, [backend]) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=60) as client,
    ):
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
        answered = await client.post(path, json={"action": "accept", "content": {"name": "Turing"}})
        assert answered.status_code == 200, answered.text
        again = await client.post(path, json={"action": "decline"})
        assert again.status_code == 409  # answered once: the run waits on nothing
        with anyio.fail_after(60):
            run = await _finished(client, run_id)
    assert run["status"] == "succeeded", run
    assert run["answer"] == "got: Turing"


# -- an IDE connected over /mcp is asked the questions of the runs it started ---------


def _asker_config(everything: StdioServerConfig, tmp_path: Path) -> AgentrtConfig:
    server = {**everything.model_dump(mode="json"), "elicitation": {"mode": "ask"}}
    return config_from_mapping(
        {
            "server": {"port": 0, "shutdown_grace_s": 0.5},
            "store": {"path": str(tmp_path / "runs.db")},
            "mcp": {"everything": server},
            "agents": {"asker": {"tools": ["everything__trigger-elicitation-request"]}},
            "warm_prefix": False,
        },
        source="test",
    )


def _echo_the_answer(request: ModelRequest) -> Any:
    """Call the eliciting tool, then answer with what the tool returned."""
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return ScriptedToolCall("everything__trigger-elicitation-request", {})
    [answer] = [m for m in request.messages if isinstance(m, ToolMessage)]
    return "got: " + answer.content


@asynccontextmanager
async def _daemon(everything: StdioServerConfig, tmp_path: Path) -> AsyncIterator[str]:
    config = _asker_config(everything, tmp_path)
    backend = ScriptedBackend(_echo_the_answer)
    async with serving_manager(config, [backend]) as daemon:
        yield daemon.url


@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_the_ide_that_started_the_run_is_asked_and_its_answer_reaches_the_server(
    everything: StdioServerConfig, tmp_path: Path, action: Literal["accept", "decline"]
) -> None:
    ide = Ide(action, {"name": "Ada"})
    with anyio.fail_after(90):
        async with (
            _daemon(everything, tmp_path) as url,
            Client(f"{url}/mcp", mode="legacy", elicitation_callback=ide) as client,
        ):
            result = await client.call_tool("run_agent", {"task": "go", "agent": "asker"})
    assert result.structured_content is not None
    assert result.structured_content["status"] == "succeeded", result
    [question] = ide.asked
    assert question.message.startswith("[everything] ")
    assert "name" in question.requested_schema["properties"]
    answer = result.structured_content["answer"]
    if action == "accept":
        assert "Ada" in answer, answer
    else:
        assert "Ada" not in answer
        assert "decline" in answer.lower(), answer


async def test_a_client_without_the_capability_is_not_asked_and_rest_answers(
    everything: StdioServerConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK declares the elicitation capability only for a callback other
    # than its default; count the calls that default would get.
    refused: list[mcp_types.ElicitRequestParams] = []
    default = mcp_session._default_elicitation_callback

    async def counting_default(
        ctx: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        refused.append(params)
        return await default(ctx, params)

    monkeypatch.setattr(mcp_session, "_default_elicitation_callback", counting_default)
    notices: list[str] = []
    answered: list[int] = []

    with anyio.fail_after(90):
        async with (
            _daemon(everything, tmp_path) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):

            async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
                notices.append(str(params.data))
                found = re.search(r"POST (/v1/runs/\S+/elicitations/\S+) ", str(params.data))
                if found:
                    reply = await http.post(
                        found.group(1), json={"action": "accept", "content": {"name": "Turing"}}
                    )
                    answered.append(reply.status_code)

            async with Client(f"{url}/mcp", mode="legacy", logging_callback=on_log) as client:
                result = await client.call_tool("run_agent", {"task": "go", "agent": "asker"})
    assert refused == []
    assert answered == [200], notices
    assert result.structured_content is not None
    assert result.structured_content["status"] == "succeeded", result
    assert "Turing" in result.structured_content["answer"]


async def test_the_first_answer_wins_between_rest_and_the_ide(
    everything: StdioServerConfig, tmp_path: Path
) -> None:
    late: list[str] = []

    with anyio.fail_after(90):
        async with (
            _daemon(everything, tmp_path) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):

            async def slow_ide(
                context: ClientRequestContext, params: mcp_types.ElicitRequestParams
            ) -> mcp_types.ElicitResult:
                # While the IDE's form is open, someone answers on the web page.
                [run] = (await http.get("/v1/runs")).json()["runs"]
                question = await _first_question(http, run["run_id"])
                path = f"/v1/runs/{run['run_id']}/elicitations/{question['question_id']}"
                first = await http.post(
                    path, json={"action": "accept", "content": {"name": "Turing"}}
                )
                late.append(str(first.status_code))
                return mcp_types.ElicitResult(action="accept", content={"name": "Ada"})

            async with Client(f"{url}/mcp", mode="legacy", elicitation_callback=slow_ide) as client:
                result = await client.call_tool("run_agent", {"task": "go", "agent": "asker"})
    assert late == ["200"]
    assert result.structured_content is not None
    answer = result.structured_content["answer"]
    assert "Turing" in answer, answer
    assert "Ada" not in answer


async def test_agentrt_mcp_over_stdio_asks_the_ide_too(npx: str, tmp_path: Path) -> None:
    """The same through ``agentrt mcp`` launched by the IDE: the run's model is
    a sim-server that calls the eliciting tool once."""
    config_file = tmp_path / "agentrt.toml"
    ide = Ide("accept", {"name": "Hopper"})
    async with SimServer(SimServerConfig(answer="answer", tool_rounds=1, ttft_ms=1)) as sim:
        config_file.write_text(
            f"""
rollouts = 1
warm_prefix = false

[store]
path = "{tmp_path / "runs.db"}"

[models]
default = "sim"

[models.backends.sim]
kind = "openai"
base_url = "{sim.url}/v1"
models = ["sim"]

[mcp.everything]
command = "{npx}"
args = ["-y", "{EVERYTHING}"]
elicitation = {{ mode = "ask" }}

[agents.asker]
instructions = "Ask."
tools = ["everything__trigger-elicitation-request"]
"""
        )
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "agentrt", "mcp", "--config", str(config_file)]
        )
        with anyio.fail_after(120):
            async with Client(params, mode="legacy", elicitation_callback=ide) as client:
                result = await client.call_tool("run_agent", {"task": "go", "agent": "asker"})
                assert result.structured_content is not None
                run_id = result.structured_content["run_id"]
                run = await client.read_resource(f"agentrt://runs/{run_id}")
                [contents] = run.contents
                assert isinstance(contents, mcp_types.TextResourceContents)
                rollout_id = json.loads(contents.text)["rollouts"][0]["rollout_id"]
                trajectory = await client.read_resource(
                    f"agentrt://runs/{run_id}/rollouts/{rollout_id}"
                )
    assert result.structured_content["status"] == "succeeded", result
    [question] = ide.asked
    assert question.message.startswith("[everything] "), question
    [steps] = trajectory.contents
    assert isinstance(steps, mcp_types.TextResourceContents)
    assert "Hopper" in steps.text
