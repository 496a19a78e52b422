"""The full agent loop's cost per model call, beside a hand-written loop (the floor).

R tasks x S steps against the sim-server (its own process, pinned to one
core; every reply after ``--latency-ms``).  A rollout makes S model calls:
the first S - 1 replies call the local ``add`` tool, the last answers in
text.  Each measurement runs in a fresh child process (uvloop; pinned to the
other core), so its CPU time, garbage collections and peak RSS are its own:

- ``floor``:    aiohttp + stdlib ``json``, dict messages, no timeouts, no
                validation, the same requests (agentrt's default connection
                pool of 1,024 on its connector): what one writes by hand;
- ``runs``:     R concurrent ``Runtime.run(task)`` calls, one rollout each,
                through the public API with a stock ``RuntimeConfig``;
- ``rollouts``: one ``Runtime.run(task, scaling=ScalingSpec(rollouts=R))``
                (``early_stop = false``, so every rollout makes its S calls);
- ``backend``:  a bare loop around ``OpenAIBackend.complete()`` (the second
                table: the model client alone);
- ``agent``:    (``--variants``, a diagnostic) ``Agent.run`` without the
                engine: the loop's share apart from the engine's.

The agent is ``AgentConfig(name="bench", tools=["add"], stop_on=[])``: the
sim-server calls ``add(a=1, b=1)`` at every step, and the default ``loop``
stop signal would end every rollout at its third step (the signals are still
computed and emitted).  ``add`` is an ``async def``; a plain ``def`` runs in
a worker thread.  Children run the collector with Python's default
thresholds: a library must not tune them, so the figures are what an
embedding application gets.

Per variant: wall time over ideal (S x latency) and over the floor's, client
CPU microseconds per model call and its ratio to the floor's, the cyclic
collector's share of that CPU, its longest pause and the objects it freed
per model call (garbage in reference cycles), peak RSS, the model
calls the sim-server counted (asserted to be R x S), and how busy client and
server were (CPU over wall time: a server near 100% sets the wall time).
Repetitions alternate the variants (floor, runs, rollouts, backend, floor,
...); reported are medians (5 repetitions below R = 3,000, 3 at 3,000 by
default: ~12 minutes on 2 cores).  Then the time of ``import agentrt``,
``agentrt --help`` and ``from agentrt import Runtime`` (median of 5 fresh
interpreters).

``--smoke`` (what CI runs): R = 50, one repetition of each variant (about
half a minute), start-up times of 3 interpreters, and checks with loose
bounds, exiting 1 when one fails: for ``runs`` and ``rollouts``, the R =
1,000 targets loosened 2x (wall / floor <= 2.4, CPU per call / floor <= 3.0,
peak RSS / floor <= 4.0); for every variant, wall >= S x latency (the
sim-server's replies cannot come sooner) and CPU > 0.  Every sample already
fails unless the sim-server counted R x S calls and every rollout answered.
The start-up targets are wall-clock figures: reported, not checked.

    python bench/overhead.py                      # R = 100, 1,000, 3,000
    python bench/overhead.py --repeat-large 1     # 1 repetition at R = 3,000 (quicker)
    python bench/overhead.py --quick              # R = 100 only
    python bench/overhead.py --smoke              # R = 50, 1 repetition, checks (CI)
    python bench/overhead.py --rollouts 1000 --variants runs agent
    python bench/overhead.py --counts --variants runs rollouts backend   # no clock (R = 200)
    BENCH_PSTATS=/tmp/runs.prof python bench/overhead.py --counts --variants runs
                                                  # ... and the counts' profile, per function
    python bench/overhead.py --child runs --rollouts 1000 --url URL   # one sample (profiling)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Coroutine
from typing import Any

import _smoke

SYSTEM = "You are a helpful assistant. Use the tools when they help."
"""The floor's system prompt: ``AgentConfig``'s default instructions."""
ADD_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "type": "object",
}
"""What ``FunctionTool`` makes of ``add``'s signature (the floor sends it as is)."""
MAX_TOKENS = 1024  # AgentLimits.max_tokens_per_step's default
TEMPERATURE = 0.7  # AgentConfig.temperature's default
POOL = 1024  # HttpClientConfig.max_connections's default
VARIANTS = ("floor", "runs", "rollouts", "backend", "agent")
DEFAULT_VARIANTS = ("floor", "runs", "rollouts", "backend")
AGENT_LOOP = ("runs", "rollouts")

