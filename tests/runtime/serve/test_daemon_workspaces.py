"""The daemon leaves no workspace behind: a run's are deleted when it ends,
and those of a run in flight when the daemon stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.runtime.testing._scripted import ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools.sandbox._workspaces import default_workspace_root

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.usefixtures("bwrap")]


def _config(tmp_path: Path, daemon_kit: Any) -> Any:
    agents = {"coder": {"tools": ["shell"], "stop_on": [], "limits": {"max_steps": 4}}}
    return daemon_kit.config(tmp_path, agents=agents)


def _shell_then(
    final: ScriptedReply, seen: list[str], answering: anyio.Event | None = None
) -> ScriptedBackend:
    """A model that writes a file through the shell, then gives ``final``
    (setting ``answering`` when asked for it)."""

    def script(request: ModelRequest) -> Any:
        results = [str(m.content) for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return ScriptedToolCall("shell", {"command": "echo kept > f.txt && pwd"})
        seen.extend(results)
        if answering is not None:
            answering.set()
        return final

    return ScriptedBackend(script)


async def _finished(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as events:
        async for _ in events.aiter_lines():
            pass  # the stream ends with the run
    body: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
    return body


async def test_a_daemon_runs_workspaces_are_deleted_when_it_ends(
    tmp_path: Path, daemon_kit: Any
) -> None:
    seen: list[str] = []
    backend = _shell_then(ScriptedReply(content="done"), seen)
    async with (
        daemon_kit.running(_config(tmp_path, daemon_kit), backend) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=60) as client,
    ):
        body = {"task": "write", "agent": "coder", "scaling": {"rollouts": 2}}
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        detail = await _finished(client, run_id)
        assert detail["run"]["status"] == "succeeded", detail
        assert len(seen) == 2, seen
        assert all("/workspace" in text for text in seen), seen
        assert not await anyio.Path(default_workspace_root() / run_id).exists()


async def test_a_stopping_daemon_deletes_the_workspaces_of_runs_in_flight(
    tmp_path: Path, daemon_kit: Any
) -> None:
    seen: list[str] = []
    # The answer never comes: the daemon stops while the run waits for it.
    answering = anyio.Event()
    backend = _shell_then(ScriptedReply(content="late", delay_s=600), seen, answering)
    async with daemon_kit.running(_config(tmp_path, daemon_kit), backend) as daemon:
        async with httpx.AsyncClient(base_url=daemon.url, timeout=60) as client:
            body = {"task": "write", "agent": "coder"}
            run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
            with anyio.fail_after(60):
                await answering.wait()  # the shell call is done; the answer is pending
        run_dir = anyio.Path(default_workspace_root() / run_id)
        assert [p.name async for p in run_dir.iterdir()] != []
    assert len(seen) == 1, seen
    assert "/workspace" in seen[0], seen
    assert not await run_dir.exists()
