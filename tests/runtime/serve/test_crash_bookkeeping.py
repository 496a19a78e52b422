"""Exactly-once bookkeeping across crashes: a run under a cap of model
calls, its daemon killed with ``kill -9`` again and again while calls are in
flight.  The model server (the sim-server, in its own process) counts what
it was sent: never more than the cap, and the run reports every call the
server saw (a call a kill left in flight is charged, as reserved, by the
next incarnation from the run's journal).  Without the journal the server
saw 25 calls of a 16-call run that reported 16.
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
CAP = 16
CHAT = "/v1/chat/completions"


@pytest.fixture
def sim_url() -> Iterator[str]:
    # Half a second a call: a round of four calls is in flight long enough to
    # be cut by a kill, and a resumed run's rounds outlast its restart (at
    # 150 ms, a run could finish its last calls before /readyz answered).
    config = SimServerConfig(ttft_ms=500, token_ms=1, tool_rounds=5, answer="answer", seed=11)
    with sim_server_process(config) as url:
        yield url


def _served(sim_url: str) -> int:
    stats = httpx.get(f"{sim_url}/sim/stats", timeout=10).json()
    return int(stats["requests"].get(CHAT, 0))


def _status(url: str, run_id: str) -> str:
    return str(httpx.get(f"{url}/v1/runs/{run_id}", timeout=10).json()["run"]["status"])


def _journal(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        rows = dict(
            conn.execute(
                "SELECT type, COUNT(*) FROM events WHERE type IN "
                "('call_reserved', 'call_settled') GROUP BY type"
            ).fetchall()
        )
    return int(rows.get("call_reserved", 0)), int(rows.get("call_settled", 0))


def test_a_call_cap_holds_at_the_server_through_kill_9s(
    tmp_path: Path, sim_url: str, daemon_kit: Any
) -> None:
    seed = crash_seed()
    rng = random.Random(seed)
    db = tmp_path / "runs.db"
    port = daemon_kit.free_port()
    config = tmp_path / "agentrt.toml"
    head = "rollouts = 1\nearly_stop = false\nconcurrency = { sim = 8 }\n"
    agents = """
[agents.solver]
instructions = "Solve the task. Use the calculator."
tools = ["calculator"]
stop_on = []
"""
    config.write_text(sim_daemon_toml(port, db, sim_url, agents, head))
    log = tmp_path / "daemon.log"
    daemon = Daemon(daemon_kit.start_serve, config, port, log)
    daemon.start()
    url = daemon.url
    try:
        # Four rollouts of six calls each want 24 calls: the cap binds.
        body = {
            "task": "what is 6*7",
            "agent": "solver",
            "scaling": {"rollouts": 4},
            "budget": {"max_model_calls": CAP},
        }
        response = httpx.post(f"{url}/v1/runs", json=body, timeout=10)
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        kills = 0
        # What the server had taken at the last kill: the next incarnation's
        # calls are the ones after it (sampling afresh after a restart would
        # miss calls the resumed run sent before /readyz answered).
        at_kill = 0
        for _ in range(5):
            # Kill while calls are in flight: this incarnation sent some.
            give_up = time.monotonic() + 30
            while _served(sim_url) == at_kill and time.monotonic() < give_up:
                if _status(url, run_id) in TERMINAL:
                    break  # the cap is spent: no call is coming
                time.sleep(0.01)
            time.sleep(rng.uniform(0.02, 0.12))
            if _status(url, run_id) in TERMINAL:
                break
            daemon.kill9()
            at_kill = _served(sim_url)
            kills += 1
            daemon.start()
        deadline = time.monotonic() + 90
        info = {}
        while time.monotonic() < deadline:
            info = httpx.get(f"{url}/v1/runs/{run_id}", timeout=10).json()
            if info["run"]["status"] in TERMINAL:
                break
            time.sleep(0.2)
    finally:
        daemon.stop()

    context = f"(seed {seed}, {kills} kills; daemon log {log})"
    assert info["run"]["status"] in TERMINAL, f"{info['run']} {context}"
    assert kills >= 2, f"the run ended before two kills {context}"
    served = _served(sim_url)
    reported = info["run"]["cost"]["model_calls"]
    reserved, settled = _journal(db)
    facts = json.dumps(
        {"served": served, "reported": reported, "reserved": reserved, "settled": settled}
    )
    # The cap holds where the calls land, crash or not...
    assert served <= CAP, f"{facts} {context}"
    # ...and the run owns up to every call the server saw (a call journaled
    # and killed before it was sent is charged too: reported may exceed served).
    assert served <= reported <= CAP, f"{facts} {context}"
    assert reserved >= served, f"{facts} {context}"
    # Calls were cut by kills (else this proved nothing about crashes).
    assert settled < reserved, f"no call was in flight at a kill: {facts} {context}"
    print(json.dumps({"seed": seed, "kills": kills, "served": served, "reported": reported}))