#: (R from which a target applies, wall / floor, CPU per call / floor, peak RSS / floor)
TARGETS = ((1000, 1.2, 1.5, 2.0), (3000, 1.3, 1.6, 2.0))
IMPORT_TARGETS = {"import agentrt": 0.3, "agentrt --help": 0.5}
SMOKE_SLACK = 2.0
"""``--smoke``: the R = 1,000 targets loosened by this factor (small R is noisy)."""
SMOKE_SIZES: dict[str, Any] = {"rollouts": [50], "repeat": 1, "repeat_large": 1}


def task_text(index: int) -> str:
    return f"Task {index}: add the numbers you are given and report the sum."


async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


# --- the measured loops (each in a child process) -----------------------------------


async def floor_loop(url: str, rollouts: int, steps: int) -> dict[str, Any]:
    import aiohttp

    endpoint = f"{url}/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    tools = [
        {
            "type": "function",
            "function": {"name": "add", "description": add.__doc__, "parameters": ADD_SCHEMA},
        }
    ]

    async def rollout(session: aiohttp.ClientSession, index: int, n_steps: int) -> bool:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task_text(index)},
        ]
        for _ in range(n_steps):
            payload = {
                "model": "sim",
                "messages": messages,
                "tools": tools,
                "max_tokens": MAX_TOKENS,
                "temperature": TEMPERATURE,
            }
            async with session.post(endpoint, data=json.dumps(payload), headers=headers) as resp:
                body = await resp.read()
                if resp.status != 200:
                    return False
            message = json.loads(body)["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if not calls:
                return bool(message.get("content"))
            messages.append({"role": "assistant", "content": message.get("content"),
                             "tool_calls": calls})  # fmt: skip
            for call in calls:
                result = await add(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "name": "add",
                                 "content": str(result)})  # fmt: skip
        return False

    connector = aiohttp.TCPConnector(limit=POOL, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        return await _measure(
            url, lambda i, n: rollout(session, i, n if n > 0 else steps), rollouts, steps
        )


async def backend_loop(url: str, rollouts: int, steps: int) -> dict[str, Any]:
    from agentrt.protocols import (
        ModelRequest,
        SamplingParams,
        SystemMessage,
        ToolMessage,
        ToolSpec,
        UserMessage,
    )
    from agentrt.runtime.kernel._errors import BackendError
    from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig

    config = OpenAIBackendConfig(name="sim", base_url=f"{url}/v1", models=["sim"])
    tools = [ToolSpec(name="add", description=add.__doc__ or "", parameters=ADD_SCHEMA)]
    sampling = SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE)

    async def rollout(backend: OpenAIBackend, index: int, n_steps: int) -> bool:
        messages: list[Any] = [SystemMessage(SYSTEM), UserMessage(task_text(index))]
        for _ in range(n_steps):
            try:
                reply = await backend.complete(
                    ModelRequest(messages=messages, tools=tools, sampling=sampling)
                )
            except BackendError:
                return False
            message = reply.message
            if not message.tool_calls:
                return bool(message.content)
            messages.append(message)
            for call in message.tool_calls:
                result = await add(**json.loads(call.function.arguments))
                messages.append(ToolMessage(str(result), tool_call_id=call.id, name="add"))
        return False

    async with OpenAIBackend(config) as backend:
        return await _measure(
            url, lambda i, n: rollout(backend, i, n if n > 0 else steps), rollouts, steps
        )


