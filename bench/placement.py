"""Model calls per second with rollouts placed locally, in worker
processes of this host, and on Ray workers.

R rollouts x S steps (one ``Runtime.run`` of R rollouts, ``early_stop =
false``) against the sim-server (its own process; every reply after
``--latency-ms``): the first S - 1 replies call the local ``add`` tool, the
last answers.  Side by side, in one run: ``local`` (this process),
``procs-1`` and ``procs-2`` (``kind = "local"`` with 1 and 2 worker
processes), and the Ray placement with 1 and with 2 rollout workers
(``ray-1``, ``ray-2``: a one-node Ray cluster this process starts,
``address = "local"``; each worker reserves one CPU).  Per variant: wall
time, model calls per second, and CPU microseconds per model call over
this process and every process it started (Ray's included; the
sim-server's excluded), measured while the run runs, and that CPU split
by role: this process (the driver), the rollout workers (the placement's
worker processes), the rest (Ray's other processes; multiprocessing's
resource tracker).  Targets (issue 12): 2 workers >= 1.7 x the calls/s of
1 worker; Ray's CPU per call <= 1.5 x local's; (issue 31) the driver's CPU
per call <= 50 us with 2 workers, and the workers' <= 1.2 x local's.  On a
2-core machine the sim-server, the driver and the workers share the cores:
read the figures with that in mind.

Ray binds the machine's external address, so with a Ray variant the
benchmark re-executes itself inside a network namespace of its own (``unshare --net
--map-root-user``), where loopback is the only interface, and a PID
namespace, so that no other Ray on the machine is touched.

This process (the driver, and the local engine) runs on uvloop, as
agentrt's own entry points and the placement's worker processes do
(``--loop asyncio``: plain asyncio, as an application may run it; the
workers stay on uvloop).

``--driver-gc daemon`` sets this process's collector (the driver's, and
the local engine's) as ``agentrt serve`` sets the daemon's; the default
leaves Python's, as an embedding application has it.

``--smoke`` (what CI runs): R = 200 x S = 4 at 50 ms, after an unmeasured
warm-up run of 20 rollouts per variant (a worker's first run pays its lazy
imports), and exits 1 when a check fails: every variant succeeds, makes
exactly R x S model calls and takes at least S x latency; each Ray variant
has as many worker processes as asked, and they spend more CPU per call
than the driver (the split found the processes that made the calls); 2 workers reach
>= 0.5 x the calls/s of 1 (the 1.7 target needs more free cores than a
2-core machine has, so this only catches a second worker that stalls the
first); Ray's CPU per call <= 5 x local's (target 1.5: a small run spreads
Ray's CPU that grows with time, not calls, over few calls, and a loaded
machine measured 2-3.6 x here).  Without Ray or user namespaces it exits 2
(0 with ``AGENTRT_BENCH_SKIP_MISSING=1``).

    python bench/placement.py              # R = 4,000, S = 10, 200 ms
    python bench/placement.py --rollouts 400 --quick
    python bench/placement.py --smoke      # about 40 s: the checks CI runs
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Any

import _smoke
import anyio
import psutil

from agentrt import Runtime, RuntimeConfig
from agentrt.agents import AgentConfig
from agentrt.protocols import ScalingSpec
from agentrt.testing import SimServerConfig, start_sim_server_process
from agentrt.tools import tool

SPEEDUP_TARGET = 1.7  # 2 workers' calls/s over 1 worker's
CPU_TARGET = 1.5  # Ray's CPU per model call over local's
DRIVER_TARGET_US = 50.0  # the driver's CPU per model call with Ray workers (issue 31)
WORKER_TARGET = 1.2  # a rollout worker's CPU per model call over local's (issue 31)
SMOKE_SPEEDUP_BOUND = 0.5
"""``--smoke``: 2 workers' calls/s over 1 worker's, at least (see the docstring)."""
SMOKE_CPU_BOUND = 5.0
"""``--smoke``: Ray's CPU per model call over local's, at most (see the docstring)."""
SMOKE_SIZES: dict[str, Any] = {
    "rollouts": 200,
    "steps": 4,
    "latency_ms": 50.0,
    "warmup": 20,
    "deadline_s": 300.0,
}
SKIP_MISSING = "AGENTRT_BENCH_SKIP_MISSING"
DAEMON_NO_FULL_COLLECTION = 1 << 30
"""``--driver-gc daemon``: the third threshold, as the daemon's (its idle
collector runs the full collections)."""
PLACED = ("procs-1", "procs-2", "ray-1", "ray-2")
"""The variants whose rollouts run in worker processes."""


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _cpu(exclude: int, workers: set[int]) -> dict[int, tuple[str, str, float]]:
    """CPU seconds of this process and its descendants, by pid, with a
    role (``driver``, ``worker``: a rollout worker, one of ``workers``,
    ``ray``: the rest) and a name (``driver``, ``worker``, or the process's own)."""
    me = psutil.Process()
    out: dict[int, tuple[str, str, float]] = {}
    for proc in [me, *me.children(recursive=True)]:
        if proc.pid == exclude:
            continue
        try:
            times = proc.cpu_times()
            if proc.pid == me.pid:
                role = name = "driver"
            elif proc.pid in workers:
                role = name = "worker"
            else:
                role, name = "ray", proc.name()
        except psutil.Error:
            continue
        out[proc.pid] = (role, name, times.user + times.system)
    return out


async def measure(
    variant: str, url: str, rollouts: int, steps: int, sim_pid: int, *, warmup: int = 0
) -> dict[str, Any]:
    placement: dict[str, Any] = {"kind": "local"}
    if variant.startswith("procs"):
        workers = int(variant.split("-")[1])
        placement = {"kind": "local", "workers": workers, "connect_timeout_s": 120}
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
        if warmup:  # unmeasured: the workers' first run pays their lazy imports
            await rt.run("Add 2 and 2.", scaling=ScalingSpec(rollouts=warmup))
        pids = {w.pid for w in getattr(rt.placement, "workers", [])}
        before = _cpu(sim_pid, pids)
        started = time.perf_counter()
        result = await rt.run("Add 1 and 1.", scaling=ScalingSpec(rollouts=rollouts))
        wall = time.perf_counter() - started
        after = _cpu(sim_pid, pids)
    calls = result.cost.model_calls
    by_name: dict[str, float] = {}
    by_role = dict.fromkeys(("driver", "worker", "ray"), 0.0)
    for pid, (role, name, seconds) in after.items():
        spent = seconds - (before[pid][2] if pid in before else 0.0)
        by_name[name] = by_name.get(name, 0.0) + spent
        by_role[role] += spent
    cpu = sum(by_name.values())
    per_call = {role: round(seconds / max(calls, 1) * 1e6, 1) for role, seconds in by_role.items()}
    return {
        "variant": variant,
        "calls": calls,
        "wall_s": round(wall, 2),
        "calls_per_s": round(calls / wall, 1),
        "cpu_us_per_call": round(cpu / max(calls, 1) * 1e6, 1),
        "driver_us_per_call": per_call["driver"],
        "worker_us_per_call": per_call["worker"],
        "ray_us_per_call": per_call["ray"],
        "workers": sum(role == "worker" for role, _, _ in after.values()),
        "status": result.status,
        "error": result.error,
        "cpu_us_per_call_by_process": {
            name: round(seconds / max(calls, 1) * 1e6, 1)
            for name, seconds in sorted(by_name.items(), key=lambda kv: -kv[1])
            if seconds > 0
        },
    }


def missing(what: str) -> int:
    """Exit code for a missing prerequisite: 2, or 0 when the caller said
    missing ones may be skipped (``AGENTRT_BENCH_SKIP_MISSING=1``)."""
    if os.environ.get(SKIP_MISSING) == "1":
        print(f"bench/placement.py: skipped ({SKIP_MISSING}=1): {what}")
        return 0
    print(f"bench/placement.py: {what}; set {SKIP_MISSING}=1 to skip", file=sys.stderr)
    return 2


def prerequisites() -> str | None:
    """What is missing for a run, or None."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'agentrt[ray]')"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        [unshare, "--net", "--map-root-user", "true"], capture_output=True, check=False
    )
    if probe.returncode:
        return f"unshare cannot make a network namespace: {probe.stderr.decode().strip()}"
    return None


def in_namespaces(deadline_s: float) -> int:
    """Run this command again in namespaces of its own (see the module
    docstring) and return its exit code; 1 past ``deadline_s`` (0: none),
    when every process it started is killed."""
    unshare = shutil.which("unshare")
    assert unshare is not None
    # Ray's own temporary directory too: ``ray.init()`` without an address
    # joins the cluster a ``ray start`` last wrote to /tmp/ray (another
    # namespace's, on a machine that runs the cluster tests meanwhile).
    ray_tmp = tempfile.mkdtemp(prefix="agentrt-ray-")
    env = {
        **os.environ,
        "AGENTRT_BENCH_NETNS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": ray_tmp,
    }
    script = 'ip link set lo up && exec "$0" "$@"'
    # --kill-child: when unshare dies (killed at the deadline), so does the
    # namespace's first process, and with it every process in the namespace.
    namespaces = ["--net", "--map-root-user", "--kill-child", "--pid", "--mount-proc"]
    argv = [unshare, *namespaces, "bash", "-c", script, sys.executable, *sys.argv]
    try:
        return subprocess.run(argv, env=env, timeout=deadline_s or None, check=False).returncode
    except subprocess.TimeoutExpired:
        print(f"bench/placement.py: not done in {deadline_s:g} s (--deadline-s)", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def smoke_checks(rows: list[dict[str, Any]], rollouts: int, steps: int, ideal: float) -> int:
    """``--smoke``: the figures are sane and the ratios within the smoke bounds."""
    checks: list[tuple[str, str, bool]] = []
    for row in rows:
        name = row["variant"]
        checks += [
            (f"{name}: status", f"{row['status']} {row['error'] or ''}".strip(),
             row["status"] == "succeeded"),
            (f"{name}: model calls == R x S = {rollouts * steps}", str(row["calls"]),
             row["calls"] == rollouts * steps),
            (f"{name}: wall >= S x latency = {ideal:.2f} s", f"{row['wall_s']:.2f} s",
             row["wall_s"] >= 0.95 * ideal),
            (f"{name}: CPU per call > 0", f"{row['cpu_us_per_call']:.0f} us",
             row["cpu_us_per_call"] > 0),
        ]  # fmt: skip
        if name.startswith(("ray-", "procs-")):  # the split found the workers: they did the calls
            want = int(name.split("-")[1])
            checks.append((f"{name}: {want} worker processes, CPU per call > driver's",
                           f"{row['workers']}, {row['worker_us_per_call']:.0f} us",
                           row["workers"] == want
                           and row["worker_us_per_call"] > row["driver_us_per_call"]))  # fmt: skip
    by = {r["variant"]: r for r in rows}
    for kind in ("procs", "ray"):
        if f"{kind}-1" in by and f"{kind}-2" in by:
            speedup = by[f"{kind}-2"]["calls_per_s"] / by[f"{kind}-1"]["calls_per_s"]
            bound = SMOKE_SPEEDUP_BOUND
            checks.append((f"{kind}: 2 workers / 1 calls/s >= {bound:g} (target {SPEEDUP_TARGET})",
                           f"{speedup:.2f}", speedup >= bound))  # fmt: skip
    if "local" in by:
        for name in PLACED:
            if name in by:
                ratio = by[name]["cpu_us_per_call"] / by["local"]["cpu_us_per_call"]
                bound = SMOKE_CPU_BOUND
                checks.append((f"{name} CPU per call / local <= {bound:g} (target {CPU_TARGET})",
                               f"{ratio:.2f}", ratio <= bound))  # fmt: skip
    print("\nsmoke checks (loose bounds: a small run on few cores is noisy; the full run "
          "reports the real targets)")  # fmt: skip
    return _smoke.verdict(checks, 52, 18)


def split_lines(by: dict[str, dict[str, Any]]) -> None:
    """Issue 31's figures: the driver's CPU per call with workers, and the
    workers' beside the local engine's (all of local's is the driver's)."""
    local = by.get("local", {}).get("driver_us_per_call")
    for name in PLACED:
        if name not in by:
            continue
        row = by[name]
        driver, worker = row["driver_us_per_call"], row["worker_us_per_call"]
        line = f"{name}: driver {driver:g} us per call (target <= {DRIVER_TARGET_US:g})"
        if local:
            line += (
                f", workers {worker:g} us per call = {worker / local:.2f} x local's "
                f"(target <= {WORKER_TARGET})"
            )
        print(line)


def ratio_lines(by: dict[str, dict[str, Any]]) -> None:
    """The split, the speed-ups and the CPU ratios against the targets."""
    split_lines(by)
    for kind in ("procs", "ray"):
        if f"{kind}-1" in by and f"{kind}-2" in by:
            speedup = by[f"{kind}-2"]["calls_per_s"] / by[f"{kind}-1"]["calls_per_s"]
            print(f"{kind}: 2 workers / 1 worker calls/s: {speedup:.2f} "
                  f"(target >= {SPEEDUP_TARGET})")  # fmt: skip
    if "local" in by:
        for name in PLACED:
            if name in by:
                ratio = by[name]["cpu_us_per_call"] / by["local"]["cpu_us_per_call"]
                print(f"{name} CPU per call / local: {ratio:.2f} (target <= {CPU_TARGET})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--variants", default="local,procs-1,procs-2,ray-1,ray-2")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--quick", action="store_true", help="R = 400")
    parser.add_argument(
        "--warmup", type=int, default=0, help="rollouts of an unmeasured run first, per variant"
    )
    parser.add_argument(
        "--deadline-s", type=float, default=0.0, help="fail after this many seconds (0: never)"
    )
    parser.add_argument(
        "--driver-gc",
        choices=("default", "daemon"),
        default="default",
        help="daemon: this process's collector (the driver's, local's too) set as `agentrt "
        "serve` sets its own: the start-up heap frozen, thresholds 700/5, no automatic full "
        "collection (default: Python's, as an embedding application has it)",
    )
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="this process's event loop (the driver's, local's too); the worker processes "
        "run uvloop either way",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's short form: R = {SMOKE_SIZES['rollouts']}, S = {SMOKE_SIZES['steps']}, "
        f"{SMOKE_SIZES['latency_ms']:g} ms, a warm-up of {SMOKE_SIZES['warmup']}, a deadline of "
        f"{SMOKE_SIZES['deadline_s']:g} s; exits 1 when a variant fails or miscounts, 2 workers' "
        f"speed-up < {SMOKE_SPEEDUP_BOUND:g} (target {SPEEDUP_TARGET}) or Ray's CPU per call > "
        f"{SMOKE_CPU_BOUND:g} x local's (target {CPU_TARGET}); loose bounds: the module "
        "docstring says why",
    )
    if parser.parse_known_args()[0].smoke:
        parser.set_defaults(**SMOKE_SIZES)  # explicit options still win
    args = parser.parse_args()
    needs_ray = any(v.startswith("ray") for v in args.variants.split(","))
    if needs_ray and os.environ.get("AGENTRT_BENCH_NETNS") != "1":
        if (what := prerequisites()) is not None:
            raise SystemExit(missing(what))
        raise SystemExit(in_namespaces(args.deadline_s))
    rollouts = 400 if args.quick else args.rollouts
    if args.driver_gc == "daemon":  # as runtime/cli/_serve_command.py's _tune_process
        gc.collect()
        gc.freeze()
        gc.set_threshold(700, 5, DAEMON_NO_FULL_COLLECTION)
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
            one = partial(measure, variant, url, rollouts, args.steps, proc.pid, warmup=args.warmup)
            row = anyio.run(
                one, backend="asyncio", backend_options={"use_uvloop": args.loop == "uvloop"}
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    ideal = args.steps * args.latency_ms / 1000
    print(f"\nR = {rollouts} x {args.steps} steps, {args.latency_ms:g} ms per reply "
          f"(ideal wall {ideal:.1f} s)")  # fmt: skip
    print(f"{'variant':<8} {'calls':>7} {'wall s':>8} {'calls/s':>9} {'CPU us/call':>12}"
          f"  {'driver':>8} {'workers':>8} {'rest':>8}")  # fmt: skip
    for row in rows:
        print(f"{row['variant']:<8} {row['calls']:>7} {row['wall_s']:>8} "
              f"{row['calls_per_s']:>9} {row['cpu_us_per_call']:>12}  "
              f"{row['driver_us_per_call']:>8} {row['worker_us_per_call']:>8} "
              f"{row['ray_us_per_call']:>8}")  # fmt: skip
    print("CPU us/call: every process but the sim-server's; then split: this process (the "
          "driver), the rollout workers, the rest (Ray's raylet, GCS, idle workers; "
          "multiprocessing's resource tracker)")  # fmt: skip
    ratio_lines({r["variant"]: r for r in rows})
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    if args.smoke:
        raise SystemExit(smoke_checks(rows, rollouts, args.steps, ideal))


if __name__ == "__main__":
    main()
