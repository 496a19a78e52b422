"""Benchmark the bubblewrap sandbox the shell, editor and python tools run in.

    python bench/sandbox.py [--runs 60] [--idle 200] [--quick | --smoke]

Rows:

1. start-up: ``Sandbox.run(["true"])`` (setpriv when root, bwrap with every
   namespace, prlimit, the command), median and p95, against the same
   command started without a sandbox; the difference is the per-command
   overhead (target: < 50 ms).
2. the ``shell`` tool end to end (``echo``, in a rollout's workspace) and the
   ``python`` tool (``pass``): what one tool call costs.
3. throughput of short commands at 1..32 concurrent sandboxes: commands per
   second and p95 latency on this machine's cores.
4. idle capacity: N sandboxes open at once, each sleeping 2 s: whether all
   start and finish on time, and the memory they hold (RSS summed over
   their processes, per sandbox).

Exits 1 on a MISS, 2 without bubblewrap (nothing runs unsandboxed; 0 with
``AGENTRT_BENCH_SKIP_MISSING=1``).

``--smoke`` (what CI runs): 10 runs per row, 20 idle sandboxes (seconds),
then checks, exiting 1 when one fails: every command and tool call
succeeded (``true`` exits 0, the shell tool prints ``hi``, the python tool
prints 42 for ``print(6 * 7)``), every idle sandbox finished cleanly, the 20 two-second
sleeps took at most 5x one sleep (they ran side by side; serially they would
take 20x; the full run's bound is 2.5x), and they held some memory.  The
per-command overhead target (50 ms) is a wall-clock figure: reported, not
checked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import _smoke
import anyio
import psutil

from agentrt.tools import (
    PythonSandbox,
    PythonSandboxConfig,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    ShellTool,
    ToolContext,
    ToolOutput,
    Workspaces,
)

OVERHEAD_TARGET_MS = 50.0
SLEEP_S = 2.0
"""Each idle sandbox sleeps this long."""
IDLE_TARGET = 2.5
"""The idle sandboxes' wall time over one sleep, at most (full run)."""
SMOKE_SLACK = 2.0
"""``--smoke``: the idle bound loosened by this factor."""
QUICK_SIZES = (10, 20)
"""``--quick`` and ``--smoke``: runs per row, idle sandboxes."""
SKIP_MISSING = "AGENTRT_BENCH_SKIP_MISSING"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def _timed(runs: int, once: Callable[[], Awaitable[object]]) -> list[float]:
    await once()  # warm: the probe, page cache
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await once()
        samples.append(time.perf_counter() - started)
    return samples


async def _throughput(sandbox: Sandbox, concurrency: int, commands: int) -> tuple[float, float]:
    latencies: list[float] = []
    send, receive = anyio.create_memory_object_stream[int](commands)
    for i in range(commands):
        send.send_nowait(i)
    send.close()

    async def worker() -> None:
        async for _ in receive:
            started = time.perf_counter()
            result = await sandbox.run(["bash", "-c", "echo hi"])
            if not result.ok:
                raise RuntimeError(f"a sandboxed command failed: {result}")
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return commands / (time.perf_counter() - started), _p95(latencies)


async def _idle(sandbox: Sandbox, n: int) -> tuple[float, int, float]:
    """Wall time for ``n`` concurrent 2 s sleeps, how many finished cleanly,
    and the peak RSS of all their processes per sandbox (bytes)."""
    done = 0
    peak_rss = 0
    finished = anyio.Event()

    async def one() -> None:
        nonlocal done
        result = await sandbox.run(["sleep", f"{SLEEP_S:g}"])
        done += int(result.ok)

    async def sample() -> None:
        nonlocal peak_rss
        me = psutil.Process()
        while not finished.is_set():
            rss = 0
            for p in me.children(recursive=True):
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    continue
            peak_rss = max(peak_rss, rss)
            await anyio.sleep(0.2)

    started = time.perf_counter()
    async with anyio.create_task_group() as watchers:
        watchers.start_soon(sample)
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
        finished.set()
    return time.perf_counter() - started, done, peak_rss / max(1, n)


def _printed(call: str, output: ToolOutput, line: str) -> tuple[str, str, bool]:
    """A ``--smoke`` check: the tool call succeeded and printed ``line``."""
    printed = line in output.text.splitlines()
    shown = "error" if output.is_error else "printed" if printed else "other output"
    return (f"{call} prints {line}", shown, printed and not output.is_error)


def missing(what: str) -> int:
    """Exit code for a missing bubblewrap: 2, or 0 when the caller said it may
    be skipped (``AGENTRT_BENCH_SKIP_MISSING=1``)."""
    if os.environ.get(SKIP_MISSING) == "1":
        print(f"bench/sandbox.py: skipped ({SKIP_MISSING}=1): {what}")
        return 0
    print(f"bench/sandbox.py: {what}; set {SKIP_MISSING}=1 to skip", file=sys.stderr)
    return 2