async def agent_loop(variant: str, url: str, rollouts: int, steps: int) -> dict[str, Any]:
    import agentrt
    from agentrt.agents import AgentConfig, AgentLimits
    from agentrt.protocols import ScalingSpec
    from agentrt.tools import tool

    bench_agent = AgentConfig(name="bench", tools=["add"], stop_on=[])
    config = agentrt.RuntimeConfig.model_validate(
        {
            "models": {
                "backends": {"sim": {"kind": "openai", "base_url": f"{url}/v1", "models": ["sim"]}}
            },
            "agents": {"bench": bench_agent},
            "default_agent": "bench",
            "early_stop": variant != "rollouts",
        }
    )
    # The warm-up's rollouts stop after two calls (their runs fail: no answer).
    warm = AgentConfig(name="warm", tools=["add"], stop_on=[], limits=AgentLimits(max_steps=2))

    async with agentrt.Runtime(config, tools=[tool(add)]) as rt:

        async def one_run(index: int, n_steps: int) -> bool:
            if n_steps > 0:
                await rt.run(task_text(index), agent=warm)
                return False
            result = await rt.run(task_text(index))
            return result.status == "succeeded"

        if variant == "runs":
            return await _measure(url, one_run, rollouts, steps)

        if variant == "agent":  # the agent loop without the engine (a diagnostic)
            from agentrt.agents import Agent

            loop_agent = Agent(bench_agent, backends=rt.backends, tools=rt.tools)

            async def one_rollout(index: int, n_steps: int) -> bool:
                if n_steps > 0:
                    await rt.run(task_text(index), agent=warm)
                    return False
                result = await loop_agent.run(task_text(index))
                return result.status == "finished"

            return await _measure(url, one_rollout, rollouts, steps)

        async def one_big_run(index: int, n_steps: int) -> int:
            if n_steps > 0:
                await rt.run(task_text(index), agent=warm)
                return 0
            scaling = ScalingSpec(rollouts=rollouts, aggregate="majority")
            result = await rt.run(task_text(0), scaling=scaling)
            if result.status != "succeeded":
                raise SystemExit(f"the run of {rollouts} rollouts failed: {result.error}")
            return sum(1 for s in result.summaries if s.answer)

        return await _measure(url, one_big_run, 1, steps)


class _GcClock:
    """The cyclic collector's CPU time, pause per collection, count per
    generation and the objects it freed (``gc.callbacks``): garbage in
    reference cycles, which reference counting never frees."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.freed = 0
        self.longest = 0.0
        self.longest_generation = -1
        self.collections = [0, 0, 0]
        self.by_generation = [0.0, 0.0, 0.0]
        self._cpu0 = self._wall0 = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
            return
        pause = time.perf_counter() - self._wall0
        spent = time.process_time() - self._cpu0
        self.cpu += spent
        self.freed += int(info["collected"])
        generation = int(info["generation"])
        self.collections[generation] += 1
        self.by_generation[generation] += spent
        if pause > self.longest:
            self.longest, self.longest_generation = pause, generation


def _server_cpu(pid: int | None) -> float:
    """The sim-server's CPU seconds so far (``/proc``; 0 where there is none)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _chat_calls(url: str) -> int:
    with urllib.request.urlopen(f"{url}/sim/stats", timeout=10) as response:
        stats = json.load(response)
    return int(stats["requests"].get("/v1/chat/completions", 0))


async def _measure(
    url: str,
    rollout: Callable[[int, int], Coroutine[Any, Any, bool | int]],
    tasks: int,
    steps: int,
) -> dict[str, Any]:
    """An unmeasured warm-up (20 two-step rollouts: first-call costs, lazy
    imports), then the measured phase: ``tasks`` concurrent calls of
    ``rollout``.  Returns what was measured."""
    import anyio

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(rollout, -1 - i, 2)
    if _COUNTS:
        return await _count(url, rollout, tasks, steps)
    answered = 0

    async def one(index: int) -> None:
        nonlocal answered
        ok = int(await rollout(index, 0))  # awaited before ``answered`` is read
        answered += ok

    calls0 = _chat_calls(url)  # blocking, but outside the measured phase
    clock = _GcClock()
    gc.callbacks.append(clock)
    server0 = _server_cpu(_SERVER.get("pid"))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(tasks):
            tg.start_soon(one, i)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    server = _server_cpu(_SERVER.get("pid")) - server0
    gc.callbacks.remove(clock)
    return {
        "wall": wall,
        "cpu": cpu,
        "gc_cpu": clock.cpu,
        "gc_longest": clock.longest,
        "gc_longest_generation": clock.longest_generation,
        "gc_collections": clock.collections,
        "gc_cpu_by_generation": clock.by_generation,
        "gc_freed": clock.freed,
        "answered": answered,
        "server_calls": _chat_calls(url) - calls0,
        "server_busy": server / wall,
    }


