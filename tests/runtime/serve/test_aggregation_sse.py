"""Issue 28, item 3, at the daemon: while a run aggregates, its cost moves
on the SSE stream (a ``model_called`` and a ``budget`` event per judge call)
instead of jumping at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedReply, ScriptedToolCall

pytestmark = pytest.mark.anyio


def judged_or_42(request: ModelRequest) -> ReplySpec:
    text = str(request.messages[-1].content or "")
    if "Attempt" in text:  # a judge of the tournament
        return ScriptedReply(content="The first attempt is right.\nVERDICT: 1")
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return ScriptedToolCall("calculator", {"expression": "6*7"})
    return ScriptedReply(content="42")


async def test_budget_events_arrive_on_sse_while_a_run_aggregates(
    tmp_path: Path, daemon_kit: Any
) -> None:
    backend = ScriptedBackend(judged_or_42)
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config, backend) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        body = {
            "task": "6*7?",
            "agent": "solver",
            "scaling": {"rollouts": 4, "aggregate": "rtv", "options": {"skip_agreeing": False}},
        }
        run_id = await daemon_kit.create_run(client, body)
        with anyio.fail_after(30):
            events = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
        detail = (await client.get(f"/v1/runs/{run_id}")).json()
    kinds = [kind for _, kind, _ in events]
    assert kinds[-1] == "run_finished", kinds
    last_rollout = max(i for i, kind in enumerate(kinds) if kind == "rollout_finished")
    during = events[last_rollout + 1 : -1]
    judged = [d for _, kind, d in during if kind == "model_called"]
    assert judged, kinds
    assert {d["purpose"] for d in judged} == {"aggregation"}
    assert all(d["usage"]["prompt_tokens"] > 0 for d in judged)
    spent = [d["spent"]["model_calls"] for _, kind, d in during if kind == "budget"]
    # Each judge call is followed by the run's spend on the stream, which
    # moves through the aggregation (level by level) up to its total.
    assert len(spent) >= len(judged), (spent, len(judged))
    assert spent == sorted(spent)
    total = detail["result"]["cost"]["model_calls"]
    assert spent[-1] == total == len(backend.requests)
    steps = total - len(judged)
    assert any(steps < s < total for s in spent), (spent, steps, total)
    assert detail["result"]["aggregation_trace"]
