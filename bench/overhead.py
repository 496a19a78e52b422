"""Runtime overhead per model call, against a floor: a hand-written raw-aiohttp loop.

R concurrent rollouts x S steps; each step is one chat-completions call to
the sim-server (its own process, every reply after ``--latency-ms``, a tool
call each step) and one local tool call (a tiny Python function).  Two
loops make exactly the same calls:

- ``floor``:   aiohttp + stdlib ``json``, dict messages, no timeouts, no
               retries, no validation: what one writes by hand;
- ``runtime``: agentrt's ``OpenAIBackend.complete()`` (httpx on the aiohttp
               transport, msgspec wire structs, retry policy, breaker,
               deadline) with agentrt's protocol messages.

Each loop runs in a fresh child process (uvloop), so that CPU time and peak
RSS are its own.  Printed per R: wall time and wall / ideal (ideal = S x
latency), CPU microseconds per model call (process CPU time over the
measured phase / calls; the part spent in the cyclic garbage collector in
parentheses), peak RSS, and the sim-server's CPU use during the phase (near
100% of a core would mean the server is the bottleneck).  With
``--repeat N`` the loops alternate N times; reported are the median wall
time, the minimum CPU time (the least disturbed run: on a shared machine
other processes inflate CPU time too) and the maximum RSS.
Targets at R = 1,000: wall <= 1.15x the floor's, CPU per call <= 1.5x the
floor's, runtime peak RSS <= 500 MB.

    python bench/overhead.py            # R = 100 and 1,000, S = 10
    python bench/overhead.py --quick    # R = 100 only
    python bench/overhead.py --repeat 3 # alternate 3 times per loop
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import psutil

SYSTEM = "You are a careful assistant. Use the lookup tool for every fact you need."
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
}
TARGET_WALL = 1.15
TARGET_CPU = 1.5
TARGET_RSS_MB = 500.0


def lookup(key: str) -> str:
    """The local tool both loops call."""
    return f"the value of {key} is {len(key) * 7}"


# --- the two loops (run inside a child process) --------------------------------------


async def floor_loop(url: str, rollouts: int, steps: int, warmup: int) -> int:
    import aiohttp

    endpoint = f"{url}/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "look up a fact",
                "parameters": TOOL_SCHEMA,
            },
        }
    ]
    errors = 0

    async def rollout(session: aiohttp.ClientSession, index: int, n_steps: int) -> None:
        nonlocal errors
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task {index}: find the value of key-{index}."},
        ]
        for _ in range(n_steps):
            payload = {
                "model": "sim",
                "messages": messages,
                "tools": tools,
                "max_tokens": 64,
                "temperature": 0.7,
            }
            async with session.post(endpoint, data=json.dumps(payload), headers=headers) as resp:
                body = await resp.read()
                if resp.status != 200:
                    errors += 1
                    return
            message = json.loads(body)["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
            )
            for call in calls:
                result = lookup(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})

    connector = aiohttp.TCPConnector(limit=max(rollouts, 100), limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await _run_phases(lambda i, n: rollout(session, i, n), rollouts, steps, warmup)
    return errors


async def runtime_loop(url: str, rollouts: int, steps: int, warmup: int) -> int:
    from agentrt.protocols import (
        ModelRequest,
        SamplingParams,
        SystemMessage,
        ToolMessage,
        ToolSpec,
        UserMessage,
    )
    from agentrt.runtime.errors import BackendError
    from agentrt.runtime.models.http import HttpClientConfig
    from agentrt.runtime.models.openai import OpenAIBackend, OpenAIBackendConfig

    config = OpenAIBackendConfig(
        name="sim",
        base_url=f"{url}/v1",
        models=["sim"],
        http=HttpClientConfig(max_connections=max(rollouts, 100)),
    )
    tools = [ToolSpec(name="lookup", description="look up a fact", parameters=TOOL_SCHEMA)]
    sampling = SamplingParams(max_tokens=64, temperature=0.7)
    errors = 0

    async def rollout(backend: OpenAIBackend, index: int, n_steps: int) -> None:
        nonlocal errors
        messages: list[Any] = [
            SystemMessage(SYSTEM),
            UserMessage(f"Task {index}: find the value of key-{index}."),
        ]
        for _ in range(n_steps):
            try:
                reply = await backend.complete(
                    ModelRequest(messages=messages, tools=tools, sampling=sampling)
                )
            except BackendError:
                errors += 1
                return
            message = reply.message
            messages.append(message)
            for call in message.tool_calls:
                result = lookup(**json.loads(call.function.arguments))
                messages.append(ToolMessage(result, tool_call_id=call.id))

    async with OpenAIBackend(config) as backend:
        await _run_phases(lambda i, n: rollout(backend, i, n), rollouts, steps, warmup)
    return errors


_MEASURED: dict[str, float] = {}


async def _run_phases(
    rollout: Callable[[int, int], Coroutine[Any, Any, None]], rollouts: int, steps: int, warmup: int
) -> None:
    """A short unmeasured warm-up (first-call costs, lazy imports), then the
    measured phase: ``rollouts`` concurrent rollouts of ``steps`` steps."""
    import anyio

    async with anyio.create_task_group() as tg:
        for i in range(warmup):
            tg.start_soon(rollout, -1 - i, 1)
    gc_clock = _GcClock()
    gc.callbacks.append(gc_clock)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(rollouts):
            tg.start_soon(rollout, i, steps)
    _MEASURED["wall"] = time.perf_counter() - wall0
    _MEASURED["cpu"] = time.process_time() - cpu0
    gc.callbacks.remove(gc_clock)
    _MEASURED["gc"] = gc_clock.cpu


class _GcClock:
    """CPU time spent in the cyclic garbage collector (via ``gc.callbacks``)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.cpu += time.process_time() - self._started


