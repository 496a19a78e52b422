"""Rollouts placed on a real 3-node Ray cluster (``conftest.py``), against
sim-server: the same workload gives the same answers, trajectories and
cost as the local placement; a capped run of 200 rollouts across both
worker nodes stops exactly at its cap, charged what the server counted;
MCP stdio servers start on the worker nodes and serve their rollouts;
the errors a user can make are named before any model call; and killing
a worker node mid-run loses no committed step and requests none again:
its rollouts go on elsewhere.  (Last, as it leaves one worker node.)
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil
import pytest

from agentrt import Runtime
from agentrt.agents import Agent, AgentConfig, EventEmitter, EventLog
from agentrt.protocols import (
    Budget,
    CallReserved,
    CallSettled,
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutRestarted,
    RunResult,
    ScalingSpec,
    StepRecorded,
)
from agentrt.protocols._ids import is_top_level
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.memory._view import NOTE_HEADER
from agentrt.runtime.placement._ray_driver import RayPlacement
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator, tool
from agentrt.tools.sandbox._workspaces import rollout_key
from tests._support.placement import (
    PRICES,
    CommittedSteps,
    solver_config,
    solver_runtime,
)
from tests._support.polling import eventually

from .conftest import Cluster

pytestmark = [pytest.mark.anyio, pytest.mark.process]

CHAT = "/v1/chat/completions"
WHOAMI = Path(__file__).with_name("whoami_server.py")
PLANNER = str(Path(__file__).resolve().parents[4] / "examples" / "planner_workers.yaml")
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
TIMING = {
    "started_at",
    "duration_s",
    "latency_s",
    "ts",
    "seq",
    "cached_prompt_tokens",
    "wall_seconds",
}


def ray_placement(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "ray",
        "address": cluster.address,
        "workers": 2,
        "connect_timeout_s": 90,
        **extra,
    }


def workers(rt: Runtime) -> RayPlacement:
    assert isinstance(rt.placement, RayPlacement)
    return rt.placement


def _plain(value: Any) -> Any:
    """A step or cost without what timing decides (times, cache hits)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list | tuple):  # to_builtins keeps a step's tuples
        return [_plain(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (paths), for a readable failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only on one side" for k in a.keys() ^ b.keys()]
        for key in a.keys() & b.keys():
            out += differences(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def per_rollout(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        rollout = getattr(event, "rollout_id", None)
        if rollout:
            out[rollout].append(event)
    return out


async def run_workload(placement: dict[str, Any]) -> tuple[RunResult, EventLog, dict[str, Any]]:
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=5, token_ms=0.2)
    async with solver_runtime(sim, placement) as (server, rt):
        log = EventLog()
        result = await rt.run(
            "What is 17+25?", scaling=ScalingSpec(rollouts=12), events=log, run_id="run-eq"
        )
        return result, log, server.stats()


async def test_the_same_workload_gives_the_same_run_under_local_and_ray(cluster: Cluster) -> None:
    local, local_log, local_stats = await run_workload({"kind": "local"})
    placed, placed_log, placed_stats = await run_workload(ray_placement(cluster))

    assert local.status == placed.status == "succeeded"
    assert local.answer == placed.answer
    assert placed.answer is not None
    assert "42" in placed.answer
    assert [s.answer for s in local.summaries] == [s.answer for s in placed.summaries]
    # Trajectories: every step of every rollout, as committed.
    a, b = per_rollout(local_log.events), per_rollout(placed_log.events)
    assert sorted(a) == sorted(b)
    assert len(a) == 12
    for rollout in a:
        assert [type(e).__name__ for e in a[rollout]] == [type(e).__name__ for e in b[rollout]]
        steps_a = [
            _plain(msgspec.to_builtins(e.step)) for e in a[rollout] if isinstance(e, StepRecorded)
        ]
        steps_b = [
            _plain(msgspec.to_builtins(e.step)) for e in b[rollout] if isinstance(e, StepRecorded)
        ]
        assert steps_a == steps_b, differences(steps_a, steps_b)[:5]
        assert len(steps_a) == 3
    # The run's events are numbered in order, once each.
    seqs = [e.seq for e in placed_log.events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    # Cost: the same calls and tokens, what the servers counted.
    assert _plain(msgspec.to_builtins(local.cost)) == _plain(msgspec.to_builtins(placed.cost))
    assert placed.cost.model_calls == placed_stats["requests"][CHAT] == 36
    assert local_stats["requests"][CHAT] == 36


async def test_a_remote_step_is_committed_before_the_next_one_is_requested(
    cluster: Cluster,
) -> None:
    """The run's sink (the daemon's store) takes a ``StepRecorded`` before
    the rollout on its worker sends its next request: while the sink holds
    the step, the server has not seen the next one."""
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=5)
    early: list[str] = []
    checked = 0
    placement = ray_placement(cluster)
    async with (
        SimServer(sim) as server,
        Runtime(solver_config(server.url, placement), tools=[Calculator()]) as rt,
    ):

        async def slow_store(event: Event) -> None:
            nonlocal checked
            if isinstance(event, StepRecorded) and is_top_level(event.rollout_id):
                following = f"{event.rollout_id}-{event.step.index + 1}"
                await anyio.sleep(0.05)  # a slow commit
                if following in server.engine.attempts:
                    early.append(following)
                checked += 1

        result = await rt.run("What is 3+4?", scaling=ScalingSpec(rollouts=8), events=slow_store)

    assert result.status == "succeeded", result.error
    assert checked == 24
    assert early == []


async def test_a_journaled_run_books_each_remote_call_before_it_is_sent(
    cluster: Cluster,
) -> None:
    """``journal=True`` (the daemon's runs) on Ray workers: each call's
    ``CallReserved`` reaches the run's sink (the store) before the worker
    sends the call, and its ``CallSettled`` carries the reply; the journal
    accounts for every call the server saw."""
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=5)
    early: list[str] = []
    reserved: dict[str, str | None] = {}
    settled: dict[str, bool] = {}
    placement = ray_placement(cluster)
    async with (
        SimServer(sim) as server,
        Runtime(solver_config(server.url, placement), tools=[Calculator()]) as rt,
    ):

        async def slow_store(event: Event) -> None:
            if isinstance(event, CallReserved):
                await anyio.sleep(0.05)  # a slow commit
                if event.request_id in server.engine.attempts:
                    early.append(str(event.request_id))
                reserved[event.call] = event.request_id
            elif isinstance(event, CallSettled):
                settled[event.call] = event.reply is not None

        result = await rt.run(
            "What is 3+4?", scaling=ScalingSpec(rollouts=6), events=slow_store, journal=True
        )
        served = sum(server.engine.attempts.values())

    assert result.status == "succeeded", result.error
    assert early == []
    assert len(reserved) == served == result.cost.model_calls == 18
    assert set(settled) == set(reserved)
    assert all(settled.values())


# Ray Client's own data thread, at ``ray.shutdown``, sets an exception on
# the futures of calls the driver cancelled while closing and trips over
# them (``InvalidStateError`` in ``ray_client_streaming_rpc``): Ray's, not ours.
@pytest.mark.filterwarnings(
    "ignore:Exception in thread ray_client_streaming_rpc"
    ":pytest.PytestUnhandledThreadExceptionWarning"
)
async def test_a_ray_client_address_places_the_rollouts_too(cluster: Cluster) -> None:
    """``address = "ray://HOST:10001"``: the driver reaches the cluster
    through its Ray Client server (the head starts one on port 10001), as a
    laptop outside the cluster would; the run is the same."""
    sim = SimServerConfig(answer="answer", tool_rounds=1, ttft_ms=5)
    host = cluster.address.rsplit(":", 1)[0]
    placement = ray_placement(cluster, address=f"ray://{host}:10001")
    async with (
        SimServer(sim) as server,
        Runtime(solver_config(server.url, placement), tools=[Calculator()]) as rt,
    ):
        result = await rt.run("What is 3+4?", scaling=ScalingSpec(rollouts=4))
        served = sum(server.engine.attempts.values())
    assert result.status == "succeeded", result.error
    assert served == result.cost.model_calls == 8


def sub_agent_calls(log: EventLog) -> list[str]:
    """Each sub-agent call's steps, by parent and agent (a call's number
    is a per-process counter)."""
    return sorted(
        e.rollout_id.rsplit("-", 1)[0]
        for e in log.of_type(StepRecorded)
        if not is_top_level(e.rollout_id)
    )


async def test_a_hierarchy_from_a_spec_file_runs_the_same_on_the_workers(cluster: Cluster) -> None:
    """A planner delegating to sub-agents (``examples/planner_workers.yaml``):
    its sub-agent rollouts run on the worker with their parent, and the run
    matches the local one."""
    runs: list[tuple[RunResult, EventLog]] = []
    for placement in ({"kind": "local"}, ray_placement(cluster)):
        sim = SimServerConfig(answer="answer", tool_rounds=1, ttft_ms=5)
        async with SimServer(sim) as server:
            cfg = solver_config(server.url, placement)
            cfg["agents"]["planner"] = PLANNER
            async with Runtime(cfg, tools=[Calculator()], prices=PRICES) as rt:
                log = EventLog()
                result = await rt.run(
                    "What is 17*23?",
                    agent="planner",
                    scaling=ScalingSpec(rollouts=4),
                    events=log,
                    run_id="run-h",
                )
        runs.append((result, log))
    (local, local_log), (placed, placed_log) = runs
    assert placed.status == local.status == "succeeded", placed.error
    assert placed.answer == local.answer
    assert sub_agent_calls(placed_log), "no sub-agent ran"
    assert sub_agent_calls(placed_log) == sub_agent_calls(local_log)
    assert _plain(msgspec.to_builtins(placed.cost)) == _plain(msgspec.to_builtins(local.cost))


async def test_mcp_stdio_servers_run_on_the_worker_nodes(cluster: Cluster, npx: str) -> None:
    sim = SimServerConfig(answer="answer", tool_rounds=1, ttft_ms=5)
    everything = {
        "command": npx,
        "args": ["-y", EVERYTHING, "stdio"],
        # No network in the namespace: npm answers from its cache.
        "env": {"npm_config_offline": "true", "PATH": os.environ["PATH"]},
    }
    async with SimServer(sim) as server:
        cfg = solver_config(server.url, ray_placement(cluster), mcp={"everything": everything})
        cfg["agents"]["echo"] = {
            "name": "echo",
            "instructions": "Echo the task.",
            "tools": ["everything__echo"],
            "model": "sim",
        }
        async with Runtime(cfg, tools=[Calculator()]) as rt:
            placement = workers(rt)
            log = EventLog()
            result = await rt.run(
                "Say hello", agent="echo", scaling=ScalingSpec(rollouts=6), events=log
            )
            # Each worker runs its own server-everything, under its own process.
            servers: dict[int, int] = {}
            for info in placement.workers:
                worker = psutil.Process(info.pid)
                servers[info.index] = sum(
                    1
                    for child in worker.children(recursive=True)
                    if "server-everything" in " ".join(child.cmdline())
                )
    assert result.status == "succeeded", result.error
    assert all(n >= 1 for n in servers.values()), servers
    assert {i.placed > 0 for i in placement.workers} == {True}
    results = [r.content for e in log.of_type(StepRecorded) for r in e.step.tool_results]
    assert len(results) == 6, results
    assert all("Echo:" in str(r) for r in results), results


async def test_a_per_rollout_server_starts_for_each_rollout_on_its_worker_and_closes(
    cluster: Cluster, open_dir: Path
) -> None:
    """``per_rollout`` on Ray: each rollout's calls reach a stdio server the
    rollout's worker started for it alone, offered the rollout's workspace
    as its root, and closed when the rollout ended."""
    sim = SimServerConfig(answer="answer", tool_rounds=1, ttft_ms=5)
    workspaces = open_dir / "workspaces"
    run_id = "run-whoami"
    # Made beforehand, as a rollout's shell would: creating one hands it to
    # the sandbox's user, whose uid this namespace (root mapped only) lacks.
    for slot in ("r0", "r1", "r2", "r3"):
        (workspaces / run_id / slot).mkdir(parents=True)
    whoami = {
        "command": sys.executable,
        "args": [str(WHOAMI)],
        "per_rollout": True,
        "workspace_root": str(workspaces),
    }
    async with SimServer(sim) as server:
        cfg = solver_config(server.url, ray_placement(cluster), mcp={"who": whoami})
        cfg["agents"]["who"] = {
            "name": "who",
            "instructions": "Say who answers.",
            "tools": ["who__whoami"],
            "model": "sim",
        }
        async with Runtime(cfg, tools=[Calculator()]) as rt:
            placement = workers(rt)
            worker_pids = {info.pid for info in placement.workers}
            log = EventLog()
            result = await rt.run(
                "Who?", agent="who", scaling=ScalingSpec(rollouts=4), run_id=run_id, events=log
            )
            # Read before the runtime closes (and its shared connections with it).
            texts = {
                e.rollout_id: str(r.content)
                for e in log.of_type(StepRecorded)
                for r in e.step.tool_results
            }
            assert all(text.startswith("{") for text in texts.values()), texts
            answered: dict[str, dict[str, Any]] = {
                rollout_id: json.loads(text) for rollout_id, text in texts.items()
            }
            alive = [
                seen["pid"]
                for seen in answered.values()
                if psutil.pid_exists(seen["pid"])
                and psutil.Process(seen["pid"]).status() != psutil.STATUS_ZOMBIE
            ]
    assert result.status == "succeeded", result.error
    assert len(answered) == 4, answered
    # One server process per rollout, each a child of a rollout worker.
    assert len({seen["pid"] for seen in answered.values()}) == 4, answered
    assert {seen["ppid"] for seen in answered.values()} <= worker_pids, (answered, worker_pids)
    # Each offered its own rollout's workspace (and nothing else) as its root.
    for rollout_id, seen in answered.items():
        space = workspaces / run_id / rollout_key(run_id, rollout_id)
        assert seen["roots"] == [space.resolve().as_uri()], (rollout_id, seen)
    # Each rollout's server was gone when the run came back.
    assert alive == []


async def test_a_capped_run_of_200_rollouts_stops_exactly_at_its_cap(cluster: Cluster) -> None:
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=20, token_ms=0.2)
    async with SimServer(sim) as server:
        async with Runtime(
            solver_config(server.url, ray_placement(cluster)), tools=[Calculator()], prices=PRICES
        ) as rt:
            result = await rt.run(
                "What is 6*7?",
                scaling=ScalingSpec(rollouts=200),
                budget=Budget(max_model_calls=300),
            )
            spread = [i.placed for i in workers(rt).workers]
        stats = server.stats()
    # 200 rollouts of 3 calls would make 600: the cap of 300 holds exactly.
    assert result.cost.model_calls == 300
    assert stats["requests"][CHAT] == 300
    assert stats["generations"]["completed"] == 300
    # The run stopped once its budget was spent, not while the workers'
    # slices still held some: no call was cancelled in flight, so each is
    # charged as the server counted it.
    tokens = stats["tokens"]
    assert result.cost.usage.prompt_tokens == tokens["prompt"]
    assert result.cost.usage.completion_tokens == tokens["completion"]
    assert all(n >= 50 for n in spread), spread  # both worker nodes ran rollouts
    assert result.answer is not None
    assert "42" in result.answer


async def test_what_cannot_be_placed_is_named_before_any_model_call(cluster: Cluster) -> None:
    async with SimServer(SimServerConfig()) as server:
        # More workers than the cluster has room for.
        too_many = solver_config(
            server.url, ray_placement(cluster, workers=3, connect_timeout_s=20)
        )
        with pytest.raises(ConfigError, match=r"cannot hold 3 rollout workers .*CPU=1"):
            async with Runtime(too_many, tools=[Calculator()]):
                pass
        # A tool that cannot be shipped to a worker (it holds a lock).
        held = threading.Lock()

        @tool
        async def locked(x: int) -> int:
            """Count under a lock."""
            with held:
                return x

        with pytest.raises(ConfigError, match=r"cannot be shipped to a rollout worker"):
            async with Runtime(
                solver_config(server.url, ray_placement(cluster)), tools=[Calculator(), locked]
            ):
                pass
        sandbox = solver_config(
            server.url, ray_placement(cluster, worker={"resources": {"gpu_box": 1}})
        )
        with pytest.raises(ConfigError, match=r"gpu_box=1"):
            async with Runtime(sandbox, tools=[Calculator()]):
                pass
        async with Runtime(
            solver_config(server.url, ray_placement(cluster)), tools=[Calculator()]
        ) as rt:
            built = rt.runner("solver", EventEmitter(), BudgetLedger("built"), None)
            assert isinstance(built, Agent)
            with pytest.raises(ConfigError, match="rebuilds a run's agent on its workers"):
                await rt.run("hi", agent=built)
            assert server.stats()["requests"].get(CHAT, 0) == 0
            # An AgentConfig is shipped as such.
            inline = AgentConfig(name="inline", model="sim", instructions="Answer.")
            done = await rt.run("hi", agent=inline)
            assert done.status == "succeeded"


@tool
async def lookup(topic: str) -> str:
    """Look a topic up in the reference library."""
    return (
        f"Reference entry for {topic}: the alpha isotope weighs 17 kg, the beta "
        "isotope weighs 42 kg and the gamma isotope weighs 99 kg (library volume 3)."
    )


async def test_the_memory_bank_is_shared_by_rollouts_on_every_worker(cluster: Cluster) -> None:
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=50)
    async with SimServer(sim) as server:
        cfg = solver_config(server.url, ray_placement(cluster, affinity_slack=0), memory=True)
        cfg["agents"]["reader"] = {
            "name": "reader",
            "instructions": "Look the topic up.",
            "tools": ["lookup"],
            "model": "sim",
            "stop_on": [],
        }
        async with Runtime(cfg, tools=[Calculator(), lookup]) as rt:
            log = EventLog()
            result = await rt.run(
                "What does alpha weigh?",
                agent="reader",
                scaling=ScalingSpec(rollouts=6),
                events=log,
            )
            assert rt.bank is not None
            stored = await rt.bank.count()
            hits = await rt.bank.search("alpha isotope", [("run", result.run_id)], k=5)
            item = await rt.bank.get(hits[0].id, [("run", result.run_id)], count_hit=False)
            placed = [i.placed for i in workers(rt).workers]
    assert result.status == "succeeded", result.error
    assert placed == [3, 3], placed
    assert stored >= 1
    assert item is not None
    # Later steps of the other rollouts were shown the item in their prompt.
    shown = {
        e.rollout_id
        for e in log.of_type(StepRecorded)
        if any(NOTE_HEADER in str(m.content) for m in e.step.messages)
    }
    assert shown - {item.source_rollout}, (shown, item.source_rollout)


