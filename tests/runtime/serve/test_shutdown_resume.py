"""Shutdown and resume: a daemon stopped mid-run leaves exactly its
committed steps; the next one resumes the run from them and makes only the
model calls that were not committed.  SIGTERM lets running runs finish
within the grace period and refuses new ones meanwhile."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocols import (
    ModelRequest,
    RolloutId,
    Step,
    StepRecorded,
    SystemMessage,
    ToolMessage,
)
from agentrt.runtime.serve.store._run_store import RunStore, StoreError
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedReply, ScriptedToolCall
from tests._support.configs import scripted_models
from tests._support.specs import solve_then_check

pytestmark = pytest.mark.anyio


async def _settled(client: httpx.AsyncClient, run_id: str, *, timeout_s: float) -> Any:
    """The run's detail once it succeeded or failed."""
    with anyio.fail_after(timeout_s):
        while True:
            detail = (await client.get(f"/v1/runs/{run_id}")).json()
            if detail["run"]["status"] in ("succeeded", "failed"):
                return detail
            await anyio.sleep(0.02)


def _steps(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT rollout_id, idx FROM steps ORDER BY 1, 2").fetchall()


async def _resumed(
    daemon_kit: Any, config: Any, backend: Any, run_id: str, *, timeout_s: float = 20
) -> tuple[Any, list[tuple[str, int]]]:
    """A daemon of ``config`` (its store ``runs.db``) on ``backend`` takes
    the run up: its detail once it settled, and the store's steps then."""
    async with (
        daemon_kit.running(config, backend) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        detail = await _settled(client, run_id, timeout_s=timeout_s)
    return detail, _steps(config.store.path)


async def test_a_stopped_run_resumes_from_its_committed_steps(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path, server={"shutdown_grace_s": 0.0})
    first = daemon_kit.scripted(steps=6, latency_s=0.05)
    body = {"task": "count", "agent": "solver", "scaling": {"rollouts": 2}}
    async with (
        daemon_kit.running(config, first) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        with anyio.fail_after(10):
            while True:
                if len(_steps(tmp_path / "runs.db")) >= 4:
                    break
                await anyio.sleep(0.01)
    committed = _steps(tmp_path / "runs.db")
    assert 4 <= len(committed) < 14
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        status = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    assert status == ("running",)  # checkpointed, not failed or cancelled

    second = daemon_kit.scripted(steps=6, latency_s=0.01)
    async with (
        daemon_kit.running(config, second) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        detail = await _settled(client, run_id, timeout_s=20)
        events = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
    assert detail["run"]["status"] == "succeeded"
    assert detail["run"]["resumed"] == 1
    # Two rollouts of 7 steps: the second daemon made only the calls not committed.
    assert len(second.requests) == 14 - len(committed)
    assert _steps(tmp_path / "runs.db") == sorted(
        (f"{run_id}-r{r}", i) for r in range(2) for i in range(7)
    )
    # The cost counts every call once: the committed steps' calls were
    # restored, not re-run, and the calls the shutdown cut short (the first
    # daemon's backend received them; the run's journal says they were in
    # flight) are charged as reserved, as the first daemon's ledger had them.
    cut = len(first.requests) - len(committed)
    assert cut >= 1
    assert detail["run"]["cost"]["model_calls"] == 14 + cut
    seqs = [seq for seq, _, _ in events]
    assert seqs == sorted(set(seqs))
    assert seqs[0] == 1
    assert [kind for _, kind, _ in events].count("run_started") == 1
    # Resumed steps were taken up where they stopped: the message history of
    # the first resumed step holds every earlier tool result.
    trajectory = second.requests[0]
    assert sum(isinstance(m, ToolMessage) for m in trajectory.messages) >= 1


async def test_the_store_refuses_a_step_committed_twice(tmp_path: Path) -> None:
    from agentrt.protocols import RunRequest

    async with RunStore(tmp_path / "runs.db") as store:
        await store.create_run("run-1", RunRequest(task="t"))
        step = StepRecorded(
            run_id="run-1", rollout_id="run-1-r0", step=Step(index=0, messages=()), seq=1
        )
        await store.record(step)
        again = StepRecorded(
            run_id="run-1", rollout_id="run-1-r0", step=Step(index=0, messages=()), seq=2
        )
        with pytest.raises(StoreError, match="UNIQUE"):
            await store.record(again)
        await store.record(
            StepRecorded(
                run_id="run-1", rollout_id="run-1-r0", step=Step(index=1, messages=()), seq=3
            )
        )
        checkpoint = await store.checkpoint("run-1")
        key = RolloutId("run-1", "r0")
        assert [s.index for s in checkpoint.rollouts[key].steps] == [0, 1]
        assert checkpoint.next_seq == 4
        assert await store.integrity_check() == "ok"


@pytest.mark.slow
def test_sigterm_lets_running_runs_finish_and_refuses_new_ones(
    tmp_path: Path, daemon_kit: Any
) -> None:
    port = daemon_kit.free_port()
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f"""
[server]
port = {port}
shutdown_grace_s = 20

[store]
path = "runs.db"

{scripted_models(["finished in time"], backend="slow", latency_s=1.5)}"""
    )
    proc = daemon_kit.start_serve(config, port, tmp_path / "daemon.log")
    url = f"http://127.0.0.1:{port}"
    try:
        run_id = httpx.post(f"{url}/v1/runs", json={"task": "t"}, timeout=5).json()["run_id"]
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        refused = httpx.post(f"{url}/v1/runs", json={"task": "late"}, timeout=5)
        assert refused.status_code == 503
        assert refused.json()["error"] == "unavailable"
        assert httpx.get(f"{url}/readyz", timeout=5).status_code == 503
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        rows = conn.execute("SELECT run_id, status, answer FROM runs").fetchall()
    assert rows == [(run_id, "succeeded", "finished in time")]
    logged = (tmp_path / "daemon.log").read_text()
    assert '"event": "daemon_signal"' in logged
    assert '"signal": "SIGTERM"' in logged
    assert f'"run_id": "{run_id}"' in logged


async def test_pdr_refinement_rollouts_resume_too(tmp_path: Path, daemon_kit: Any) -> None:
    """Aggregation runs again after a restart; PDR's refinement rollouts
    have stable ids, so their committed steps are taken up, not repeated."""
    config = daemon_kit.config(tmp_path, server={"shutdown_grace_s": 0.0})
    # The scripted rollouts all agree: refine anyway (no convergence stop).
    options = {"rounds": 2, "m": 2, "k": 1, "select": "rtv", "g": 2, "v": 1}
    options["stop_on_agreement"] = False
    body = {
        "task": "count",
        "agent": "solver",
        "scaling": {"rollouts": 2, "aggregate": "pdr", "options": options},
    }

    def refine_steps() -> list[tuple[str, int]]:
        return [s for s in _steps(tmp_path / "runs.db") if "refine" in s[0]]

    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=4, latency_s=0.04)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        with anyio.fail_after(20):
            while True:
                if len(refine_steps()) >= 2:
                    break
                await anyio.sleep(0.01)
    before = set(_steps(tmp_path / "runs.db"))
    second = daemon_kit.scripted(steps=4, latency_s=0.0)
    detail, after = await _resumed(daemon_kit, config, second, run_id, timeout_s=30)
    assert detail["run"]["status"] == "succeeded", detail["run"]
    assert before <= set(after)
    refined = {r for r, _ in after if "refine" in r}
    assert len(refined) == 2  # m = 2 refinement rollouts, no restarted duplicates
    for rollout in refined:
        assert [i for r, i in after if r == rollout] == list(range(5))
    requested = {m.request_id for m in second.requests if m.request_id}
    assert not requested & {f"{r}-{i}" for r, i in before}


async def test_one_process_per_store(tmp_path: Path) -> None:
    from agentrt.runtime.kernel._errors import ConfigError

    async with RunStore(tmp_path / "runs.db"):
        with pytest.raises(ConfigError, match=r"in use by another agentrt process \(pid \d+\)"):
            async with RunStore(tmp_path / "runs.db"):
                pass
    async with RunStore(tmp_path / "runs.db") as store:  # released on exit
        assert await store.integrity_check() == "ok"


HIERARCHY = """
entry: lead
agents:
  lead:
    description: Splits the work.
    instructions: You are the lead. Give each part to the helper.
    sub_agents: [helper]
  helper:
    description: Computes one part.
    instructions: You are the helper. Use the calculator.
    tools: [calculator]
"""


def _lead_and_helper(request: ModelRequest) -> ReplySpec:
    """The lead calls the helper three times, one call a step, then answers;
    each helper call is a calculator step and an answer."""
    system = request.messages[0]
    results = sum(isinstance(m, ToolMessage) for m in request.messages)
    if isinstance(system, SystemMessage) and "the lead" in system.content:
        if results < 3:
            return ScriptedToolCall("helper", {"task": f"part {results}"})
        return ScriptedReply(content="42")
    if results < 1:
        return ScriptedToolCall("calculator", {"expression": "3+4"})
    return ScriptedReply(content="7")


def _stalling(
    script: Callable[[ModelRequest], ReplySpec], stalls: Callable[[ModelRequest], bool]
) -> Callable[[ModelRequest], ReplySpec]:
    """``script``, except that the first request ``stalls`` picks never gets
    its reply (it is still in flight when the daemon stops)."""
    stalled = False

    def stalling(request: ModelRequest) -> ReplySpec:
        nonlocal stalled
        if not stalled and stalls(request):
            stalled = True
            return ScriptedReply(content="(never seen)", delay_s=60)
        return script(request)

    return stalling


def _second_helper_answer() -> Callable[[ModelRequest], bool]:
    answers = 0

    def second(request: ModelRequest) -> bool:
        nonlocal answers
        system = request.messages[0]
        helper = isinstance(system, SystemMessage) and "You are the helper" in system.content
        if helper and any(isinstance(m, ToolMessage) for m in request.messages):
            answers += 1
        return answers == 2

    return second


async def test_a_hierarchy_resumes_its_entry_agent_from_its_committed_steps(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """The entry agent's committed steps (each a finished sub-agent call) are
    replayed, not re-run; the call in flight runs again under a new id; the
    run's cost counts every committed model call once."""
    spec = tmp_path / "lead.yaml"
    spec.write_text(HIERARCHY)
    config = daemon_kit.config(
        tmp_path, server={"shutdown_grace_s": 0.0}, agents={"lead": str(spec)}
    )
    body = {"task": "three parts", "agent": "lead"}
    # Each run numbers its sub-agent calls from 1 (the resumed one too, but
    # past the numbers its checkpoint holds).
    # The second helper call's answer never comes: the daemon stops with the
    # lead's first step committed and that call half done.
    first = ScriptedBackend(_stalling(_lead_and_helper, _second_helper_answer()), latency_s=0.01)
    async with (
        daemon_kit.running(config, first) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        lead = f"{run_id}-r0"

        def helper_half_done() -> str | None:
            """A helper call with its first step committed, its second not,
            after the lead committed a step: stop the daemon there."""
            steps = set(_steps(tmp_path / "runs.db"))
            if (lead, 0) not in steps:
                return None
            return next(
                (r for r, i in steps if r.startswith(f"{lead}.") and (r, 1) not in steps), None
            )

        with anyio.fail_after(10):
            while (interrupted := helper_half_done()) is None:  # noqa: ASYNC110 - polls the database
                await anyio.sleep(0.005)
    before = _steps(tmp_path / "runs.db")
    lead_steps = [i for r, i in before if r == lead]
    assert lead_steps == list(range(len(lead_steps)))
    assert len(lead_steps) == 1  # stopped while the lead had work left
    assert (interrupted, 0) in before
    assert (interrupted, 1) not in before

    second = ScriptedBackend(_lead_and_helper, latency_s=0.0)
    detail, after = await _resumed(daemon_kit, config, second, run_id)
    assert detail["run"]["status"] == "succeeded", detail["run"]
    assert detail["run"]["answer"] == "42"
    assert set(before) <= set(after)
    # The lead went on under its own id: steps 0..3, nothing restarted as "~1".
    assert [i for r, i in after if r == lead] == [0, 1, 2, 3]
    assert not any("~" in r for r, _ in after)
    # Nothing committed was asked again; sub-agent calls got fresh ids.
    requested = {m.request_id for m in second.requests if m.request_id}
    assert not requested & {f"{r}-{i}" for r, i in before}
    helpers = {r for r, _ in after if r.startswith(f"{lead}.")}
    assert {r for r in helpers if (r, 1) in set(after)} == helpers - {interrupted}
    assert len(helpers) == 4  # one per part, and the interrupted call
    # The interrupted call is ended, not left running; the others finished.
    status = {r["rollout_id"]: r["status"] for r in detail["rollouts"]}
    assert status.pop(interrupted) == "cancelled"
    assert set(status.values()) == {"finished"}
    # The lead's second step had its reply on record (journaled) but was not
    # committed: it was taken up with that reply, not asked again.
    assert f"{lead}-1" in {m.request_id for m in first.requests}
    assert f"{lead}-1" not in requested
    # Every call either daemon's backend received is in the cost once: the
    # committed steps', the new ones, the lead's journaled reply and the
    # helper call the stop cut short (charged as reserved).
    cut = len(first.requests) - len(before)
    assert cut == 2
    assert detail["run"]["cost"]["model_calls"] == len(before) + len(second.requests) + cut
    assert len(second.requests) == len(after) - len(before) - 1


def _solver_and_checker(request: ModelRequest) -> ReplySpec:
    system = request.messages[0]
    results = sum(isinstance(m, ToolMessage) for m in request.messages)
    if isinstance(system, SystemMessage) and "the solver" in system.content and results < 3:
        return ScriptedToolCall("calculator", {"expression": f"{results}+1"})
    return ScriptedReply(content="42")


async def test_a_pipeline_restarts_and_its_interrupted_attempt_is_charged_and_ended(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """A pipeline cannot be taken up mid-stage: it runs again as ``<id>~1``;
    what the interrupted attempt committed stays, is charged to the run's
    cost, and its rollouts end as cancelled (none is left running)."""
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(solve_then_check(calculator=True))
    config = daemon_kit.config(
        tmp_path, server={"shutdown_grace_s": 0.0}, agents={"pipe": str(spec)}
    )

    # The solver's third step never gets its reply: the daemon stops mid-stage.
    def solver_third(request: ModelRequest) -> bool:
        return sum(isinstance(m, ToolMessage) for m in request.messages) == 2

    first = ScriptedBackend(_stalling(_solver_and_checker, solver_third), latency_s=0.01)
    async with (
        daemon_kit.running(config, first) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        created = await client.post("/v1/runs", json={"task": "solve", "agent": "pipe"})
        run_id = created.json()["run_id"]
        old = f"{run_id}-r0"
        with anyio.fail_after(10):
            while (f"{old}.solve.1", 1) not in set(_steps(tmp_path / "runs.db")):  # noqa: ASYNC110
                await anyio.sleep(0.005)
    before = _steps(tmp_path / "runs.db")
    assert before == [(f"{old}.solve.1", 0), (f"{old}.solve.1", 1)]

    second = ScriptedBackend(_solver_and_checker, latency_s=0.0)
    detail, after = await _resumed(daemon_kit, config, second, run_id)
    assert detail["run"]["status"] == "succeeded", detail["run"]
    assert set(before) <= set(after)
    again = f"{run_id}-r0~1"
    assert sorted({r for r, _ in after} - {r for r, _ in before}) == [
        f"{again}.check.1",
        f"{again}.solve.1",
    ]
    status = {r["rollout_id"]: r["status"] for r in detail["rollouts"]}
    assert status == {
        old: "cancelled",
        f"{old}.solve.1": "cancelled",
        again: "finished",
        f"{again}.solve.1": "finished",
        f"{again}.check.1": "finished",
    }
    # The committed calls, the new ones, and the solver's third call that the
    # stop cut short (journaled in flight: charged as reserved).
    cut = len(first.requests) - len(before)
    assert cut == 1
    assert detail["run"]["cost"]["model_calls"] == len(before) + len(second.requests) + cut


async def test_a_store_file_from_before_rollouts_recorded_their_start_is_upgraded(
    tmp_path: Path,
) -> None:
    """A store an older agentrt created has no ``rollouts.started`` column:
    opening it adds the column and keeps what it held."""
    from agentrt.protocols import RolloutStarted, RunRequest

    db = tmp_path / "old.db"
    async with RunStore(db) as store:
        await store.create_run("run-1", RunRequest(task="t"))
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE rollouts DROP COLUMN started")
    async with RunStore(db) as store:
        assert await store.run_info("run-1") is not None
        await store.record(
            RolloutStarted(
                run_id="run-1", rollout_id="run-1-r0.helper-1", seq=1, agent="helper", task="sub"
            )
        )
        trajectory = await store.trajectory("run-1", "run-1-r0.helper-1")
    assert trajectory is not None
    assert (trajectory.agent, trajectory.task) == ("helper", "sub")