async def main(runs: int, idle: int, smoke: bool = False) -> int:
    if shutil.which("bwrap") is None:
        return missing("bubblewrap (bwrap) is not installed; nothing runs unsandboxed")
    sandbox = Sandbox(SandboxConfig(timeout_s=30))
    try:
        await sandbox.check()
    except SandboxUnavailable as exc:
        return missing(str(exc))
    checks: list[tuple[str, str, bool]] = []  # --smoke: what ran must have worked
    probe = await sandbox.run(["true"])
    checks.append(("`true` in a sandbox exits 0", f"exit {probe.exit_code}", probe.ok))
    print(f"sandbox benchmark: {os.cpu_count()} cores, {runs} runs per row, uid {os.geteuid()}")

    bare = await _timed(runs, lambda: anyio.run_process(["true"]))
    boxed = await _timed(runs, lambda: sandbox.run(["true"]))
    overhead = statistics.median(boxed) - statistics.median(bare)
    verdict = "PASS" if overhead < OVERHEAD_TARGET_MS / 1000 else "MISS"
    print("\n1. start-up of one command (median / p95)")
    print(f"   without a sandbox     {_ms(statistics.median(bare))} / {_ms(_p95(bare))}")
    print(f"   in a sandbox          {_ms(statistics.median(boxed))} / {_ms(_p95(boxed))}")
    print(
        f"   overhead per command  {_ms(overhead)}   target < {OVERHEAD_TARGET_MS:g} ms: {verdict}"
    )

    root = Path(tempfile.mkdtemp(prefix="agentrt-bench-"))
    os.chmod(root, 0o755)
    try:
        async with Workspaces(root / "ws") as spaces:
            context = ToolContext(run_id="bench", rollout_id="bench-0")
            shell = ShellTool(spaces, SandboxConfig(timeout_s=30))
            python = PythonSandbox(PythonSandboxConfig(timeout_s=30), workspaces=spaces)
            shell_s = await _timed(runs, lambda: shell.call({"command": "echo hi"}, context))
            python_s = await _timed(runs, lambda: python.call({"code": "pass"}, context))
            said = await shell.call({"command": "echo hi"}, context)
            checks.append(_printed("shell tool `echo hi`", said, "hi"))
            ran = await python.call({"code": "print(6 * 7)"}, context)
            checks.append(_printed("python tool `print(6 * 7)`", ran, "42"))
        print("\n2. one tool call, end to end (median / p95)")
        print(f"   shell  `echo hi`      {_ms(statistics.median(shell_s))} / {_ms(_p95(shell_s))}")
        print(
            f"   python `pass`         {_ms(statistics.median(python_s))} / {_ms(_p95(python_s))}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print("\n3. short commands (`bash -c 'echo hi'`) at N concurrent sandboxes")
    print("   N     commands/s   p95 latency")
    for concurrency in (1, 2, 4, 8, 16, 32):
        rate, p95 = await _throughput(sandbox, concurrency, max(runs, concurrency * 4))
        print(f"   {concurrency:<5} {rate:10.0f}   {_ms(p95)}")

    wall, done, rss = await _idle(sandbox, idle)
    held = "PASS" if done == idle and wall < IDLE_TARGET * SLEEP_S else "MISS"
    print(f"\n4. {idle} sandboxes open at once, each sleeping {SLEEP_S:g} s")
    print(f"   finished cleanly {done}/{idle} in {wall:.2f} s: {held}")
    print(f"   memory per open sandbox (RSS of its processes): {rss / 1024 / 1024:.1f} MiB")
    if smoke:
        bound = IDLE_TARGET * SMOKE_SLACK
        checks += [
            (f"{idle} idle sandboxes finished cleanly", f"{done}/{idle}", done == idle),
            (f"their wall / one sleep <= {bound:g} (target {IDLE_TARGET:g})",
             f"{wall / SLEEP_S:.2f}", wall / SLEEP_S <= bound),
            ("memory per open sandbox > 0", f"{rss / 2**20:.1f} MiB", rss > 0),
        ]  # fmt: skip
        return smoke_verdict(checks)
    return 0 if verdict == "PASS" and held == "PASS" else 1


def smoke_verdict(checks: list[tuple[str, str, bool]]) -> int:
    print(
        f"\nsmoke checks (loose: the idle bound loosened {SMOKE_SLACK:g}x; the "
        f"{OVERHEAD_TARGET_MS:g} ms overhead is wall-clock, so reported, not checked)"
    )
    return _smoke.verdict(checks, 46, 12)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--idle", type=int, default=200)
    size = parser.add_mutually_exclusive_group()
    runs, idle = QUICK_SIZES
    size.add_argument("--quick", action="store_true", help=f"{runs} runs per row, {idle} idle")
    size.add_argument(
        "--smoke",
        action="store_true",
        help="CI's short form: the --quick sizes; exits 1 when a command or tool call fails, "
        f"an idle sandbox does not finish cleanly, or the idle sleeps take more than "
        f"{IDLE_TARGET * SMOKE_SLACK:g}x one sleep (loose: the full run's bound is "
        f"{IDLE_TARGET:g}x); the overhead target is reported, not checked",
    )
    args = parser.parse_args()
    runs, idle = QUICK_SIZES if args.quick or args.smoke else (args.runs, args.idle)
    sys.exit(anyio.run(main, runs, idle, args.smoke))
