"""Failures say why (issue 15, item 6): with a model server that is down,
``/readyz`` says so and names it, and a run that fails because of it says
"cannot connect" to that address in its own error, in each failed
rollout's ``error`` (API), in the OpenAI endpoint's error and in the
Runtime's result; a live backend is ready and reported as such."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.testing import ScriptedBackend
from tests._support.ports import free_port

from .conftest import daemon_config

pytestmark = pytest.mark.anyio


def dead_models(port: int) -> dict[str, Any]:
    """A models section whose only backend is a server nobody runs."""
    return {
        "default": "local",
        "backends": {
            "local": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "models": ["m"],
                "retry": {"max_attempts": 1},
            }
        },
    }


async def test_a_run_on_a_dead_backend_names_it_in_its_error() -> None:
    port = free_port()
    async with Runtime({"models": dead_models(port)}) as rt:
        result = await rt.run("hello")
    assert result.status == "failed"
    assert result.error is not None
    assert "no rollout" in result.error
    assert f"127.0.0.1:{port}" in result.error
    assert "cannot connect" in result.error.lower()


async def _settled(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            detail: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
            if detail["run"]["status"] in ("succeeded", "failed", "cancelled"):
                return detail
            await anyio.sleep(0.05)


async def test_the_daemon_says_a_dead_backend_is_why(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    config = daemon_config(tmp_path, models=dead_models(port))
    async with anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: run_daemon(config, task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=30) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 503, ready.text
            body = ready.json()
            assert body["backends"]["local"]["ok"] is False
            assert address in body["backends"]["local"]["detail"]
            assert "backend 'local'" in body["message"]

            posted = await client.post(
                "/v1/runs", json={"task": "hello", "agent": "solver", "scaling": {"rollouts": 2}}
            )
            assert posted.status_code == 201, posted.text
            detail = await _settled(client, posted.json()["run_id"])
            run = detail["run"]
            assert run["status"] == "failed"
            assert address in run["error"]
            assert "cannot connect" in run["error"].lower()
            assert len(detail["rollouts"]) == 2
            for rollout in detail["rollouts"]:
                assert rollout["status"] == "failed"
                assert address in rollout["error"]

            # The same from the store, once the run is no longer cached.
            listed = (await client.get("/v1/runs")).json()["runs"]
            assert address in listed[0]["error"]

            # The OpenAI endpoint's error names it too.
            reply = await client.post(
                "/v1/chat/completions",
                json={"model": "agentrt/solver", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert reply.status_code == 502, reply.text
            assert address in reply.json()["error"]["message"]
        tg.cancel_scope.cancel()


async def test_a_live_backend_is_ready(tmp_path: Path) -> None:
    config = daemon_config(tmp_path)
    async with anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: run_daemon(
                config, backends=[ScriptedBackend(["hi"])], task_status=task_status
            )
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=30) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["backends"]["scripted"]["ok"] is True
        tg.cancel_scope.cancel()
