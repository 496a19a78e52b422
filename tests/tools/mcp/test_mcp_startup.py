"""Starting MCP servers: in parallel, each within its own deadline; an
optional server does not hold the start and joins once ready; errors name
the server's URL or command.  And the sampling policy's choices (model
allow-list and hints, the run's budget) on a scripted backend."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from agentrt import Runtime
from agentrt.protocols import Budget, ModelRequest, ToolMessage
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig, SamplingPolicy, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._server_requests import (
    REFUSED,
    Caller,
    McpClientHooks,
    SamplingTarget,
    answer_sampling,
)
from agentrt.tools.mcp._servers import spawn_mcp_servers
from tests.tools.mcp.conftest import FIXTURE_SERVER

Factory = Callable[..., StdioServerConfig]

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def test_a_hanging_server_fails_at_its_own_deadline_and_an_optional_one_waits_for_none(
    fixture_server: Factory,
) -> None:
    servers = [
        fixture_server("good"),
        # Never speaks MCP: a required one fails at its connect deadline...
        StdioServerConfig(name="hang", command="sleep", args=["60"], connect_timeout_s=1.5),
        # ...an optional one is not waited for at all (its deadline is an hour).
        StdioServerConfig(
            name="later",
            command="sleep",
            args=["3600"],
            required=False,
            connect_timeout_s=3600,
        ),
    ]
    async with ActorSystem() as system:
        with anyio.fail_after(60):  # a hang guard: waiting for "later" would take an hour
            box = await spawn_mcp_servers(system, servers)
        assert set(box.failures) == {"hang"}
        assert "no answer to the MCP handshake within 1.5 s" in str(box.failures["hang"])
        assert "(sleep 60)" in str(box.failures["hang"])  # the command line is named
        # Still connecting once spawn returned: spawn did not wait for it.
        assert (await box.connections["later"].status()).state == "connecting"
        assert {t.spec.name for t in box.tools()} >= {"good__lookup"}
        await box.stop()


async def test_an_optional_server_joins_once_ready(fixture_server: Factory) -> None:
    async with ActorSystem() as system:
        box = await spawn_mcp_servers(system, [fixture_server("late", required=False)])
        assert box.tools() == []  # spawn did not wait
        with anyio.fail_after(30):
            while not box.tools():
                await anyio.sleep(0.1)
                await box.catch_up()
        assert "late__lookup" in {t.spec.name for t in box.tools()}
        await box.stop()


async def test_a_refused_url_is_named_in_the_error() -> None:
    config = HttpServerConfig(name="gone", url="http://127.0.0.1:9/mcp", connect_timeout_s=5)
    with pytest.raises(McpServerError) as caught:
        async with McpConnection(config):
            pass
    assert str(caught.value).startswith("MCP server 'gone' (http://127.0.0.1:9/mcp): ")


def _request(max_tokens: int = 50, hints: tuple[str, ...] = ()) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
        ],
        max_tokens=max_tokens,
        model_preferences=types.ModelPreferences(hints=[types.ModelHint(name=h) for h in hints])
        if hints
        else None,
    )


async def test_sampling_picks_an_allowed_model_by_the_servers_hints() -> None:
    backend = ScriptedBackend(["small says hi", "big says hi"], models=["small-1", "big-2"])
    ledger = BudgetLedger("r1", Budget(max_tokens=10_000))
    target = SamplingTarget(ledger=ledger, backends={"b": backend}, default_model="small-1")
    hooks = McpClientHooks(sampling_target=lambda run_id: target if run_id == "r1" else None)
    policy = SamplingPolicy(mode="allow", models=["small-1", "big-2"], max_tokens=20)
    first = await answer_sampling("s", policy, hooks, _request(), Caller(run_id="r1"))
    hinted = await answer_sampling(
        "s", policy, hooks, _request(hints=("big",)), Caller(run_id="r1")
    )
    assert isinstance(first, types.CreateMessageResult)
    assert isinstance(hinted, types.CreateMessageResult)
    assert (first.model, hinted.model) == ("small-1", "big-2")
    assert [r.model for r in backend.requests] == ["small-1", "big-2"]
    assert all(r.sampling.max_tokens == 20 for r in backend.requests)
    assert ledger.spent.model_calls == 2
    # A hint outside the allow-list is ignored; no run to charge is refused.
    only_small = SamplingPolicy(mode="allow", models=["small-1"])
    outside = await answer_sampling(
        "s", only_small, hooks, _request(hints=("big",)), Caller(run_id="r1")
    )
    assert isinstance(outside, types.ErrorData) or outside.model == "small-1"
    orphan = await answer_sampling("s", policy, hooks, _request(), Caller(run_id="other"))
    assert isinstance(orphan, types.ErrorData)
    assert orphan.code == REFUSED
    assert "no run to charge" in orphan.message


async def test_sampling_past_the_runs_budget_is_refused() -> None:
    backend = ScriptedBackend(["never"], models=["m"])
    ledger = BudgetLedger("r1", Budget(max_tokens=10))
    target = SamplingTarget(ledger=ledger, backends={"b": backend}, default_model="m")
    hooks = McpClientHooks(sampling_target=lambda run_id: target)
    refused = await answer_sampling(
        "s", SamplingPolicy(mode="allow"), hooks, _request(max_tokens=500), Caller(run_id="r1")
    )
    assert isinstance(refused, types.ErrorData)
    assert refused.code == REFUSED
    assert "budget" in refused.message
    assert backend.requests == []


async def test_an_optional_servers_tools_reach_the_runtimes_agents_once_it_joins(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "go"  # the server process waits for this file before speaking MCP
    late = {
        "command": "sh",
        "args": [
            "-c",
            f'while [ ! -e "{gate}" ]; do sleep 0.05; done; '
            f'exec "{sys.executable}" -W ignore "{FIXTURE_SERVER}"',
        ],
        "required": False,
    }

    def script(request: ModelRequest) -> Any:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedToolCall("late__lookup", {"key": "k"})
        [reply] = [m for m in request.messages if isinstance(m, ToolMessage)]
        return f"got {reply.content}"

    config = {
        "mcp": {"late": late},
        "agents": {
            "named": {"name": "named", "tools": ["late__lookup"]},
            "any": {"name": "any"},
        },
    }
    async with Runtime(config, backends=[ScriptedBackend(script)]) as rt:
        # The agent naming the late server's tool was accepted at start; a run
        # before the server joined is refused, naming it.
        with pytest.raises(ConfigError, match="optional MCP server 'late'"):
            await rt.run("go", agent="named")
        gate.touch()
        with anyio.fail_after(30):
            while (await rt.mcp_status())["late"].state != "ready":  # noqa: ASYNC110 (the actor's own state)
                await anyio.sleep(0.05)
        named = await rt.run("go", agent="named")
        unnamed = await rt.run("go", agent="any")
    assert (named.answer, unnamed.answer) == ("got value-of-k", "got value-of-k")