async def test_killing_a_worker_node_loses_and_repeats_no_committed_step(
    cluster: Cluster,
) -> None:
    # Three steps a rollout (two tool rounds: a third would trip the loop signal).
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=300, token_ms=1)
    sink = CommittedSteps(enough=20)
    log = sink.log
    async with solver_runtime(sim, ray_placement(cluster)) as (server, rt):
        placement = workers(rt)
        victim = placement.workers[0]
        result = await sink.run_and_kill(
            rt,
            "What is 20+22?",
            lambda: cluster.kill_node(victim.node_id),
            scaling=ScalingSpec(rollouts=24),
        )
        infos = placement.workers
        attempts: dict[str, int] = dict(server.engine.attempts)
        # A replacement for the lost worker waits for room: a new node.
        cluster.add_worker_node()
        await eventually(lambda: len(placement.workers) >= 3, within=240)
        again = await rt.run("What is 1+1?", scaling=ScalingSpec(rollouts=8))
        replaced = placement.workers[2]
    errors = [e.message for e in log.of_type(ErrorRaised)][:3] + [
        (f.status, f.stop_reason) for f in log.of_type(RolloutFinished)
    ][:4]
    assert result.status == "succeeded", (result.error, errors)
    assert result.answer is not None
    assert "42" in result.answer
    assert [i.alive for i in infos] == [False, True], infos
    # Every rollout finished, each with its 3 steps.
    finished = log.of_type(RolloutFinished)
    assert len(finished) == 24
    assert {f.status for f in finished} == {"finished"}
    steps = per_rollout(log.events)
    for events in steps.values():
        indexes = [e.step.index for e in events if isinstance(e, StepRecorded)]
        assert indexes == list(range(3)), indexes
    # The dead node's rollouts went on elsewhere, from their committed steps.
    restarted = log.of_type(RolloutRestarted)
    assert restarted
    assert all("lost" in r.error for r in restarted)
    assert any(r.resumed_steps > 0 for r in restarted)
    # No step committed before the kill was requested again, nor lost.
    sink.assert_none_repeated_or_lost(attempts)
    # The lost worker was replaced once the cluster had room, and it runs rollouts.
    assert again.status == "succeeded", again.error
    assert replaced.alive, replaced
    assert replaced.placed > 0, replaced


async def test_losing_every_worker_fails_the_run_and_keeps_what_was_committed(
    cluster: Cluster,
) -> None:
    sim = SimServerConfig(answer="answer", tool_rounds=2, ttft_ms=300, token_ms=1)
    sink = CommittedSteps(enough=10)
    log = sink.log
    async with solver_runtime(sim, ray_placement(cluster)) as (_, rt):
        placement = workers(rt)

        def kill_every_node() -> None:
            for info in placement.workers:
                if info.alive:
                    cluster.kill_node(info.node_id)

        result = await sink.run_and_kill(
            rt, "What is 2+2?", kill_every_node, scaling=ScalingSpec(rollouts=12)
        )
    assert result.status == "failed"
    errors = [e.message for e in log.of_type(ErrorRaised)]
    assert errors, result
    assert all("every rollout worker of the ray placement is lost" in m for m in errors), errors
    assert all("every rollout worker" in s.failure_modes[0] for s in result.summaries)
    # What was committed before is in the run's stream, each step once.
    seen = [(e.rollout_id, e.step.index) for e in log.of_type(StepRecorded)]
    assert len(seen) == len(set(seen)) >= 10
