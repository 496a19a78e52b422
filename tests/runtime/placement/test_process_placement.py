"""Rollouts in worker processes of this host (``[placement] kind = "local",
workers = N``), against sim-server: the same workload gives the same run as
in-process; a capped run across two workers stops exactly at its cap,
charged what the server served; a cancelled run leaves no rollout running
on a worker; a worker killed mid-run loses and repeats no committed step
(its rollouts go on on the other, and it is replaced); the workers exit
with the Runtime, and with the driver's process when it is killed."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil
import pytest

from agentrt import Runtime, RuntimeConfig
from agentrt.agents import Agent, AgentConfig, EventLog
from agentrt.protocols import (
    Budget,
    Cost,
    Event,
    RolloutFinished,
    RolloutRestarted,
    RunResult,
    ScalingSpec,
    StepRecorded,
)
from agentrt.protocols._ids import is_top_level
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.placement._process_driver import ProcessPlacement
from agentrt.runtime.placement._worker_books import WorkerInfo
from agentrt.testing import ScriptedBackend, SimServer, SimServerConfig
from agentrt.tools import Calculator, FunctionTool, ToolContext, tool
from tests._support.placement import PRICES, CommittedSteps, solver_config, solver_runtime
from tests._support.polling import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.slow]

CHAT = "/v1/chat/completions"


def config(url: str, placement: dict[str, Any]) -> RuntimeConfig:
    return RuntimeConfig.model_validate(solver_config(url, placement))


WORKERS = {"kind": "local", "workers": 2, "connect_timeout_s": 120}


def pool(rt: Runtime) -> ProcessPlacement:
    assert isinstance(rt.placement, ProcessPlacement)
    return rt.placement


def per_rollout_steps(events: list[Event]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for event in events:
        if isinstance(event, StepRecorded) and is_top_level(event.rollout_id):
            out.setdefault(event.rollout_id, []).append(event.step)
    return out


def _plain(steps: list[Any]) -> list[Any]:
    drop = {"started_at", "duration_s", "latency_s", "cached_prompt_tokens"}

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    return [clean(msgspec.to_builtins(step)) for step in steps]


def _plain_summaries(result: RunResult) -> list[Any]:
    """The summaries but their costs (timings, and cache hits that depend on them)."""
    return [
        msgspec.structs.replace(s, cost=Cost(), rollout_id=s.rollout_id.rsplit("-", 1)[-1])
        for s in result.summaries
    ]


async def test_the_same_workload_gives_the_same_run_in_worker_processes() -> None:
    runs = []
    for placement in ({"kind": "local"}, WORKERS):
        sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=5, token_ms=0.2)
        async with solver_runtime(sim, placement) as (server, rt):
            log = EventLog()
            result = await rt.run(
                "What is 17+25?", scaling=ScalingSpec(rollouts=12), events=log, run_id="run-eq"
            )
            spread = [w.placed for w in getattr(rt.placement, "workers", [])]
            stats = server.stats()
            # Nobody reads this one's events: the workers send its steps alone.
            unread = await rt.run(
                "What is 17+25?", scaling=ScalingSpec(rollouts=12), run_id="run-unread"
            )
            runs.append((result, log, stats, spread, unread))
    (local, local_log, _, _, _), (placed, placed_log, stats, spread, unread) = runs
    # The trajectories the summaries are made of are the same (a worker's
    # result leaves out the steps the driver committed: they are put back).
    assert _plain_summaries(placed) == _plain_summaries(local)
    assert _plain_summaries(unread) == _plain_summaries(local)
    assert local.status == placed.status == "succeeded"
    assert placed.answer is not None
    assert "42" in placed.answer
    assert local.answer == placed.answer
    assert sum(spread) == 12
    a, b = per_rollout_steps(local_log.events), per_rollout_steps(placed_log.events)
    assert sorted(a) == sorted(b)
    assert all(_plain(a[r]) == _plain(b[r]) for r in a)
    seqs = [e.seq for e in placed_log.events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert placed.cost.model_calls == stats["requests"][CHAT] == 36
    # The same tokens and money (the cache's hits depend on timing: priced alike).
    assert placed.cost.usage.prompt_tokens == local.cost.usage.prompt_tokens
    assert placed.cost.usage.completion_tokens == local.cost.usage.completion_tokens
    assert placed.cost.usd == local.cost.usd


async def capped_run(
    rollouts: int, max_model_calls: int
) -> tuple[RunResult, list[WorkerInfo], dict[str, Any]]:
    """``rollouts`` of "What is 6*7?" on the two workers, capped at
    ``max_model_calls``: the result, the workers after it, and what the
    server counted."""
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=20, token_ms=0.2)
    async with SimServer(sim) as server:
        async with Runtime(config(server.url, WORKERS), tools=[Calculator()], prices=PRICES) as rt:
            result = await rt.run(
                "What is 6*7?",
                scaling=ScalingSpec(rollouts=rollouts),
                budget=Budget(max_model_calls=max_model_calls),
            )
            workers = pool(rt).workers
        return result, workers, server.stats()


async def test_a_capped_run_across_worker_processes_stops_exactly_at_its_cap() -> None:
    result, workers, stats = await capped_run(80, 120)
    spread = [w.placed for w in workers]
    # 80 rollouts of 3 calls would make 240: the cap of 120 holds exactly,
    # and every call the server served is charged (none lost on the way).
    assert result.cost.model_calls == 120
    assert stats["requests"][CHAT] == 120
    # The run stopped once its budget was spent, not while the workers'
    # slices still held some: no call was cancelled in flight, so each is
    # charged as the server counted it.
    assert stats["generations"]["completed"] == 120
    tokens = stats["tokens"]
    assert result.cost.usage.prompt_tokens == tokens["prompt"]
    assert result.cost.usage.completion_tokens == tokens["completion"]
    assert all(n >= 10 for n in spread), spread  # both workers ran rollouts


async def test_a_capped_run_far_from_its_cap_leases_budget_slices() -> None:
    result, workers, stats = await capped_run(30, 200)
    admissions = sum(w.admissions for w in workers)
    assert result.status == "succeeded", result.error
    # 30 rollouts of 3 calls, all made and charged as the server counted them.
    assert result.cost.model_calls == stats["requests"][CHAT] == 90
    assert result.cost.usage.prompt_tokens == stats["tokens"]["prompt"]
    assert result.cost.usage.completion_tokens == stats["tokens"]["completion"]
    # Each worker waited for the driver for its first call of the run; its
    # slice (32 calls more, and more asked for ahead of need) paid for the
    # others (the driver was on none of their paths): of 90 calls, at most
    # two waits per worker.
    assert 1 <= admissions <= 4, admissions


async def test_a_cancelled_run_leaves_no_rollout_on_the_workers() -> None:
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=200, token_ms=1)
    async with solver_runtime(sim, WORKERS) as (server, rt):
        placement = pool(rt)
        steps = 0
        with anyio.CancelScope() as scope:

            async def sink(event: Event) -> None:
                nonlocal steps
                if isinstance(event, StepRecorded):
                    steps += 1
                    if steps == 10:
                        scope.cancel()

            await rt.run("What is 1+1?", scaling=ScalingSpec(rollouts=16), events=sink)
        assert scope.cancelled_caught
        # Each rollout was cancelled on its worker, and answered.
        assert [w.in_flight for w in placement.workers] == [0, 0]
        assert all(w.alive for w in placement.workers)
        served = server.stats()["requests"][CHAT]
        again = await rt.run("What is 2+2?", scaling=ScalingSpec(rollouts=4))
        assert again.status == "succeeded", again.error
        # The cancelled run's calls stopped with it: only the new run's were made.
        assert server.stats()["requests"][CHAT] == served + again.cost.model_calls


async def test_a_worker_killed_mid_run_loses_and_repeats_no_committed_step() -> None:
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=300, token_ms=1)
    sink = CommittedSteps(enough=20)
    log = sink.log
    async with solver_runtime(sim, WORKERS) as (server, rt):
        placement = pool(rt)
        victim = placement.workers[0].pid
        # Capped far above its use: the workers hold budget slices.
        result = await sink.run_and_kill(
            rt,
            "What is 20+22?",
            lambda: os.kill(victim, signal.SIGKILL),
            scaling=ScalingSpec(rollouts=24),
            budget=Budget(max_model_calls=10_000),
        )
        infos = placement.workers
        attempts: dict[str, int] = dict(server.engine.attempts)
        stats = server.stats()
        # The replacement (after a backoff of about 1 s).
        await eventually(lambda: len(placement.workers) >= 3, within=120)
        again = await rt.run("What is 1+1?", scaling=ScalingSpec(rollouts=8))
        replaced = placement.workers[2]
    assert result.status == "succeeded", result.error
    assert result.answer is not None
    assert "42" in result.answer
    assert [i.alive for i in infos[:2]] == [False, True], infos
    assert "signal 9" in infos[0].lost
    finished = log.of_type(RolloutFinished)
    assert len(finished) == 24
    assert {f.status for f in finished} == {"finished"}
    for steps in per_rollout_steps(log.events).values():
        assert [s.index for s in steps] == [0, 1, 2]
    restarted = log.of_type(RolloutRestarted)
    assert restarted
    assert any(r.resumed_steps > 0 for r in restarted)
    sink.assert_none_repeated_or_lost(attempts)
    assert again.status == "succeeded", again.error
    assert replaced.alive
    assert replaced.placed > 0
    # What the dead worker had in flight is charged as reserved (the rest
    # of its slice goes back): no call the server served goes uncharged.
    served = stats["tokens"]
    assert result.cost.usage.prompt_tokens >= served["prompt"]
    assert result.cost.usage.completion_tokens >= served["completion"]
    assert result.cost.model_calls >= stats["generations"]["completed"]


async def test_the_workers_exit_with_the_runtime() -> None:
    async with (
        SimServer(SimServerConfig()) as server,
        Runtime(config(server.url, WORKERS), tools=[Calculator()]) as rt,
    ):
        pids = [w.pid for w in pool(rt).workers]
        assert all(psutil.pid_exists(pid) for pid in pids)
    _, alive = psutil.wait_procs([_proc(pid) for pid in pids if psutil.pid_exists(pid)], 30)
    assert not alive, alive


DRIVER = textwrap.dedent(
    """
    import json, sys, anyio
    from agentrt import Runtime, RuntimeConfig

    async def main() -> None:
        config = {"placement": {"kind": "local", "workers": 2, "connect_timeout_s": 120},
                  "models": {"default": "sim", "backends": {"sim": {
                      "kind": "openai", "base_url": sys.argv[1], "models": ["sim"]}}}}
        async with Runtime(RuntimeConfig.model_validate(config)) as rt:
            print(json.dumps([w.pid for w in rt.placement.workers]), flush=True)
            await anyio.sleep_forever()

    if __name__ == "__main__":
        anyio.run(main)
    """
)


def test_the_workers_die_with_a_killed_driver(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(script), "http://127.0.0.1:9/v1"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert driver.stdout is not None
        pids = json.loads(driver.stdout.readline())
        workers = [_proc(pid) for pid in pids]
        assert len(workers) == 2
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        _, alive = psutil.wait_procs(workers, 30)
        assert not alive, alive
    finally:
        driver.kill()
        driver.wait(30)
        if driver.stdout is not None:
            driver.stdout.close()


def _proc(pid: int) -> psutil.Process:
    return psutil.Process(pid)


async def test_what_cannot_reach_a_worker_process_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"placement\.workers: .*backends given as objects"):
        async with Runtime(
            RuntimeConfig.model_validate({"placement": {"kind": "local", "workers": 1}}),
            backends=[ScriptedBackend(["42"])],
        ):
            pass
    async with SimServer(SimServerConfig()) as server:
        placement = {"kind": "local", "workers": 1, "connect_timeout_s": 120}
        async with Runtime(config(server.url, placement), tools=[Calculator()]) as rt:
            agent = Agent(AgentConfig(name="built"), backends=[ScriptedBackend(["x"])])
            with pytest.raises(ConfigError, match="local placement with workers rebuilds"):
                await rt.run("hi", agent=agent)


@tool
async def doubled(x: int) -> int:
    """Double ``x``."""
    return 2 * x


def halved(x: int) -> float:
    """Halve ``x``."""
    return x / 2


async def test_a_function_tool_pickles_as_what_rebuilds_it() -> None:
    # What a worker process receives (the spec goes through multiprocessing's
    # pickler, where _process_driver registers the reducer): a function
    # tool's argument model is made at run time and cannot be pickled by itself.
    def roundtrip(obj: object) -> Any:
        return pickle.loads(ForkingPickler.dumps(obj))

    context = ToolContext(run_id="r1", call_id="c1")
    # A module's @tool comes back as that very object (sent by name).
    assert roundtrip(doubled) is doubled
    # Others are rebuilt from their function, under their name and description.
    named = FunctionTool.from_callable(halved, name="half", description="Half of it.")
    copy = roundtrip(named)
    assert copy is not named
    assert copy.spec == named.spec
    assert (await copy.call({"x": 3}, context)).content[0].text == "1.5"
    calculator = roundtrip(Calculator())
    assert (await calculator.call({"expression": "6*7"}, context)).content[0].text == "42"
