"""Issue 28, item 1: a budget cap is spent, not left over.  A call whose
worst case does not fit runs with ``max_tokens`` lowered to its share of
what is left; a run the cap cut short says so (``RunResult.stopped``, the
``run_finished`` event, the daemon's run detail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig, AgentLimits
from agentrt.client import RunPage
from agentrt.models import OpenAIBackend
from agentrt.protocols import Budget, RunResult, ScalingSpec
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator
from tests._support.backends import sim_backend

pytestmark = pytest.mark.anyio

CAP = 4000
ROLLOUTS = 8
# Replies of 20-80 tokens, one tool round: a step's worst case (its prompt
# and 1,024 tokens) is 3 to 4 times what it uses, and 8 rollouts use more
# than the cap (about 6,000 tokens), so the cap (not the task) ends the run.
SIM = SimServerConfig(
    model="m0",
    ttft_ms=0,
    token_ms=0,
    answer="answer",
    tool_rounds=1,
    reply_tokens=20,
    reply_tokens_max=80,
)


def solver(**limits: Any) -> AgentConfig:
    return AgentConfig(
        name="solver",
        model="m0",
        tools=["calculator"],
        stop_on=[],
        limits=AgentLimits(**{"max_steps": 6, "max_tokens_per_step": 1024, **limits}),
    )


def backend(server: SimServer) -> OpenAIBackend:
    return sim_backend(server)


def check_spent(
    tokens: int, served: int, answered: int, stopped: dict[str, Any] | None, where: str
) -> None:
    """No cap crossed; the cap spent (at least 80%) or every rollout
    answered; a cut run says by which cap and how many rollouts answered."""
    assert tokens <= CAP, where
    assert served <= CAP, where
    assert tokens >= 0.8 * CAP or answered == ROLLOUTS, where
    if answered < ROLLOUTS:
        assert stopped is not None, where
        assert stopped["limit"] == "max_tokens", where
        assert stopped["finished"] == answered, where
        assert stopped["rollouts"] == ROLLOUTS, where
        assert stopped["cut"] == ROLLOUTS - answered, where
    else:
        assert stopped is None, where


def served_tokens(server: SimServer) -> int:
    tokens = server.stats()["tokens"]
    return sum(tokens[k] for k in ("prompt", "completion", "abandoned_prompt"))


async def test_8_rollouts_under_4000_tokens_spend_the_cap_through_runtime() -> None:
    async with SimServer(SIM) as server:
        model = backend(server)
        config = {"agents": {"solver": solver()}, "early_stop": False, "warm_prefix": False}
        async with model, Runtime(config, backends=[model], tools=[Calculator()]) as rt:
            with anyio.fail_after(60):
                result: RunResult = await rt.run(
                    "What is 2 + 3?",
                    agent="solver",
                    scaling=ScalingSpec(rollouts=ROLLOUTS),
                    budget=Budget(max_tokens=CAP),
                )
        served = served_tokens(server)
    answered = sum(1 for s in result.summaries if s.answer is not None)
    stopped = msgspec.to_builtins(result.stopped)
    where = f"{result.cost}, {answered} answered, stopped {result.stopped}, served {served}"
    check_spent(result.cost.usage.total_tokens, served, answered, stopped, where)
    assert answered >= 1, where
    if result.stopped is not None:
        assert result.stopped.describe().startswith("cut short by max_tokens: "), where


async def test_8_rollouts_under_4000_tokens_spend_the_cap_through_the_daemon(
    tmp_path: Path, daemon_kit: Any
) -> None:
    async with SimServer(SIM) as server:
        model = backend(server)
        config = daemon_kit.config(
            tmp_path,
            agents={"solver": solver().model_dump(exclude={"name"})},
            early_stop=False,
        )
        async with (
            model,
            daemon_kit.running(config, model) as daemon,
            httpx.AsyncClient(base_url=daemon.url) as client,
        ):
            body = {
                "task": "What is 2 + 3?",
                "agent": "solver",
                "scaling": {"rollouts": ROLLOUTS},
                "budget": {"max_tokens": CAP},
            }
            run_id = await daemon_kit.create_run(client, body)
            with anyio.fail_after(60):
                events = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
            detail = (await client.get(f"/v1/runs/{run_id}")).json()
            listed = await client.get("/v1/runs")
            document = (await client.get("/openapi.json")).json()
        served = served_tokens(server)
    finished = events[-1][2]
    assert events[-1][1] == "run_finished", events[-1]
    result = detail["result"]
    answered = sum(1 for s in result["summaries"] if s.get("answer") is not None)
    where = f"{result['cost']}, {answered} answered, stopped {result.get('stopped')}"
    tokens = result["cost"]["usage"]["prompt_tokens"] + result["cost"]["usage"]["completion_tokens"]
    check_spent(tokens, served, answered, result.get("stopped"), where)
    # The event stream and the run's detail say the same.
    assert finished.get("stopped") == result.get("stopped"), where
    # So do the run's entry in the runs list and in its detail (``RunInfo``),
    # decoded as the client decodes them.
    [info] = [r for r in msgspec.json.decode(listed.content, type=RunPage).runs
              if r.run_id == run_id]  # fmt: skip
    assert msgspec.to_builtins(info.stopped) == result.get("stopped"), where
    assert detail["run"].get("stopped") == result.get("stopped"), where
    stopped = document["components"]["schemas"]["RunInfo"]["properties"]["stopped"]
    assert {"$ref": "#/components/schemas/BudgetCut"} in stopped["anyOf"], stopped
