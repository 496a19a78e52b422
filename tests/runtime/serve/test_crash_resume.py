"""The crash test: ``kill -9`` the daemon at random points while runs with
many rollouts execute against the sim-server, restart it, and check that
every run finishes, no committed step is lost or run again, and the SQLite
file passes ``PRAGMA integrity_check``.

"Run again" is measured at the model server: the sim-server counts attempts
per request id (``<rollout_id>-<step index>``).  Right after each kill (the
daemon is dead, nothing more can commit or be sent) the test records the
committed steps and the server's attempt counts; at the end, every one of
those steps must be unchanged in the store and must not have been requested
again.  Only steps in flight at a kill may be requested twice.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.testing import SimServerConfig
from tests._support.crash import Daemon, crash_seed, sim_daemon_toml
from tests._support.sim_process import sim_server_process

pytestmark = [pytest.mark.slow, pytest.mark.process]

TERMINAL = {"succeeded", "failed", "cancelled"}
LEAD_ROLLOUTS = 2
#: (task, agent, rollouts): a hierarchy's run (first: it takes the longest,
#: so every kill lands in it) and three runs of a plain agent.
RUNS = (
    ("what is 9*9", "lead", LEAD_ROLLOUTS),
    ("what is 6*7", "solver", 6),
    ("what is 12+30", "solver", 5),
    ("what is 50-8", "solver", 4),
)
#: A lead that gives each part to a helper (a sub-agent with the calculator).
HIERARCHY = """
entry: lead
agents:
  lead:
    description: Splits the work.
    instructions: Give each part to the helper.
    sub_agents: [helper]
    stop_on: []
  helper:
    description: Computes one part.
    instructions: Use the calculator.
    tools: [calculator]
    stop_on: []
"""


@pytest.fixture
def sim_url() -> Iterator[str]:
    with sim_server_process(
        SimServerConfig(ttft_ms=200, token_ms=1, tool_rounds=4, answer="answer", seed=7)
    ) as url:
        yield url


def _committed(db: Path) -> dict[tuple[str, int], bytes]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT s.rollout_id, s.idx, e.body FROM steps AS s JOIN events AS e "
            "ON e.run_id = s.run_id AND e.seq = s.seq"
        ).fetchall()
    return {(r, i): bytes(b) for r, i, b in rows}


def _attempts(sim_url: str) -> dict[str, int]:
    stats = httpx.get(f"{sim_url}/sim/stats?attempts=1", timeout=10).json()
    return {str(k): int(v) for k, v in stats["attempts_by_request_id"].items()}


def test_kill_9_resumes_every_run_without_losing_or_rerunning_a_step(
    tmp_path: Path, sim_url: str, daemon_kit: Any
) -> None:
    spec = tmp_path / "lead.yaml"
    spec.write_text(HIERARCHY)
    seed = crash_seed()
    rng = random.Random(seed)
    db = tmp_path / "runs.db"
    port = daemon_kit.free_port()
    head = "rollouts = 1\nearly_stop = false\nconcurrency = { sim = 4 }\n"
    agents = f"""
[agents]
lead = "{spec}"

[agents.solver]
instructions = "Solve the task. Use the calculator."
tools = ["calculator"]
temperature = 0.7
stop_on = []
"""
    config = tmp_path / "agentrt.toml"
    config.write_text(sim_daemon_toml(port, db, sim_url, agents, head))
    daemon = Daemon(daemon_kit.start_serve, config, port, tmp_path / "daemon.log")
    daemon.start()
    try:
        run_ids = []
        for task, agent, rollouts in RUNS:
            body = {"task": task, "agent": agent, "scaling": {"rollouts": rollouts}}
            response = httpx.post(f"{daemon.url}/v1/runs", json=body, timeout=10)
            assert response.status_code == 201, response.text
            run_ids.append(response.json()["run_id"])

        snapshots: list[tuple[dict[tuple[str, int], bytes], dict[str, int]]] = []
        kills = 0
        # The first kill waits for the hierarchy to commit a step (a helper's
        # or the lead's: it is slower to start than the plain agent), so every
        # seed interrupts it with work done and work left.
        lead_run = f"{run_ids[0]}-"
        give_up = time.monotonic() + 30
        while not any(r.startswith(lead_run) for r, _ in _committed(db)):
            assert time.monotonic() < give_up, "the hierarchy committed no step in 30 s"
            time.sleep(0.02)
        for _ in range(3):
            time.sleep(rng.uniform(0.4, 1.6))
            daemon.kill9()
            kills += 1
            snapshots.append((_committed(db), _attempts(sim_url)))
            daemon.start()

        deadline = time.monotonic() + 90
        infos: dict[str, dict[str, object]] = {}
        while time.monotonic() < deadline:
            infos = {
                rid: httpx.get(f"{daemon.url}/v1/runs/{rid}", timeout=10).json() for rid in run_ids
            }
            if all(i["run"]["status"] in TERMINAL for i in infos.values()):  # type: ignore[index]
                break
            time.sleep(0.2)
    finally:
        daemon.stop()

    context = f"(seed {seed}; daemon log {daemon.log})"
    statuses = {rid: info["run"]["status"] for rid, info in infos.items()}  # type: ignore[index]
    assert set(statuses.values()) == {"succeeded"}, f"{statuses} {context}"
    assert any(info["run"]["resumed"] > 0 for info in infos.values()), context  # type: ignore[index]

    final = _committed(db)
    attempts = _attempts(sim_url)
    rerun: list[str] = []
    for committed, seen in snapshots:
        for key, step_body in committed.items():
            assert final.get(key) == step_body, f"step {key} lost or changed {context}"
            request_id = f"{key[0]}-{key[1]}"
            if attempts.get(request_id, 0) != seen.get(request_id, 0):
                rerun.append(request_id)
    assert not rerun, f"committed steps were requested again: {rerun} {context}"
    assert sum(len(c) for c, _ in snapshots) > 0, f"no step was committed before a kill {context}"

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        per_rollout: dict[str, list[int]] = {}
        for rollout, idx in conn.execute("SELECT rollout_id, idx FROM steps ORDER BY 1, 2"):
            per_rollout.setdefault(rollout, []).append(idx)
        finished = dict(conn.execute("SELECT rollout_id, status FROM rollouts").fetchall())
    top = {r for r in per_rollout if "." not in r}  # a sub-agent's id is <parent>.<agent>-<n>
    assert len(top) == sum(n for _, _, n in RUNS), per_rollout.keys()
    assert not any("~" in r for r in per_rollout), per_rollout.keys()  # none restarted
    for rollout, indices in per_rollout.items():
        assert indices == list(range(len(indices))), f"{rollout}: {indices} {context}"
        # A sub-agent call a kill interrupted ends cancelled: the step of its
        # parent that made it ran again, and called it anew under a new id.
        expected = ("finished",) if rollout in top else ("finished", "cancelled")
        assert finished[rollout] in expected, f"{rollout}: {finished[rollout]} {context}"
        if rollout in top:  # four tool rounds and the answer
            assert len(indices) == 5, f"{rollout}: {indices} {context}"
    helpers = [r for r in per_rollout if r not in top]
    finished_helpers = [r for r in helpers if finished[r] == "finished"]
    # Each lead rollout asked its helper four times (the sim-server's tool rounds).
    assert len(finished_helpers) >= 4 * LEAD_ROLLOUTS, f"{sorted(helpers)} {context}"
    print(json.dumps({"seed": seed, "kills": kills, "steps": len(final)}))