async def _count(
    url: str,
    rollout: Callable[[int, int], Coroutine[Any, Any, bool | int]],
    tasks: int,
    steps: int,
) -> dict[str, Any]:
    """The measured phase without the clock (``--counts``): Python function
    calls per model call (cProfile, C functions included) and the objects the
    collector tracks that each running rollout keeps alive, counted halfway
    through the first model call (the phase's peak of waiting rollouts) after
    a collection, over the count before the phase."""
    import cProfile
    import pstats

    import anyio

    answered = 0
    live: list[int] = []

    async def one(index: int) -> None:
        nonlocal answered
        ok = int(await rollout(index, 0))  # awaited before ``answered`` is read
        answered += ok

    async def sample() -> None:
        await anyio.sleep(_LATENCY_S / 2)
        gc.collect()
        live.append(len(gc.get_objects()))

    calls0 = _chat_calls(url)
    gc.collect()
    before = len(gc.get_objects())
    profile = cProfile.Profile()
    async with anyio.create_task_group() as tg:
        profile.enable()
        for i in range(tasks):
            tg.start_soon(one, i)
        tg.start_soon(sample)
    profile.disable()
    if os.environ.get("BENCH_PSTATS"):  # a diagnostic: the counts' profile, per function
        profile.dump_stats(os.environ["BENCH_PSTATS"])
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(entry[1] for entry in stats.values())
    server_calls = _chat_calls(url) - calls0
    rollouts = tasks if tasks > 1 else server_calls // steps
    return {
        "calls_per_model_call": calls / server_calls,
        "live_per_rollout": (live[0] - before) / rollouts,
        "answered": answered,
        "server_calls": server_calls,
    }


_COUNTS = False
"""``--counts``: ``_measure`` counts calls and live objects instead of timing."""
_LATENCY_S = 0.2
"""The sim-server's latency (``--latency-ms``), for ``_count``'s sample."""
_SERVER: dict[str, int] = {}
"""The sim-server's process id, when the parent gave it (``pid``)."""


def child(
    variant: str,
    url: str,
    rollouts: int,
    steps: int,
    *,
    cpu: int | None,
    server: int | None,
    counts: bool = False,
    latency_s: float = 0.2,
) -> None:
    import anyio

    global _COUNTS, _LATENCY_S
    _COUNTS, _LATENCY_S = counts, latency_s
    if server is not None:
        _SERVER["pid"] = server
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if os.environ.get("BENCH_NO_GC"):  # profiling the work itself, not the collector
        gc.disable()

    async def main() -> dict[str, Any]:
        if variant == "floor":
            return await floor_loop(url, rollouts, steps)
        if variant == "backend":
            return await backend_loop(url, rollouts, steps)
        return await agent_loop(variant, url, rollouts, steps)

    measured = anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({**measured, "peak_rss_mb": peak_kb / 1024}))


# --- the parent: sim-server, children, tables ----------------------------------------


def start_sim(latency_ms: float, steps: int, cpu: int | None) -> tuple[subprocess.Popen[str], str]:
    # Imported here: the floor's children run this file too and must not
    # carry agentrt in their memory.
    from agentrt.runtime.kernel._errors import BackendUnavailable
    from agentrt.testing import SimServerConfig, start_sim_server_process

    config = SimServerConfig(
        ttft_ms=latency_ms, token_ms=0, reply_tokens=8, tool_rounds=steps - 1, log_level="ERROR"
    )
    try:
        proc, url = start_sim_server_process(config)
    except BackendUnavailable as exc:
        raise SystemExit(str(exc)) from None
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    return proc, url


