"""Model calls per second with rollouts placed locally and on Ray workers.

R rollouts x S steps (one ``Runtime.run`` of R rollouts, ``early_stop =
false``) against the sim-server (its own process; every reply after
``--latency-ms``): the first S - 1 replies call the local ``add`` tool, the
last answers.  Side by side, in one run: ``local`` (this process), and the
Ray placement with 1 and with 2 rollout workers (a one-node Ray cluster
this process starts, ``address = "local"``; each worker reserves one CPU).
Per variant: wall time, model calls per second, and CPU microseconds per
model call over this process and every process it started (Ray's included;
the sim-server's excluded), measured while the run runs.  Targets (issue
12): 2 workers >= 1.7 x the calls/s of 1 worker; Ray's CPU per call <=
1.5 x local's.  On a 2-core machine the sim-server, the driver and the
workers share the cores: read the figures with that in mind.

Ray binds the machine's external address, so the benchmark re-executes
itself inside a network namespace of its own (``unshare --net
--map-root-user``), where loopback is the only interface, and a PID
namespace, so that no other Ray on the machine is touched.

    python bench/placement.py              # R = 4,000, S = 10, 200 ms
    python bench/placement.py --rollouts 400 --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import anyio
import psutil

from agentrt import Runtime, RuntimeConfig
from agentrt.agents import AgentConfig
from agentrt.protocols import ScalingSpec
from agentrt.testing import SimServerConfig, start_sim_server_process
from agentrt.tools import tool


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _cpu(exclude: int) -> dict[int, tuple[str, float]]:
    """CPU seconds of this process and its descendants, by pid (with a name:
    ``driver``, or the process's own)."""
    me = psutil.Process()
    out: dict[int, tuple[str, float]] = {}
    for proc in [me, *me.children(recursive=True)]:
        if proc.pid == exclude:
            continue
        try:
            times = proc.cpu_times()
            name = "driver" if proc.pid == me.pid else proc.name()
        except psutil.Error:
            continue
        out[proc.pid] = (name, times.user + times.system)
    return out


async def measure(
    variant: str, url: str, rollouts: int, steps: int, sim_pid: int
) -> dict[str, Any]:
    placement: dict[str, Any] = {"kind": "local"}
    if variant.startswith("ray"):
        workers = int(variant.split("-")[1])
        placement = {
            "kind": "ray",
            "address": "local",
            "workers": workers,
            "worker": {"num_cpus": 1},
            "connect_timeout_s": 120,
        }
    config = RuntimeConfig.model_validate(
        {
            "models": {
                "backends": {"sim": {"kind": "openai", "base_url": f"{url}/v1", "models": ["sim"]}}
            },
            "agents": {"bench": AgentConfig(name="bench", tools=["add"], stop_on=[])},
            "default_agent": "bench",
            "early_stop": False,
            "placement": placement,
        }
    )
    async with Runtime(config, tools=[add]) as rt:
        before = _cpu(sim_pid)
        started = time.perf_counter()
        result = await rt.run("Add 1 and 1.", scaling=ScalingSpec(rollouts=rollouts))
        wall = time.perf_counter() - started
        after = _cpu(sim_pid)
    calls = result.cost.model_calls
    by_name: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        spent = seconds - before.get(pid, (name, 0.0))[1]
        by_name[name] = by_name.get(name, 0.0) + spent
    cpu = sum(by_name.values())
    return {
        "variant": variant,
        "calls": calls,
        "wall_s": round(wall, 2),
        "calls_per_s": round(calls / wall, 1),
        "cpu_us_per_call": round(cpu / max(calls, 1) * 1e6, 1),
        "status": result.status,
        "error": result.error,
        "cpu_us_per_call_by_process": {
            name: round(seconds / max(calls, 1) * 1e6, 1)
            for name, seconds in sorted(by_name.items(), key=lambda kv: -kv[1])
            if seconds > 0
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--variants", default="local,ray-1,ray-2")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--quick", action="store_true", help="R = 400")
    args = parser.parse_args()
    if os.environ.get("AGENTRT_BENCH_NETNS") != "1":
        unshare = shutil.which("unshare")
        if unshare is None:
            raise SystemExit("bench/placement.py needs unshare (util-linux)")
        script = 'ip link set lo up && exec "$0" "$@"'
        env = {
            **os.environ,
            "AGENTRT_BENCH_NETNS": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",
        }
        namespaces = ["--net", "--map-root-user", "--fork", "--pid", "--mount-proc"]
        argv = [unshare, *namespaces, "bash", "-c", script, sys.executable]
        raise SystemExit(subprocess.call([*argv, *sys.argv], env=env))
    rollouts = 400 if args.quick else args.rollouts
    sim = SimServerConfig(
        ttft_ms=args.latency_ms,
        token_ms=0,
        reply_tokens=8,
        tool_rounds=args.steps - 1,
        log_level="ERROR",
    )
    proc, url = start_sim_server_process(sim)
    rows = []
    try:
        for variant in args.variants.split(","):
            row = anyio.run(
                measure, variant, url, rollouts, args.steps, proc.pid, backend="asyncio"
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    ideal = args.steps * args.latency_ms / 1000
    print(f"\nR = {rollouts} x {args.steps} steps, {args.latency_ms:g} ms per reply "
          f"(ideal wall {ideal:.1f} s)")  # fmt: skip
    print(f"{'variant':<8} {'calls':>7} {'wall s':>8} {'calls/s':>9} {'CPU us/call':>12}")
    for row in rows:
        print(f"{row['variant']:<8} {row['calls']:>7} {row['wall_s']:>8} "
              f"{row['calls_per_s']:>9} {row['cpu_us_per_call']:>12}")  # fmt: skip
    by = {r["variant"]: r for r in rows}
    if "ray-1" in by and "ray-2" in by:
        speedup = by["ray-2"]["calls_per_s"] / by["ray-1"]["calls_per_s"]
        print(f"2 workers / 1 worker calls/s: {speedup:.2f} (target >= 1.7)")
    if "local" in by:
        for name in ("ray-1", "ray-2"):
            if name in by:
                ratio = by[name]["cpu_us_per_call"] / by["local"]["cpu_us_per_call"]
                print(f"{name} CPU per call / local: {ratio:.2f} (target <= 1.5)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
