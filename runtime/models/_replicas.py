"""Replicas of one model behind one backend name, with prefix affinity: which
replica serves a request (``ReplicaSet``), from each replica's health,
circuit breaker and outstanding requests.

Pure state and logic: no I/O, no HTTP.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence

import msgspec

from agentrt.runtime.kernel._errors import BackendUnavailable
from agentrt.runtime.models._retry import BreakerConfig, BreakerState, CircuitBreaker

__all__ = ["Replica", "ReplicaSet", "ReplicaStatus"]


class ReplicaStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one replica."""

    url: str
    healthy: bool
    breaker: str
    outstanding: int
    served: int
    failures: int


class Replica:
    """One server: its URL, health, breaker and load."""

    __slots__ = ("breaker", "failures", "healthy", "index", "outstanding", "served", "url")

    def __init__(self, index: int, url: str, breaker: CircuitBreaker) -> None:
        self.index = index
        self.url = url
        self.breaker = breaker
        self.healthy = True
        self.outstanding = 0
        self.served = 0
        self.failures = 0

    def admissible(self) -> bool:
        return self.healthy and self.breaker.state is not BreakerState.OPEN

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(
            url=self.url,
            healthy=self.healthy,
            breaker=self.breaker.state.value,
            outstanding=self.outstanding,
            served=self.served,
            failures=self.failures,
        )


class ReplicaSet:
    """The replicas of one backend and the affinity map (an LRU of
    ``capacity`` keys).  Rollouts of one run share a key, so they land on
    one replica and reuse its radix cache."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        backend: str = "",
        breaker: BreakerConfig | None = None,
        balance_abs_threshold: int = 32,
        capacity: int = 100_000,
    ) -> None:
        if not urls:
            raise ValueError("a ReplicaSet needs at least one URL")
        self.replicas = [
            Replica(i, url, CircuitBreaker(breaker, endpoint=url, backend=backend))
            for i, url in enumerate(urls)
        ]
        self._backend = backend
        self._threshold = balance_abs_threshold
        self._capacity = capacity
        self._affinity: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self.replicas)

    def mapped(self, key: str) -> int | None:
        """The replica index ``key`` is mapped to, if any."""
        return self._affinity.get(key)

    def pick(self, key: str | None, exclude: Collection[int] = ()) -> Replica:
        """The replica for a request.  A mapped ``key`` goes to its replica
        while that one is admissible (healthy, breaker not open, not in
        ``exclude``) and has at most ``balance_abs_threshold`` more
        outstanding requests than the least loaded admissible one (else the
        request spills over; the mapping stays).  A new key is mapped to the
        least loaded admissible replica (fewest outstanding, then fewest
        served); no key: the least loaded.  Raises ``BackendUnavailable``
        when no replica outside ``exclude`` is admissible."""
        candidates = [r for r in self.replicas if r.index not in exclude and r.admissible()]
        if not candidates:
            # Health is a hint: with no healthy replica left, try the others
            # (their breakers still guard them).
            candidates = [
                r
                for r in self.replicas
                if r.index not in exclude and r.breaker.state is not BreakerState.OPEN
            ]
        if not candidates:
            states = ", ".join(f"{r.url} ({self._why_not(r, exclude)})" for r in self.replicas)
            raise BackendUnavailable(f"no replica available: {states}", backend=self._backend)
        least = min(candidates, key=lambda r: (r.outstanding, r.served))
        if key is None:
            return least
        index = self._affinity.get(key)
        if index is not None:
            mine = self.replicas[index]
            if mine in candidates:
                self._affinity.move_to_end(key)
                if mine.outstanding - least.outstanding <= self._threshold:
                    return mine
                return least
        self._affinity[key] = least.index
        self._affinity.move_to_end(key)
        if len(self._affinity) > self._capacity:
            self._affinity.popitem(last=False)
        return least

    @staticmethod
    def _why_not(replica: Replica, exclude: Collection[int]) -> str:
        if replica.index in exclude:
            return "already tried"
        if replica.breaker.state is BreakerState.OPEN:
            return "circuit open"
        return "down" if not replica.healthy else "busy"

    def statuses(self) -> list[ReplicaStatus]:
        return [r.status() for r in self.replicas]
