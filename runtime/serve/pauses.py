"""Pauses the daemon's API feels: garbage collections, timed as they happen.

Owns ``GcPauses``: a ``gc.callbacks`` observer (it reads, never tunes: an
application embedding the daemon keeps its own collector settings) and its
Prometheus families, ``agentrt_gc_pause_seconds{generation}`` (a histogram)
and ``agentrt_gc_pause_longest_seconds``.  A collection stops every thread,
the API's included, so the longest one bounds the API's tail latency.
Nothing of runs or HTTP.

The roof: may import every layer.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final, Self, final

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
        self._counts = [[0] * (len(BUCKETS) + 1) for _ in range(3)]
        """Per generation: pauses per bucket (the last: over the largest bound)."""
        self._sums = [0.0, 0.0, 0.0]
        self.longest = 0.0
        """Seconds of the longest pause seen."""

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
            return
        took = time.perf_counter() - self._started
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


__all__ = ["BUCKETS", "GcPauses"]
