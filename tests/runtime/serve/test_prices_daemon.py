"""``max_usd`` through the daemon: REST and MCP, with prices from the configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

pytestmark = pytest.mark.anyio


async def test_the_daemon_takes_max_usd_over_rest_and_mcp(tmp_path: Path, daemon_kit: Any) -> None:
    price = {"prompt_usd_per_mtok": 3, "completion_usd_per_mtok": 15}
    config = daemon_kit.config(tmp_path, prices={"scripted": price})  # the scripted model
    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=1)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        spec = (await client.get("/openapi.json")).json()
        budget = spec["components"]["schemas"]["Budget"]["properties"]["max_usd"]
        assert "Refused" not in budget.get("description", "")
        body = {"task": "add", "agent": "solver", "budget": {"max_usd": 0.5}}
        run_id = await daemon_kit.create_run(client, body)
        events = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
        finished = events[-1][2]
        assert finished["status"] == "succeeded"
        usage = finished["cost"]["usage"]
        expected = (3 * usage["prompt_tokens"] + 15 * usage["completion_tokens"]) / 1e6
        assert finished["cost"]["usd"] == pytest.approx(expected, rel=1e-12)
        assert finished["cost"]["usd"] > 0
        async with Client(f"{daemon.url}/mcp", mode="legacy") as mcp:
            result = await mcp.call_tool(
                "run_agent", {"task": "add", "agent": "solver", "max_usd": 0.5}
            )
        assert result.is_error is False
        structured = result.structured_content
        assert structured is not None
        assert structured["status"] == "succeeded"
        assert structured["cost"]["usd"] > 0
