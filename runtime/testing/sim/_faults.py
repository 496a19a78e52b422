"""Fault draws for the sim-server: which request fails, and how.

One seeded RNG draws at most one request-level fault per generation request
(429, 503, hang, cut, restart are exclusive; their rates add up to at most
1).  Malformed tool-call JSON is drawn separately, only for replies that
call tools.  Counts per kind feed ``/metrics`` and ``/sim/stats``.

Under concurrency the order in which requests draw follows their arrival,
so which request fails varies, but the rates and (for sequential clients)
the exact sequence are reproducible from the seed.

Pure logic: no I/O.
"""

from __future__ import annotations

import random

from agentrt.runtime.testing.sim._sim_config import FAULT_KINDS, FaultKind

_REQUEST_LEVEL: tuple[FaultKind, ...] = ("429", "503", "hang", "cut", "restart")


class FaultInjector:
    """Draws faults at configured rates from a seeded RNG and counts them."""

    def __init__(self, rates: dict[FaultKind, float], seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._bad_json_rng = random.Random(seed + 1)
        self._request_rates = [(k, rates.get(k, 0.0)) for k in _REQUEST_LEVEL]
        self._any = sum(r for _, r in self._request_rates) > 0
        self._bad_json_rate = rates.get("bad_tool_json", 0.0)
        self.injected: dict[FaultKind, int] = dict.fromkeys(FAULT_KINDS, 0)

    def draw(self) -> FaultKind | None:
        """The fault for the next generation request, if any (counted later,
        by ``record``, once it is actually applied)."""
        if not self._any:
            return None
        r = self._rng.random()
        cumulative = 0.0
        for kind, rate in self._request_rates:
            cumulative += rate
            if r < cumulative:
                return kind
        return None

    def draw_bad_tool_json(self) -> bool:
        """Whether the next tool-calling reply gets malformed arguments."""
        return self._bad_json_rate > 0 and self._bad_json_rng.random() < self._bad_json_rate

    def record(self, kind: FaultKind) -> None:
        """Count one injected fault."""
        self.injected[kind] += 1
