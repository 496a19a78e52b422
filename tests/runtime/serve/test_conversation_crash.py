"""Conversations across a ``kill -9``: the daemon (a process) answers a
first turn, is killed, restarts on the same run store, and a second turn
reaches the model server with the first turn's messages before its own:
through the Responses API (``previous_response_id``) and a REST thread.  The
sim-server records the roles of each chat request's messages by request id
(``<rollout id>-<step>``), so the test counts what the server received."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.testing import SimServerConfig
from tests._support.crash import Daemon, sim_daemon_toml
from tests._support.sim_process import sim_server_process

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture
def sim_url() -> Iterator[str]:
    with sim_server_process(SimServerConfig(ttft_ms=0, token_ms=0, answer="answer", seed=3)) as url:
        yield url


def _roles(sim_url: str, response_id: str) -> list[str]:
    """The roles of the messages the model server got for the first step
    of the response's (or run's) run: its one rollout."""
    stats = httpx.get(f"{sim_url}/sim/stats?messages=1", timeout=10).json()
    run_id = response_id.removeprefix("resp_")
    return list(stats["roles_by_request_id"][f"{run_id}-r0-0"])


def _finished(base: str, run_id: str) -> None:
    while httpx.get(f"{base}/v1/runs/{run_id}", timeout=10).json()["run"]["status"] not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        time.sleep(0.02)


def test_a_conversation_survives_kill_9(tmp_path: Path, sim_url: str, daemon_kit: Any) -> None:
    port = daemon_kit.free_port()
    config = tmp_path / "agentrt.toml"
    agents = '\n[agents.solver]\ninstructions = "Answer briefly."\n'
    head = "rollouts = 1\nearly_stop = false\n"
    config.write_text(sim_daemon_toml(port, tmp_path / "runs.db", sim_url, agents, head))
    daemon = Daemon(daemon_kit.start_serve, config, port, tmp_path / "daemon.log")
    url = f"http://127.0.0.1:{port}/v1/responses"
    body = {"model": "agentrt/solver", "input": "what is 6*7"}
    base = f"http://127.0.0.1:{port}"
    task = {"task": "what is 6*7", "agent": "solver"}
    daemon.start()
    try:
        first = httpx.post(url, json=body, timeout=30)
        assert first.status_code == 200, first.text
        first_id = first.json()["id"]
        assert _roles(sim_url, first_id) == ["system", "user"]
        thread_id = httpx.post(f"{base}/v1/threads", json={}, timeout=10).json()["thread_id"]
        in_thread = httpx.post(f"{base}/v1/threads/{thread_id}/runs", json=task, timeout=10)
        assert in_thread.status_code == 201, in_thread.text
        _finished(base, in_thread.json()["run_id"])
        daemon.kill9()

        daemon.start()
        follow = {"model": "agentrt/solver", "input": "and plus 1?"}
        second = httpx.post(url, json={**follow, "previous_response_id": first_id}, timeout=30)
        assert second.status_code == 200, second.text
        assert second.json()["previous_response_id"] == first_id
        # the first turn (question and answer), then the new question
        assert _roles(sim_url, second.json()["id"]) == ["system", "user", "assistant", "user"]
        missing = httpx.post(
            url, json={**follow, "previous_response_id": "resp_run-gone"}, timeout=30
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["param"] == "previous_response_id"
        # the thread too
        task = {"task": "and plus 1?", "agent": "solver"}
        again = httpx.post(f"{base}/v1/threads/{thread_id}/runs", json=task, timeout=10)
        assert again.status_code == 201, again.text
        _finished(base, again.json()["run_id"])
        assert _roles(sim_url, again.json()["run_id"]) == ["system", "user", "assistant", "user"]
        thread = httpx.get(f"{base}/v1/threads/{thread_id}", timeout=10).json()
        assert [r["status"] for r in thread["runs"]] == ["succeeded", "succeeded"]
    finally:
        daemon.stop()