def child(mode: str, url: str, rollouts: int, steps: int) -> None:
    import anyio

    loop = {"floor": floor_loop, "runtime": runtime_loop}[mode]
    errors = anyio.run(
        loop,
        url,
        rollouts,
        steps,
        min(rollouts, 20),
        backend="asyncio",
        backend_options={"use_uvloop": True},
    )
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({**_MEASURED, "errors": errors, "peak_rss_mb": peak_kb / 1024}))


# --- the parent: sim-server, children, table ---------------------------------------------


def start_sim(latency_ms: float, steps: int) -> tuple[subprocess.Popen[str], str]:
    # Imported here: the measured children run this file too, and the floor's
    # must not carry agentrt in its memory.
    from agentrt.runtime.errors import BackendUnavailable
    from agentrt.testing import SimServerConfig, start_sim_server_process

    config = SimServerConfig(
        ttft_ms=latency_ms, token_ms=0, reply_tokens=8, tool_rounds=steps + 1, log_level="ERROR"
    )
    try:
        return start_sim_server_process(config)
    except BackendUnavailable as exc:
        raise SystemExit(str(exc)) from None


def run_child(
    mode: str, url: str, rollouts: int, steps: int, sim: psutil.Process
) -> dict[str, Any]:
    argv = [sys.executable, os.path.abspath(__file__), "--child", mode, "--url", url,
            "--rollouts", str(rollouts), "--steps", str(steps)]  # fmt: skip
    server_cpu0 = sum(sim.cpu_times()[:2])
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    # Server CPU over the whole child (its warm-up included): a slight
    # over-estimate of the server's load during the measured phase.
    server_cpu = sum(sim.cpu_times()[:2]) - server_cpu0
    result["server_cpu_pct"] = 100 * server_cpu / result["wall"]
    result["server_us_per_call"] = 1e6 * server_cpu / (rollouts * steps)
    return result


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one loop: the median wall time, the least disturbed
    (minimum) CPU time, the largest peak RSS, the errors of all."""
    by_wall = sorted(runs, key=lambda m: m["wall"])
    least_cpu = min(runs, key=lambda m: m["cpu"])
    return {
        **by_wall[len(runs) // 2],
        "cpu": least_cpu["cpu"],
        "gc": least_cpu["gc"],
        "peak_rss_mb": max(m["peak_rss_mb"] for m in runs),
        "errors": sum(m["errors"] for m in runs),
    }


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


Row = tuple[int, dict[str, Any], dict[str, Any]]


def report(rows: list[Row], steps: int, latency: float) -> None:
    ideal = steps * latency
    print(f"\nS = {steps} steps, latency {latency * 1000:.0f} ms, ideal wall {ideal:.2f} s, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print(f"{'R':>6} {'loop':>8} {'wall s':>8} {'wall/ideal':>10} {'CPU us/call':>12} "
          f"{'(GC us)':>8} {'peak RSS MB':>12} {'server CPU%':>12} {'server us/call':>15} "
          f"{'errors':>7}")  # fmt: skip
    for r, floor, rt in rows:
        for name, m in (("floor", floor), ("runtime", rt)):
            calls = r * steps
            print(f"{r:>6} {name:>8} {m['wall']:>8.2f} {m['wall'] / ideal:>10.2f} "
                  f"{1e6 * m['cpu'] / calls:>12.0f} {1e6 * m['gc'] / calls:>8.0f} "
                  f"{m['peak_rss_mb']:>12.1f} {m['server_cpu_pct']:>12.0f} "
                  f"{m['server_us_per_call']:>15.0f} {m['errors']:>7}")  # fmt: skip
    print()
    print(f"{'R':>6} {'runtime / floor':>28} {'value':>8} {'target':>8} {'result':>7}")
    for r, floor, rt in rows:
        wall_ratio = rt["wall"] / floor["wall"]
        cpu_ratio = rt["cpu"] / floor["cpu"]
        checks = [
            ("wall time", wall_ratio, f"<={TARGET_WALL}", wall_ratio <= TARGET_WALL),
            ("CPU per call", cpu_ratio, f"<={TARGET_CPU}", cpu_ratio <= TARGET_CPU),
            ("peak RSS (MB, runtime)", rt["peak_rss_mb"], f"<={TARGET_RSS_MB:.0f}",
             rt["peak_rss_mb"] <= TARGET_RSS_MB),
        ]  # fmt: skip
        note = "" if r >= 1000 else "  (targets apply at R=1000)"
        for label, value, target, ok in checks:
            print(f"{r:>6} {label:>28} {value:>8.2f} {target:>8} {verdict(ok):>7}{note}")
    for r, floor, rt in rows:
        # A client loop that is not CPU-bound waits on the server: then wall
        # time measures the server (or the machine), not the client.
        for name, m in (("floor", floor), ("runtime", rt)):
            client_busy = m["cpu"] / m["wall"]
            if m["server_cpu_pct"] >= 80 or (m["wall"] > 1.5 * ideal and client_busy < 0.8):
                print(f"note: R={r} {name}: the client was busy {100 * client_busy:.0f}% of the "
                      f"wall time and the sim-server used {m['server_cpu_pct']:.0f}% of a core "
                      f"({m['server_us_per_call']:.0f} us CPU per call): the wall time is set by "
                      "the server/machine, not by the client loop")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="R = 100 only")
    parser.add_argument("--rollouts", type=int, nargs="+", help="values of R (default 100 1000)")
    parser.add_argument("--steps", type=int, default=10, help="S, steps per rollout")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="sim-server latency")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per loop and R, alternating: median wall, minimum CPU, maximum RSS reported",
    )
    parser.add_argument("--child", choices=["floor", "runtime"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.rollouts[0], args.steps)
        return
    rollouts = args.rollouts or ([100] if args.quick else [100, 1000])
    proc, url = start_sim(args.latency_ms, args.steps)
    try:
        sim = psutil.Process(proc.pid)
        rows: list[Row] = []
        for r in rollouts:
            floors, runtimes = [], []
            for _ in range(args.repeat):
                floors.append(run_child("floor", url, r, args.steps, sim))
                runtimes.append(run_child("runtime", url, r, args.steps, sim))
                print(f"R={r}: floor {floors[-1]['wall']:.2f}s, "
                      f"runtime {runtimes[-1]['wall']:.2f}s", flush=True)  # fmt: skip
            rows.append((r, combine(floors), combine(runtimes)))
        report(rows, args.steps, args.latency_ms / 1000)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
