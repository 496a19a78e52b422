"""REST threads: conversations the run store holds.  A thread's run gets
the thread's earlier turns (each succeeded run's task and answer) as native
messages before its task; one run at a time (a 409 naming the unfinished
one); threads are listed, read and deleted; unknown ones are a 404 naming
them.  The daemon runs on a scripted model that records every request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, UserMessage
from agentrt.testing import ScriptedBackend

pytestmark = [pytest.mark.anyio]

TERMINAL = {"succeeded", "failed", "cancelled"}


def roles(request: ModelRequest) -> list[str]:
    return [type(m).__struct_config__.tag for m in request.messages]  # type: ignore[misc]


async def finished(http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run, once terminal (polled: the run loop is another thread)."""
    while True:
        run: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}")).json()["run"]
        if run["status"] in TERMINAL:
            return run
        await anyio.sleep(0.02)


async def test_a_thread_holds_a_conversation(tmp_path: Path, daemon_kit: Any) -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> str:
        seen.append(request)
        asked = [m for m in request.messages if isinstance(m, UserMessage)]
        return f"answer {len(asked)}"

    config = daemon_kit.config(tmp_path, agents={"solver": {"stop_on": []}})
    backend = ScriptedBackend(script)
    async with (
        daemon_kit.running(config, backend) as endpoint,
        httpx.AsyncClient(base_url=endpoint.url, timeout=20.0) as http,
    ):
        created = await http.post("/v1/threads", json={"metadata": {"user": "ann"}})
        assert created.status_code == 201, created.text
        thread_id = created.json()["thread_id"]
        runs = f"/v1/threads/{thread_id}/runs"
        first = await http.post(runs, json={"task": "6 x 7?", "agent": "solver"})
        assert first.status_code == 201, first.text
        first_id = first.json()["run_id"]
        assert (await finished(http, first_id))["answer"] == "answer 1"
        assert roles(seen[-1]) == ["system", "user"]

        # one run at a time: while the next one waits on its model, a third is refused
        backend.latency_s = 60.0
        slow = await http.post(runs, json={"task": "take your time", "agent": "solver"})
        assert slow.status_code == 201, slow.text
        slow_id = slow.json()["run_id"]
        busy = await http.post(runs, json={"task": "and plus 1?", "agent": "solver"})
        assert busy.status_code == 409, busy.text
        assert slow_id in busy.json()["message"]
        assert (await http.post(f"/v1/runs/{slow_id}/cancel")).status_code == 200
        assert (await finished(http, slow_id))["status"] == "cancelled"
        backend.latency_s = 0.0

        second = await http.post(runs, json={"task": "and plus 1?", "agent": "solver"})
        assert second.status_code == 201, second.text
        assert (await finished(http, second.json()["run_id"]))["answer"] == "answer 2"
        # the thread's first turn, natively, then the new task (the cancelled
        # run added nothing)
        assert roles(seen[-1]) == ["system", "user", "assistant", "user"]
        _, question, answer, task = seen[-1].messages
        assert (question.content, answer.content, task.content) == (
            "6 x 7?",
            "answer 1",
            "and plus 1?",
        )

        thread = (await http.get(f"/v1/threads/{thread_id}")).json()
        assert [r["task"] for r in thread["runs"]] == ["6 x 7?", "take your time", "and plus 1?"]
        assert thread["metadata"] == {"user": "ann"}
        listed = (await http.get("/v1/threads")).json()["threads"]
        assert [t["thread_id"] for t in listed] == [thread_id]

        assert (await http.delete(f"/v1/threads/{thread_id}")).status_code == 204
        gone = await http.get(f"/v1/threads/{thread_id}")
        assert gone.status_code == 404
        assert gone.json()["where"] == "thread_id"
        assert thread_id in gone.json()["message"]
        orphan = await http.post(runs, json={"task": "hello?", "agent": "solver"})
        assert orphan.status_code == 404
        assert (await http.get(f"/v1/runs/{first_id}")).status_code == 200  # runs stay
        assert (await http.delete(f"/v1/threads/{thread_id}")).status_code == 404