def run_child(
    variant: str,
    url: str,
    rollouts: int,
    steps: int,
    *,
    cpu: int | None,
    server: int,
    counts: bool = False,
    latency_ms: float = 200.0,
) -> dict[str, Any]:
    argv = [sys.executable, os.path.abspath(__file__), "--child", variant, "--url", url,
            "--rollouts", str(rollouts), "--steps", str(steps),
            "--server-pid", str(server), "--latency-ms", str(latency_ms)]  # fmt: skip
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    if counts:
        argv.append("--counts")
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{variant} child (R={rollouts}) failed:\n{out.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    expected = rollouts * steps
    if result["server_calls"] != expected:
        raise SystemExit(
            f"{variant} (R={rollouts}): the sim-server counted {result['server_calls']} model "
            f"calls, not R x S = {expected}"
        )
    if result["answered"] != rollouts:
        raise SystemExit(f"{variant} (R={rollouts}): {result['answered']} of {rollouts} answered")
    return result


def median_of(samples: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("wall", "cpu", "gc_cpu", "gc_longest", "gc_freed", "peak_rss_mb", "server_calls",
            "server_busy")  # fmt: skip
    out = {k: statistics.median(float(s[k]) for s in samples) for k in keys}
    out["gc_share"] = statistics.median(s["gc_cpu"] / s["cpu"] for s in samples)
    out["n"] = len(samples)
    return out


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


Table = dict[int, dict[str, dict[str, float]]]


def report(table: Table, steps: int, latency: float) -> None:
    ideal = steps * latency
    print(f"\nS = {steps} steps, latency {latency * 1000:.0f} ms, ideal wall {ideal:.2f} s, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          "medians of n interleaved repetitions\n")  # fmt: skip
    head = (f"{'R':>6} {'loop':>9} {'n':>2} {'wall s':>7} {'/ideal':>7} {'/floor':>7} "
            f"{'CPU us/call':>11} {'/floor':>7} {'GC %CPU':>8} {'GC pause ms':>11} "
            f"{'cycles/call':>11} "
            f"{'RSS MB':>7} {'/floor':>7} {'server calls':>12} {'client %':>8} "
            f"{'server %':>8}")  # fmt: skip

    def rows(variants: tuple[str, ...]) -> None:
        print(head)
        for r, by in table.items():
            floor = by["floor"]
            for name in ("floor", *variants):
                if name not in by:
                    continue
                m = by[name]
                print(f"{r:>6} {name:>9} {m['n']:>2.0f} {m['wall']:>7.2f} "
                      f"{m['wall'] / ideal:>7.2f} {m['wall'] / floor['wall']:>7.2f} "
                      f"{1e6 * m['cpu'] / (r * steps):>11.0f} {m['cpu'] / floor['cpu']:>7.2f} "
                      f"{100 * m['gc_share']:>8.1f} {1000 * m['gc_longest']:>11.1f} "
                      f"{m['gc_freed'] / (r * steps):>11.1f} "
                      f"{m['peak_rss_mb']:>7.1f} {m['peak_rss_mb'] / floor['peak_rss_mb']:>7.2f} "
                      f"{m['server_calls']:>12,.0f} {100 * m['cpu'] / m['wall']:>8.0f} "
                      f"{100 * m['server_busy']:>8.0f}")  # fmt: skip

    print("The full agent loop (Runtime.run; agent: Agent.run alone) beside the floor:")
    rows((*AGENT_LOOP, "agent"))
    print()
    checks: list[tuple[int, str, str, float, float]] = []
    for r, by in table.items():
        for start, wall, cpu, rss in TARGETS:
            if r != start:
                continue
            floor = by["floor"]
            for name in AGENT_LOOP:
                if name in by:
                    m = by[name]
                    checks += [
                        (r, name, "wall / floor", m["wall"] / floor["wall"], wall),
                        (r, name, "CPU per call / floor", m["cpu"] / floor["cpu"], cpu),
                        (r, name, "peak RSS / floor", m["peak_rss_mb"] / floor["peak_rss_mb"], rss),
                    ]  # fmt: skip
    if checks:
        print(f"{'R':>6} {'loop':>9} {'ratio':>22} {'value':>7} {'target':>7} {'result':>7}")
        for r, name, label, value, target in checks:
            print(f"{r:>6} {name:>9} {label:>22} {value:>7.2f} {'<=' + str(target):>7} "
                  f"{verdict(value <= target):>7}")  # fmt: skip
        print()
    if any("backend" in by for by in table.values()):
        print("The model client alone (OpenAIBackend.complete in a bare loop) beside the floor:")
        rows(("backend",))
        print()
    print("cycles/call: objects the collector freed per model call (garbage in reference")
    print("cycles, which only a collection frees; counted by gc.callbacks)")
    print("client %, server %: CPU time over wall time of the measured phase (a loop")
    print("whose client is well under 100% waits on the server or the machine: a server")
    print("near 100% sets that loop's wall time, not the client)\n")


def smoke_checks(table: Table, steps: int, latency: float) -> int:
    """``--smoke``: the figures are sane and the agent loop within the R = 1,000
    targets loosened by ``SMOKE_SLACK``, at whatever R ran."""
    _, wall_t, cpu_t, rss_t = TARGETS[0]
    ideal = steps * latency
    checks: list[tuple[str, float, str, bool]] = []
    for r, by in table.items():
        floor = by["floor"]
        for name, m in by.items():
            checks += [
                (f"R={r} {name}: wall >= S x latency", m["wall"], f">= {ideal:.2f} s",
                 m["wall"] >= 0.95 * ideal),
                (f"R={r} {name}: CPU s > 0", m["cpu"], "> 0", m["cpu"] > 0),
            ]  # fmt: skip
        for name in AGENT_LOOP:
            if name not in by:
                continue
            m = by[name]
            for label, value, target in (
                ("wall / floor", m["wall"] / floor["wall"], wall_t),
                ("CPU per call / floor", m["cpu"] / floor["cpu"], cpu_t),
                ("peak RSS / floor", m["peak_rss_mb"] / floor["peak_rss_mb"], rss_t),
            ):
                bound = target * SMOKE_SLACK
                checks.append((f"R={r} {name}: {label} (target {target})", value,
                               f"<= {bound:.1f}", 0 < value <= bound))  # fmt: skip
    print(f"\nsmoke checks (loose bounds: the R = 1,000 targets loosened {SMOKE_SLACK:g}x, "
          "small R is noisy; start-up times are wall-clock, so not checked)")  # fmt: skip
    shown = [(label, f"{value:>8.2f} {bound:>9}", ok) for label, value, bound, ok in checks]
    return _smoke.verdict(shown, 50, 18)


def import_times(repeat: int = 5) -> None:
    """Fresh interpreters: ``import agentrt``, ``agentrt --help``, the engine."""
    bin_dir = os.path.dirname(sys.executable)
    commands = {
        "import agentrt": [sys.executable, "-c", "import agentrt"],
        "agentrt --help": [os.path.join(bin_dir, "agentrt"), "--help"],
        "from agentrt import Runtime": [sys.executable, "-c", "from agentrt import Runtime"],
    }
    print(f"{'start-up':>28} {'median s':>9} {'target':>7} {'result':>7}")
    for label, argv in commands.items():
        if not os.path.exists(argv[0]):
            continue
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            times.append(time.perf_counter() - started)
        value = statistics.median(times)
        target = IMPORT_TARGETS.get(label)
        shown = f"<={target}" if target is not None else ""
        result = verdict(value <= target) if target is not None else ""
        print(f"{label:>28} {value:>9.3f} {shown:>7} {result:>7}")


def counts(
    variants: list[str],
    rollouts: list[int],
    steps: int,
    *,
    latency_ms: float,
    server_cpu: int | None,
    client_cpu: int | None,
) -> None:
    """``--counts``: what the clock and the machine's load do not move."""
    proc, url = start_sim(latency_ms, steps, server_cpu)
    try:
        print(f"{'R':>6} {'loop':>9} {'calls/model call':>17} {'live objects/rollout':>21}")
        for r in rollouts:
            for variant in variants:
                m = run_child(variant, url, r, steps, cpu=client_cpu, server=proc.pid,
                              counts=True, latency_ms=latency_ms)  # fmt: skip
                print(f"{r:>6} {variant:>9} {m['calls_per_model_call']:>17.0f} "
                      f"{m['live_per_rollout']:>21.0f}", flush=True)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print("\ncalls: Python function calls (cProfile, C functions included) of the measured")
    print("phase over the model calls the sim-server counted; live objects: GC-tracked")
    print("objects alive halfway through the first model call (after a collection), over")
    print("the count before the phase, per running rollout")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="R = 100 only")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's short form: R = {SMOKE_SIZES['rollouts'][0]}, 1 repetition; exits 1 when "
        f"an agent-loop ratio misses its R = 1,000 target loosened {SMOKE_SLACK:g}x "
        f"(wall <= {TARGETS[0][1] * SMOKE_SLACK:.1f}x, CPU <= {TARGETS[0][2] * SMOKE_SLACK:.1f}x, "
        f"RSS <= {TARGETS[0][3] * SMOKE_SLACK:.1f}x the floor's) or a figure is nonsense",
    )
    parser.add_argument(
        "--rollouts", type=int, nargs="+", help="values of R (default 100 1000 3000)"
    )
    parser.add_argument("--steps", type=int, default=10, help="S, model calls per rollout")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="sim-server latency")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions for R < 3,000")
    parser.add_argument(
        "--repeat-large", type=int, default=3, help="repetitions for R >= 3,000 (each ~1 min)"
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=list(DEFAULT_VARIANTS),
        help="what to measure beside the floor (agent: Agent.run without the engine)",
    )
    parser.add_argument(
        "--counts",
        action="store_true",
        help="no clock: Python function calls per model call and GC-tracked objects alive per "
        "running rollout, one sample per variant (default R = 200)",
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and client")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    if parser.parse_known_args()[0].smoke:
        parser.set_defaults(**SMOKE_SIZES)  # explicit options still win
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (S - 1 tool calls, then the answer)")
    if args.child:
        rollouts = (args.rollouts or [100])[0]
        child(args.child, args.url, rollouts, args.steps, cpu=args.cpu, server=args.server_pid,
              counts=args.counts, latency_s=args.latency_ms / 1000)  # fmt: skip
        return
    cores = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cores) >= 2
    server_cpu, client_cpu = (cores[0], cores[1]) if pin else (None, None)
    variants = ["floor", *[v for v in args.variants if v != "floor"]]
    if args.counts:
        counts(variants, args.rollouts or [200], args.steps, latency_ms=args.latency_ms,
               server_cpu=server_cpu, client_cpu=client_cpu)  # fmt: skip
        return
    rollouts = args.rollouts or ([100] if args.quick else [100, 1000, 3000])
    proc, url = start_sim(args.latency_ms, args.steps, server_cpu)
    table: Table = {}
    try:
        for r in rollouts:
            samples: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for _ in range(args.repeat if r < 3000 else args.repeat_large):
                for variant in variants:
                    sample = run_child(variant, url, r, args.steps, cpu=client_cpu, server=proc.pid)
                    samples[variant].append(sample)
                print(f"R={r}: " + ", ".join(f"{v} {samples[v][-1]['wall']:.2f}s"
                                             for v in variants), flush=True)  # fmt: skip
            table[r] = {v: median_of(s) for v, s in samples.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    report(table, args.steps, args.latency_ms / 1000)
    import_times(3 if args.smoke else 5)
    if args.smoke:
        raise SystemExit(smoke_checks(table, args.steps, args.latency_ms / 1000))


if __name__ == "__main__":
    main()
