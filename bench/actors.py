"""Benchmark the actor kernel against raw anyio memory object streams.

    python bench/actors.py [--actors 10000] [--messages 200000] [--quick | --smoke]

Each row measures the actor kernel and a raw-stream baseline side by side in
the same run, repeats, and reports medians with a PASS/MISS column against
the targets:

1. tell throughput: one producer, one consumer; actor mailbox vs a raw
   ``create_memory_object_stream`` of the same capacity (target >= 50%).
2. ask round trips across N live actors, asks spread round-robin over all of
   them, 1 and 64 outstanding; vs N raw consumer tasks, each with a request
   stream and a one-slot reply stream (target: p99 < 1 ms).
3. memory per idle actor (N of them, tracemalloc and RSS deltas) vs a raw
   stream pair plus one consumer task (target <= 5 KB).  Each memory sample
   runs in a fresh process so RSS deltas are not masked by reused memory.
   An informational row shows what an actor that runs one idle service
   (``context.start_soon_service``) costs; actors that start none pay nothing
   for the feature, which the target row checks.

Runs on uvloop when it is installed (``--no-uvloop`` to compare).

``--smoke`` (what CI runs): 1,000 actors, 20,000 tells, 1,280 asks, one
sample of each (a few seconds), then checks with loose bounds, exiting 1 when
one fails: tell throughput >= 0.25x the raw stream's (half the target), memory
per idle actor (tracemalloc and RSS) <= 10 KB (twice the target), every tell
and ask counted, every figure finite and positive.  The ask p99 target is a
wall-clock figure: reported, not checked.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import _smoke
import anyio
import msgspec
import psutil
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._event_loop import run, uvloop_available
from agentrt.runtime.kernel._mailbox import DEFAULT_MAILBOX_CAPACITY
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.kernel._system import ActorSystem

TELL_TARGET = 0.5  # actor tell throughput / raw stream throughput
ASK_P99_TARGET_US = 1000.0
MEMORY_TARGET_BYTES = 5 * 1024
SMOKE_SLACK = 2.0
"""``--smoke``: each target loosened by this factor (small samples are noisy)."""
SMOKE_SIZES = {"actors": 1_000, "messages": 20_000, "asks": 1_280, "repeats": 1,
               "memory_repeats": 1}  # fmt: skip


class Tick(msgspec.Struct, tag=True, frozen=True):
    pass


class Count(msgspec.Struct, tag=True, frozen=True):
    pass


class Ping(msgspec.Struct, tag=True, frozen=True):
    n: int


TICK = Tick()


class Sink(Actor[Tick | Count, int]):
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = 0

    async def receive(self, message: Tick | Count) -> int:
        match message:
            case Tick():
                self.seen += 1
            case Count():
                pass
        return self.seen


class Echo(Actor[Ping, int]):
    __slots__ = ()

    async def receive(self, message: Ping) -> int:
        return message.n


class Daemon(Echo):
    """An ``Echo`` that also runs one service, idle in a sleep."""

    __slots__ = ()

    async def on_started(self) -> None:
        self.context.start_soon_service(anyio.sleep_forever, name="idle")


# -- 1. tell throughput ---------------------------------------------------------


async def raw_tell(messages: int) -> float:
    send, receive = anyio.create_memory_object_stream[Tick](DEFAULT_MAILBOX_CAPACITY)
    seen = 0

    async def consume() -> None:
        nonlocal seen
        with receive:
            async for _ in receive:
                seen += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with send:
            for _ in range(messages):
                await send.send(TICK)
    elapsed = time.perf_counter() - start
    assert seen == messages
    return messages / elapsed


async def actor_tell(system: ActorSystem, name: str, messages: int) -> float:
    ref = await system.spawn(Sink, name=name)
    start = time.perf_counter()
    for _ in range(messages):
        await ref.tell(TICK)
    seen = await ref.ask(Count(), timeout=60)  # FIFO: every tick is handled
    elapsed = time.perf_counter() - start
    assert seen == messages
    await system.stop(ref)
    return messages / elapsed


# -- 2. ask latency across many actors ----------------------------------------------


@dataclass
class AskRun:
    rate: float
    p50_us: float
    p99_us: float
    #: CPU time this process got / wall time: below 1.0 the OS ran something
    #: else meanwhile, and every ask in flight waited through it.
    cpu_share: float


def _summarize(latencies_ns: list[int], wall: float, cpu: float) -> AskRun:
    ordered = sorted(latencies_ns)
    p50 = ordered[len(ordered) // 2] / 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000
    return AskRun(len(ordered) / wall, p50, p99, cpu / wall)


async def _timed(
    concurrency: int, worker: Callable[[int], Coroutine[Any, Any, None]], latencies: list[int]
) -> AskRun:
    """Run ``worker(0)`` .. ``worker(concurrency - 1)`` at once; the
    ``latencies`` they recorded, with the wall and CPU time they took."""
    start, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for first in range(concurrency):
            tg.start_soon(worker, first)
    return _summarize(latencies, time.perf_counter() - start, time.process_time() - cpu)


async def actor_asks(refs: Sequence[ActorRef[Ping, int]], asks: int, concurrency: int) -> AskRun:
    latencies: list[int] = []
    per_worker = asks // concurrency
    clock = time.perf_counter_ns

    async def worker(first: int) -> None:
        mine: list[int] = []
        index = first
        message = Ping(first)
        for _ in range(per_worker):
            ref = refs[index]
            index = (index + concurrency) % len(refs)
            began = clock()
            await ref.ask(message, timeout=10)
            mine.append(clock() - began)
        latencies.extend(mine)

    return await _timed(concurrency, worker, latencies)


Endpoint = tuple[MemoryObjectSendStream[int], MemoryObjectReceiveStream[int]]


async def raw_consumer(
    requests: MemoryObjectReceiveStream[int],
    replies: MemoryObjectSendStream[int],
    *,
    task_status: TaskStatus[None],
) -> None:
    task_status.started()
    with requests, replies:
        async for request in requests:
            await replies.send(request)


async def raw_asks(endpoints: Sequence[Endpoint], asks: int, concurrency: int) -> AskRun:
    # Worker ``w`` only uses endpoints w, w+c, ... one request at a time, so
    # each one-slot reply stream has a single waiter (no deadline: raw cost).
    latencies: list[int] = []
    per_worker = asks // concurrency
    clock = time.perf_counter_ns

    async def worker(first: int) -> None:
        mine: list[int] = []
        index = first
        for _ in range(per_worker):
            send, replies = endpoints[index]
            index = (index + concurrency) % len(endpoints)
            began = clock()
            await send.send(first)
            await replies.receive()
            mine.append(clock() - began)
        latencies.extend(mine)

    return await _timed(concurrency, worker, latencies)


# -- 3. memory per idle actor (one fresh process per sample) -------------------------


def _rss() -> int:
    rss: int = psutil.Process().memory_info().rss
    return rss


async def idle_consumer(
    requests: MemoryObjectReceiveStream[int], *, task_status: TaskStatus[None]
) -> None:
    task_status.started()
    with requests:
        async for _ in requests:
            pass


async def _populate(
    kind: str, count: int, keep: list[Any], tg: TaskGroup, system: ActorSystem
) -> None:
    # An actor: one spawned Echo (its ref kept).  Raw: one stream pair (send
    # side kept) and one task reading it, started the same way.
    if kind in ("actor", "service"):
        factory = Echo if kind == "actor" else Daemon
        for i in range(count):
            keep.append(await system.spawn(factory, name=f"{len(keep)}-{i}"))
    else:
        for _ in range(count):
            send, requests = anyio.create_memory_object_stream[int](DEFAULT_MAILBOX_CAPACITY)
            keep.append(send)
            await tg.start(idle_consumer, requests)
    await anyio.wait_all_tasks_blocked()
    gc.collect()


async def memory_probe(kind: str, count: int) -> dict[str, float]:
    """Bytes per idle actor (or raw stream pair + task): first the RSS delta of
    ``count`` of them (tracemalloc off: its traces would inflate RSS), then the
    tracemalloc delta of ``count`` more."""
    keep: list[Any] = []
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        await _populate(kind, 100, keep, tg, system)  # warm up code paths
        rss_before = _rss()
        await _populate(kind, count, keep, tg, system)
        rss = _rss() - rss_before
        tracemalloc.start()
        traced_before = tracemalloc.get_traced_memory()[0]
        await _populate(kind, count, keep, tg, system)
        traced = tracemalloc.get_traced_memory()[0] - traced_before
        tracemalloc.stop()
        for item in keep:
            if isinstance(item, MemoryObjectSendStream):
                item.close()
        tg.cancel_scope.cancel()
    return {"rss": rss / count, "tracemalloc": traced / count}


def memory_samples(count: int, use_uvloop: bool) -> dict[str, dict[str, float]]:
    """One sample per kind (actor, actor with a service, raw), in fresh
    processes run side by side (memory figures do not mind sharing the CPU;
    the wall clock does)."""
    probes: dict[str, subprocess.Popen[str]] = {}
    for kind in ("actor", "service", "raw"):
        command = [sys.executable, __file__, "--probe", kind, "--actors", str(count)]
        if not use_uvloop:
            command.append("--no-uvloop")
        probes[kind] = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    samples: dict[str, dict[str, float]] = {}
    for kind, probe in probes.items():
        out, _ = probe.communicate(timeout=120)
        if probe.returncode:
            raise RuntimeError(f"memory probe {kind!r} failed with exit code {probe.returncode}")
        samples[kind] = json.loads(out.strip().splitlines()[-1])
    return samples


# -- the table ----------------------------------------------------------------


@dataclass
class Row:
    name: str
    actor: str
    raw: str
    ratio: str
    target: str
    ok: bool | None


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}/s"


def _fmt_us(value: float) -> str:
    return f"{value:,.1f} us"


def _fmt_bytes(value: float) -> str:
    return f"{value / 1024:,.2f} KB"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _median_of(runs: Sequence[AskRun], field: Callable[[AskRun], float]) -> float:
    return statistics.median(field(run) for run in runs)


def print_table(title: str, rows: Sequence[Row]) -> None:
    headers = ("measurement", "actor kernel", "raw anyio", "actor/raw", "target", "result")
    _smoke.print_table(
        title,
        headers,
        [(r.name, r.actor, r.raw, r.ratio, r.target, _smoke.mark(r.ok)) for r in rows],
    )


async def timed_benchmarks(args: argparse.Namespace, figures: dict[str, float]) -> list[Row]:
    """The timed rows; their raw medians go to ``figures`` (for ``--smoke``)."""
    rows: list[Row] = []
    repeats: int = args.repeats
    tell_actor: list[float] = []
    tell_raw: list[float] = []
    async with ActorSystem(system_id="bench") as system:
        for repeat in range(repeats):
            tell_raw.append(await raw_tell(args.messages))
            tell_actor.append(await actor_tell(system, f"sink-{repeat}", args.messages))
        actor_rate, raw_rate = _median(tell_actor), _median(tell_raw)
        figures.update({"tell actor/s": actor_rate, "tell raw/s": raw_rate})
        rows.append(
            Row(
                "tell throughput (1 producer)",
                _fmt_rate(actor_rate),
                _fmt_rate(raw_rate),
                f"{actor_rate / raw_rate:.2f}x",
                f">= {TELL_TARGET:.2f}x",
                actor_rate / raw_rate >= TELL_TARGET,
            )
        )

        refs = [await system.spawn(Echo, name=f"echo-{i}") for i in range(args.actors)]
        async with anyio.create_task_group() as tg:
            endpoints: list[Endpoint] = []
            for _ in range(args.actors):
                send, requests = anyio.create_memory_object_stream[int](DEFAULT_MAILBOX_CAPACITY)
                reply_send, reply_receive = anyio.create_memory_object_stream[int](1)
                endpoints.append((send, reply_receive))
                await tg.start(raw_consumer, requests, reply_send)
            for concurrency in (1, 64):
                actor_runs: list[AskRun] = []
                raw_runs: list[AskRun] = []
                for _ in range(repeats):
                    raw_runs.append(await raw_asks(endpoints, args.asks, concurrency))
                    actor_runs.append(await actor_asks(refs, args.asks, concurrency))
                a_rate = _median_of(actor_runs, lambda r: r.rate)
                r_rate = _median_of(raw_runs, lambda r: r.rate)
                a50 = _median_of(actor_runs, lambda r: r.p50_us)
                r50 = _median_of(raw_runs, lambda r: r.p50_us)
                a99 = _median_of(actor_runs, lambda r: r.p99_us)
                r99 = _median_of(raw_runs, lambda r: r.p99_us)
                label = f"ask, {args.actors:,} actors, {concurrency} in flight"
                figures[f"ask {concurrency} actor/s"] = a_rate
                figures[f"ask {concurrency} raw/s"] = r_rate
                figures[f"ask {concurrency} actor p99 us"] = a99
                rows.append(
                    Row(
                        f"{label}: round trips",
                        _fmt_rate(a_rate),
                        _fmt_rate(r_rate),
                        f"{a_rate / r_rate:.2f}x",
                        "",
                        None,
                    )
                )
                rows.append(Row(f"{label}: p50", _fmt_us(a50), _fmt_us(r50), "", "", None))
                rows.append(
                    Row(
                        f"{label}: p99",
                        _fmt_us(a99),
                        _fmt_us(r99),
                        "",
                        f"< {ASK_P99_TARGET_US:,.0f} us",
                        a99 < ASK_P99_TARGET_US,
                    )
                )
                a_cpu = _median_of(actor_runs, lambda r: r.cpu_share)
                r_cpu = _median_of(raw_runs, lambda r: r.cpu_share)
                rows.append(Row(f"{label}: CPU/wall", f"{a_cpu:.0%}", f"{r_cpu:.0%}", "", "", None))
            for send, replies in endpoints:
                send.close()
                replies.close()
    return rows


def memory_rows(args: argparse.Namespace, use_uvloop: bool, figures: dict[str, float]) -> list[Row]:
    """The memory rows; bytes per idle actor go to ``figures`` (for ``--smoke``)."""
    runs = [memory_samples(args.actors, use_uvloop) for _ in range(args.memory_repeats)]
    rows: list[Row] = []
    for metric in ("tracemalloc", "rss"):
        actor = _median([sample["actor"][metric] for sample in runs])
        raw = _median([sample["raw"][metric] for sample in runs])
        figures[f"memory {metric} B/actor"] = actor
        rows.append(
            Row(
                f"memory per idle actor ({metric})",
                _fmt_bytes(actor),
                _fmt_bytes(raw),
                f"{actor / raw:.2f}x",
                f"<= {MEMORY_TARGET_BYTES / 1024:.0f} KB",
                actor <= MEMORY_TARGET_BYTES,
            )
        )
    for metric in ("tracemalloc", "rss"):
        service = _median([sample["service"][metric] for sample in runs])
        raw = _median([sample["raw"][metric] for sample in runs])
        rows.append(
            Row(
                f"memory per actor with 1 idle service ({metric})",
                _fmt_bytes(service),
                _fmt_bytes(raw),
                f"{service / raw:.2f}x",
                "",
                None,
            )
        )
    return rows


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--actors", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=200_000, help="tells per sample")
    parser.add_argument("--asks", type=int, default=0, help="asks per sample")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer messages and repeats")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI's short form: "
        + ", ".join(f"{k.replace('_', '-')} {v:,}" for k, v in SMOKE_SIZES.items())
        + f"; exits 1 when tell/raw < {TELL_TARGET / SMOKE_SLACK:.2f}x, memory per idle "
        f"actor > {MEMORY_TARGET_BYTES * SMOKE_SLACK / 1024:.0f} KB, or a figure is nonsense "
        "(the targets loosened 2x)",
    )
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument("--probe", choices=("actor", "service", "raw"), help=argparse.SUPPRESS)
    if parser.parse_known_args(argv)[0].smoke:
        parser.set_defaults(**SMOKE_SIZES)  # explicit options still win
    args = parser.parse_args(argv)
    if args.quick:
        args.messages = min(args.messages, 50_000)
        args.repeats = 3
        args.memory_repeats = 1
    if not args.asks:
        args.asks = 6_400 if args.quick else 12_800
    return args


def smoke_checks(figures: dict[str, float]) -> int:
    """``--smoke``: the figures are sane and the targets met, loosened by ``SMOKE_SLACK``."""
    tell = figures["tell actor/s"] / figures["tell raw/s"]
    tell_bound = TELL_TARGET / SMOKE_SLACK
    memory_bound = MEMORY_TARGET_BYTES * SMOKE_SLACK
    checks = [
        (f"tell actor/raw >= {tell_bound:.2f}x (target {TELL_TARGET:.2f}x)", f"{tell:.2f}x",
         tell >= tell_bound),
        *(
            (f"{name}: finite and > 0", f"{value:,.1f}", math.isfinite(value) and value > 0)
            for name, value in figures.items()
            if not name.startswith("memory")
        ),
        *(
            (f"{name} <= {memory_bound / 1024:.0f} KB (target {MEMORY_TARGET_BYTES / 1024:.0f} KB)",
             f"{figures[name] / 1024:.2f} KB", 0 < figures[name] <= memory_bound)
            for name in ("memory tracemalloc B/actor", "memory rss B/actor")
        ),
    ]  # fmt: skip
    print(f"\nsmoke checks (loose bounds: targets loosened {SMOKE_SLACK:g}x, small samples are "
          "noisy; the ask p99 is wall-clock, so not checked)")  # fmt: skip
    return _smoke.verdict(checks, 58, 14)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    use_uvloop = uvloop_available() and not args.no_uvloop
    if args.probe:
        print(json.dumps(run(memory_probe, args.probe, args.actors, use_uvloop=use_uvloop)))
        return 0
    started = time.perf_counter()
    figures: dict[str, float] = {}
    rows = run(timed_benchmarks, args, figures, use_uvloop=use_uvloop)
    timed = time.perf_counter() - started
    rows += memory_rows(args, use_uvloop, figures)
    loop = "uvloop" if use_uvloop else "asyncio"
    title = (
        f"agentrt actor kernel vs raw anyio streams -- {loop}, Python "
        f"{sys.version.split()[0]}, {args.actors:,} actors, {args.messages:,} tells, "
        f"{args.asks:,} asks per sample; medians of {args.repeats} "
        f"(memory: {args.memory_repeats} fresh processes)"
    )
    print_table(title, rows)
    total = time.perf_counter() - started
    print(
        "CPU/wall: the CPU time this process got per second; below 100% the OS ran other "
        f"work meanwhile (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    print(f"time: {total:.1f} s ({timed:.1f} s timed runs, {total - timed:.1f} s memory probes)")
    return smoke_checks(figures) if args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
