"""Pauses the daemon's API feels, timed as they happen.

Owns ``GcPauses``: a ``gc.callbacks`` observer (it reads, never tunes: an
application embedding the daemon keeps its own collector settings) and its
Prometheus families, ``agentrt_gc_pause_seconds{generation}`` (a histogram)
and ``agentrt_gc_pause_longest_seconds``.  A collection stops every thread,
the API's included, so the longest one bounds the API's tail latency.
And ``LoopStalls``: how late the API's event loop wakes a sleeper while it
serves requests (``agentrt_api_stall_seconds``,
``agentrt_api_stall_longest_seconds``): every pause a request would wait
through, collections, the GIL held by the run loop or a busy machine alike.
And ``IdleCollector``, for a process the daemon owns (``agentrt serve``,
never an embedding application): full collections at quiet moments instead
of under load.  Nothing of runs or HTTP.

The roof: may import every layer.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Final, Self, final

import anyio
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Seconds; 0.05 is the API's latency target."""


@final
class GcPauses(Collector):
    """``with GcPauses() as pauses:`` times every collection while open.

    The callback runs inside the collector, on whichever thread triggered
    it, so it takes no lock (collections do not overlap: each holds the
    GIL) and allocates nothing that lives."""

    def __init__(self) -> None:
        self._started = 0.0
        self._started_cpu = 0.0
        self._counts = [[0] * (len(BUCKETS) + 1) for _ in range(3)]
        """Per generation: pauses per bucket (the last: over the largest bound)."""
        self._sums = [0.0, 0.0, 0.0]
        self.longest = 0.0
        """Seconds of the longest pause seen (wall clock: what a request waits)."""
        self.longest_cpu = 0.0
        """CPU seconds of the costliest collection (the collector's own work;
        the wall clock adds the time the machine ran other processes)."""

    def __enter__(self) -> Self:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            self._started_cpu = time.thread_time()
            return
        took = time.perf_counter() - self._started
        self.longest_cpu = max(self.longest_cpu, time.thread_time() - self._started_cpu)
        generation = min(int(info.get("generation", 2)), 2)
        counts = self._counts[generation]
        for i, bound in enumerate(BUCKETS):
            if took <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        self._sums[generation] += took
        self.longest = max(self.longest, took)

    def pauses(self) -> int:
        return sum(sum(counts) for counts in self._counts)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "agentrt_gc_pause_seconds",
            "Garbage collections (every thread stopped), by generation.",
            labels=["generation"],
        )
        for generation, counts in enumerate(self._counts):
            cumulative, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            family.add_metric([str(generation)], buckets, self._sums[generation])
        yield family
        yield GaugeMetricFamily(
            "agentrt_gc_pause_longest_seconds",
            "The longest garbage collection since the daemon started.",
            value=self.longest,
        )
        yield GaugeMetricFamily(
            "agentrt_gc_pause_longest_cpu_seconds",
            "CPU time of the costliest garbage collection since the daemon started.",
            value=self.longest_cpu,
        )


