"""A run waiting on an approval survives ``kill -9``: the restarted daemon
resumes it waiting on the same question (same id, same deadline), lists it,
and an answer given after the restart runs the tool and ends the run; the
model call that asked for the tool is not sent again (the journal replays
it, counted at the sim-server)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.client import Client
from agentrt.protocols import ElicitationAnswered, ElicitationRequested, RunRequest, ToolCalled
from agentrt.testing import SimServerConfig
from tests._support.crash import Daemon, sim_daemon_toml
from tests._support.sim_process import sim_server_process

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture
def sim_url() -> Iterator[str]:
    config = SimServerConfig(ttft_ms=5, token_ms=0, tool_rounds=1, answer="text", seed=3)
    with sim_server_process(config) as url:
        yield url


def _waiting(client: Client, run_id: str) -> ElicitationRequested:
    give_up = time.monotonic() + 60
    while True:
        found = client.list_elicitations(run_id)
        if found:
            [question] = found
            return question
        assert time.monotonic() < give_up, "the run asked no question in 60 s"
        time.sleep(0.05)


def test_a_run_waiting_on_an_approval_survives_kill_9(
    tmp_path: Path, sim_url: str, daemon_kit: Any
) -> None:
    port = daemon_kit.free_port()
    config = tmp_path / "agentrt.toml"
    agents = """
[agents.solver]
instructions = "Use the calculator."
tools = ["calculator"]
stop_on = []

[approvals.calculator]
timeout_s = 3600
"""
    config.write_text(sim_daemon_toml(port, tmp_path / "runs.db", sim_url, agents))
    log = tmp_path / "daemon.log"
    daemon = Daemon(daemon_kit.start_serve, config, port, log)
    daemon.start()
    try:
        with Client(daemon.url) as client:
            run = client.create_run(RunRequest(task="what is 6*7", agent="solver"))
            before = _waiting(client, run.run_id)
            assert client.get_run(run.run_id).run.status == "waiting"
        daemon.kill9()

        daemon.start()
        with Client(daemon.url) as client:
            after = _waiting(client, run.run_id)
            assert after.question_id == before.question_id
            assert after.expires_at == before.expires_at  # the deadline is not reset
            detail = client.get_run(run.run_id)
            assert (detail.run.status, detail.run.resumed) == ("waiting", 1)
            client.approve(run.run_id, after.question_id)
            with client.follow(run.run_id) as events:
                seen = list(events)
            ended = client.get_run(run.run_id).run
            [called] = [e for e in seen if isinstance(e, ToolCalled)]
            path = f"/v1/runs/{run.run_id}/rollouts/{called.rollout_id}"
            trajectory = httpx.get(f"{daemon.url}{path}", timeout=10).json()
    finally:
        daemon.stop()
    assert ended.status == "succeeded", log.read_text()[-3000:]
    asked = [e for e in seen if isinstance(e, ElicitationRequested)]
    assert [e.question_id for e in asked] == [before.question_id] * 2  # once per daemon
    [answered] = [e for e in seen if isinstance(e, ElicitationAnswered)]
    assert answered.action == "accept"
    assert called.tool == "calculator"
    [result] = [r for step in trajectory["steps"] for r in step["tool_results"]]
    assert "did not run" not in result["content"], result  # it ran, approved
    stats = httpx.get(f"{sim_url}/sim/stats?attempts=1", timeout=10).json()
    attempts = stats["attempts_by_request_id"]
    assert attempts
    assert set(attempts.values()) == {1}, attempts
