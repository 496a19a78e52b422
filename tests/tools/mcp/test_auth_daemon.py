"""The daemon hands an MCP server's authorization URL to the person behind
it: an OAuth-protected server (optional, so the daemon serves meanwhile)
waits for approval; ``GET /v1/mcp/authorizations`` names the URL to open;
once the person approves, the entry goes and the server's tools are there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest

from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.testing import ScriptedBackend
from tests._support.daemon import serving_manager

from .oauth_server import oauth_servers

pytestmark = pytest.mark.anyio


async def _pending(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await http.get("/v1/mcp/authorizations")
    assert response.status_code == 200, response.text
    pending: list[dict[str, Any]] = response.json()["pending"]
    return pending


async def test_the_daemon_lists_the_approval_a_server_waits_for(tmp_path: Path) -> None:
    async with oauth_servers() as servers:
        config = config_from_mapping(
            {
                "server": {"port": 0, "shutdown_grace_s": 0.5},
                "store": {"path": str(tmp_path / "runs.db")},
                "mcp": {
                    "secure": servers.daemon_server(tmp_path / "tokens"),
                },
                "agents": {"solver": {"tools": ["calculator"], "stop_on": []}},
            },
            source="test",
        )
        backend = ScriptedBackend(["done"], name="scripted", models=["scripted"])
        async with (
            serving_manager(config, [backend]) as daemon,
            httpx.AsyncClient(base_url=daemon.url, timeout=30) as http,
        ):
            with anyio.fail_after(30):
                while not (pending := await _pending(http)):  # noqa: ASYNC110 - polled like a person would
                    await anyio.sleep(0.05)
            (prompt,) = pending
            assert prompt["server"] == "secure"
            assert prompt["server_url"] == servers.mcp_url
            assert "code_challenge_method=S256" in prompt["authorization_url"]
            # The person approves in a browser: the authorization server
            # redirects it back to agentrt's loopback listener.
            async with httpx2.AsyncClient(timeout=10) as browser:
                approved = await browser.get(prompt["authorization_url"])
                assert approved.status_code == 302, approved.text
                back = await browser.get(approved.headers["location"])
                assert back.status_code == 200
            with anyio.fail_after(30):
                while await _pending(http):  # noqa: ASYNC110 - the server connects meanwhile
                    await anyio.sleep(0.05)
            status = await daemon.manager.runtime.mcp_status()
            assert status["secure"].state == "ready"
        assert [g.grant_type for g in servers.state.grants] == ["authorization_code"]