@final
class LoopStalls(Collector):
    """``await stalls.watch()`` on a loop: every ``period_s`` it sleeps and
    records how much later than asked it woke (until cancelled), and for
    the longest stall the CPU time the loop's thread spent meanwhile: its
    own work (the rest of the stall it waited for the GIL or for a core).

    It times the loop while it serves: from ``enter()`` (a request came)
    until ``linger_s`` after the ``leave()`` of the last one in progress;
    then it waits for the next one without waking (an idle daemon's API
    thread sleeps, instead of taking the GIL from the run loop a hundred
    times a second).  A pause that ends before a request is seen is felt by
    that request alone, and timed by its client."""

    def __init__(self, period_s: float = 0.01, linger_s: float = 1.0) -> None:
        self.period_s = period_s
        self.linger_s = linger_s
        self._counts = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0
        self.longest = 0.0
        self.longest_cpu = 0.0
        self._serving = 0
        """Requests in progress."""
        self._until = 0.0
        """``perf_counter`` time the watcher stops at, when none is in progress."""
        self._woken: anyio.Event | None = None
        """Set by ``enter`` while the watcher waits for work."""

    @property
    def wakeups(self) -> int:
        """Wake-ups timed so far."""
        return sum(self._counts)

    @property
    def idle(self) -> bool:
        """The watcher waits for a request (it does not wake)."""
        return self._woken is not None

    def enter(self) -> None:
        """A request came (on the loop's thread)."""
        self._serving += 1
        woken = self._woken
        if woken is not None:
            self._woken = None
            woken.set()

    def leave(self) -> None:
        """A request ``enter`` announced is over."""
        self._serving -= 1
        self._until = time.perf_counter() + self.linger_s

    async def watch(self) -> None:
        while True:
            if not self._serving and time.perf_counter() >= self._until:
                woken = self._woken = anyio.Event()
                await woken.wait()
                continue
            asked, cpu = time.perf_counter(), time.thread_time()
            await anyio.sleep(self.period_s)
            late = max(0.0, time.perf_counter() - asked - self.period_s)
            if late > self.longest:
                self.longest_cpu = time.thread_time() - cpu
            for i, bound in enumerate(BUCKETS):
                if late <= bound:
                    self._counts[i] += 1
                    break
            else:
                self._counts[-1] += 1
            self._sum += late
            self.longest = max(self.longest, late)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "agentrt_api_stall_seconds",
            "How late the API's event loop woke a sleeper, per wake-up.",
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*BUCKETS, float("inf")), self._counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
        family.add_metric([], buckets, self._sum)
        yield family
        yield GaugeMetricFamily(
            "agentrt_api_stall_longest_seconds",
            "The longest the API's event loop was held up since the daemon started.",
            value=self.longest,
        )
        yield GaugeMetricFamily(
            "agentrt_api_stall_longest_cpu_seconds",
            "CPU time the API's thread spent during its longest stall (its own work; "
            "the rest it waited for the GIL or a core).",
            value=self.longest_cpu,
        )


@final
class IdleCollector:
    """Full collections when the daemon is quiet, for a process it owns.

    A full collection walks every live object: with thousands of rollouts
    alive, a pause of 100 ms or more for every thread, the API's included.
    ``agentrt serve`` (``cli._tune_process``) freezes its start-up heap and
    raises the threshold of automatic full collections out of reach; then
    ``await collector.run(idle)`` collects fully once ``idle()`` has held
    (no run executing) for ``quiet_s`` and objects reached the old
    generation since the last one, and after ``max_interval_s`` even
    without a quiet moment (cyclic garbage must not grow without bound under
    unbroken load: one pause then, in the ``agentrt_gc_pause_seconds``
    histogram like any other).  A forced collection that finds next to no
    garbage (fewer than ``few`` objects) doubles the wait before the next
    forced one, up to ``max_interval_s * max_backoff``; one that finds more
    sets it back: a daemon whose runs leave no cycles pauses rarely.  A
    burst arriving during an idle collection waits for it."""

    def __init__(
        self,
        *,
        check_s: float = 1.0,
        quiet_s: float = 5.0,
        max_interval_s: float = 60.0,
        max_backoff: int = 16,
        few: int = 1_000,
    ) -> None:
        self.check_s = check_s
        self.quiet_s = quiet_s
        self.max_interval_s = max_interval_s
        self.max_backoff = max_backoff
        self.few = few
        self.interval = max_interval_s
        """The wait before the next forced collection under unbroken load."""
        self.collections = 0

    async def run(self, idle: Callable[[], bool]) -> None:
        last = quiet_since = time.monotonic()
        promoted = _middle_collections()
        while True:
            await anyio.sleep(self.check_s)
            now = time.monotonic()
            if not idle():
                quiet_since = now
            if _middle_collections() == promoted:
                continue  # nothing reached the old generation: nothing to find there
            quiet = now - quiet_since >= self.quiet_s
            if quiet or now - last >= self.interval:
                found = gc.collect()
                self.collections += 1
                last, promoted = now, _middle_collections()
                if found >= self.few:
                    self.interval = self.max_interval_s
                elif not quiet:
                    ceiling = self.max_interval_s * self.max_backoff
                    self.interval = min(self.interval * 2, ceiling)


def _middle_collections() -> int:
    """Collections of the middle generation so far: each promotes its
    survivors into the old one."""
    return int(gc.get_stats()[1]["collections"])


__all__ = ["BUCKETS", "GcPauses", "IdleCollector", "LoopStalls"]
