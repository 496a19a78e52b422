"""The rollout scheduler: N rollouts of one task in parallel (fork/join).

Owns ``RolloutScheduler`` (one ``anyio.CapacityLimiter`` per backend name,
shared by every fan-out of a runtime, so two runs on one backend share its
concurrency), ``fan_out`` (run ``rollout(i)`` for ``i`` in ``range(n)``
inside one task group and join), the per-rollout ``Outcome`` and the
``FanOut`` it returns, and ``majority_certain`` (the early-stop rule for
a vote).

How a fan-out goes:

1. ``warm_prefix`` (optional) runs once, before any rollout starts, so the
   shared prompt prefix is in the server's cache when N requests repeat it;
   a failing warm-up is logged and the fan-out goes on (it is an
   optimisation, not a step of the run) -- except ``BudgetExceeded``, which
   stops it before it starts.
2. Each rollout waits for its backend's limiter, then runs in its own cancel
   scope.  A rollout that raises is recorded as ``failed`` with the error and
   the others go on; ``BudgetExceeded`` is recorded the same way and stops
   the fan-out (the budget is spent).
3. After every finished rollout, ``on_outcome`` gets it (results stream as
   they finish) and ``should_stop(finished, pending)`` may end the fan-out
   early; the rollouts still running or waiting are then cancelled and
   recorded as ``cancelled``.  ``timeout_s`` does the same at a deadline.

When ``fan_out`` returns, no task it started is left running: every
rollout ran inside the task group it joined.

Runtime floor: imports anyio, msgspec-free stdlib and the errors; never
agents, tools, aggregators or the roof.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, final

import anyio

from agentrt.runtime.errors import BudgetExceeded, ConfigError
from agentrt.runtime.log import get_logger

T = TypeVar("T")

OutcomeStatus = Literal["succeeded", "failed", "cancelled"]
StopReason = Literal["should_stop", "budget", "deadline"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """How rollout ``index`` ended."""

    index: int
    status: OutcomeStatus
    value: T | None = None
    """What the rollout returned (``succeeded`` only)."""
    error: BaseException | None = None
    """What it raised (``failed`` only)."""
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


@dataclass(frozen=True, slots=True)
class FanOut(Generic[T]):
    """Every rollout's outcome, by index, and why the fan-out stopped early
    (``None``: every rollout ran to its end)."""

    outcomes: list[Outcome[T]]
    stopped: StopReason | None = None
    finish_order: list[int] = field(default_factory=list)
    """Indices in the order their rollouts finished (not the cancelled)."""

    @property
    def values(self) -> list[T]:
        """The values of the rollouts that succeeded, by index."""
        return [o.value for o in self.outcomes if o.status == "succeeded" and o.value is not None]

    def of_status(self, status: OutcomeStatus) -> list[Outcome[T]]:
        return [o for o in self.outcomes if o.status == status]


Rollout = Callable[[int], Awaitable[T]]
"""Runs rollout ``i`` and returns its result."""
OutcomeCallback = Callable[[Outcome[T]], Awaitable[None]]
StopRule = Callable[[Sequence[Outcome[T]], int], bool]
"""``(finished outcomes so far, rollouts still pending) -> stop now?``"""


def majority_certain(keys: Sequence[Hashable | None], pending: int) -> bool:
    """True when a plurality vote over ``keys`` (``None``: no answer) can no
    longer change: the leader's count exceeds the runner-up's plus every
    pending rollout (each of which could still vote for the runner-up)."""
    counts = Counter(k for k in keys if k is not None).most_common(2)
    if not counts:
        return False
    leader = counts[0][1]
    runner_up = counts[1][1] if len(counts) > 1 else 0
    return leader > runner_up + pending


@final
class RolloutScheduler:
    """Fans rollouts out under a concurrency limit per backend.

    ``limits``: the most rollouts in flight per backend name;
    ``default_limit``: for any backend not listed.  The limiters live as
    long as the scheduler, so concurrent fan-outs share them."""

    def __init__(self, limits: Mapping[str, int] | None = None, *, default_limit: int = 8) -> None:
        for name, limit in {**(limits or {}), "(default)": default_limit}.items():
            if limit < 1:
                raise ConfigError(
                    f"concurrency limit must be >= 1, got {limit}", where=f"scheduler.{name}"
                )
        self._limits = dict(limits or {})
        self.default_limit = default_limit
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    def waiting(self) -> dict[str, int]:
        """Rollouts waiting for a slot, per backend (a queue depth for metrics)."""
        return {name: lim.statistics().tasks_waiting for name, lim in self._limiters.items()}

    def limiter(self, backend: str) -> anyio.CapacityLimiter:
        """The limiter for ``backend`` (created on first use)."""
        if backend not in self._limiters:
            self._limiters[backend] = anyio.CapacityLimiter(
                self._limits.get(backend, self.default_limit)
            )
        return self._limiters[backend]

    async def fan_out(
        self,
        n: int,
        rollout: Rollout[T],
        *,
        backend: str = "default",
        warm_prefix: Callable[[], Awaitable[object]] | None = None,
        should_stop: StopRule[T] | None = None,
        on_outcome: OutcomeCallback[T] | None = None,
        timeout_s: float | None = None,
    ) -> FanOut[T]:
        """Run ``rollout(0..n-1)`` in parallel and join (module docstring)."""
        if n < 1:
            raise ConfigError(f"needs at least one rollout, got {n}", where="scheduler.fan_out")
        run = _FanOutRun(n, rollout, self.limiter(backend), should_stop, on_outcome)
        if warm_prefix is not None:
            try:
                await warm_prefix()
            except BudgetExceeded as exc:
                log.warning("fan_out.warm_prefix_budget", error=str(exc))
                run.stop("budget")
            except Exception as exc:
                log.warning("fan_out.warm_prefix_failed", error=repr(exc))
        if run.stopped is None:
            deadline = math.inf if timeout_s is None else anyio.current_time() + timeout_s
            with anyio.CancelScope(deadline=deadline) as overall:
                async with anyio.create_task_group() as tg:
                    for i in range(n):
                        tg.start_soon(run.one, i)
            if overall.cancelled_caught and run.stopped is None:
                run.stopped = "deadline"
        return run.result()


@final
class _FanOutRun(Generic[T]):
    """The state of one fan-out: outcomes so far and the rollouts' scopes."""

    def __init__(
        self,
        n: int,
        rollout: Rollout[T],
        limiter: anyio.CapacityLimiter,
        should_stop: StopRule[T] | None,
        on_outcome: OutcomeCallback[T] | None,
    ) -> None:
        self.n = n
        self.rollout = rollout
        self.limiter = limiter
        self.should_stop = should_stop
        self.on_outcome = on_outcome
        self.outcomes: dict[int, Outcome[T]] = {}
        self.order: list[int] = []
        self.scopes: dict[int, anyio.CancelScope] = {}
        self.stopped: StopReason | None = None

    def stop(self, reason: StopReason) -> None:
        if self.stopped is None:
            self.stopped = reason
        for i, scope in self.scopes.items():
            if i not in self.outcomes:
                scope.cancel()

    async def one(self, i: int) -> None:
        scope = anyio.CancelScope()
        self.scopes[i] = scope
        if self.stopped is not None:
            scope.cancel()
        started = time.perf_counter()
        outcome: Outcome[T] | None = None
        with scope:
            async with self.limiter:
                try:
                    value = await self.rollout(i)
                except BudgetExceeded as exc:
                    outcome = Outcome(i, "failed", error=exc)
                    self.stop("budget")
                except Exception as exc:
                    log.warning("fan_out.rollout_failed", index=i, error=repr(exc))
                    outcome = Outcome(i, "failed", error=exc)
                else:
                    outcome = Outcome(i, "succeeded", value=value)
        if outcome is None:  # cancelled before or while it ran
            self.outcomes[i] = Outcome(i, "cancelled", wall_seconds=time.perf_counter() - started)
            return
        outcome = Outcome(
            i, outcome.status, outcome.value, outcome.error, time.perf_counter() - started
        )
        self.outcomes[i] = outcome
        self.order.append(i)
        if self.on_outcome is not None:
            await self.on_outcome(outcome)
        if self.stopped is None and self.should_stop is not None:
            pending = self.n - len(self.outcomes)
            finished = [self.outcomes[j] for j in self.order]
            if pending > 0 and self.should_stop(finished, pending):
                self.stop("should_stop")

    def result(self) -> FanOut[T]:
        outcomes = [self.outcomes.get(i) or Outcome(i, "cancelled") for i in range(self.n)]
        return FanOut(outcomes, self.stopped, list(self.order))


__all__ = [
    "FanOut",
    "Outcome",
    "OutcomeStatus",
    "RolloutScheduler",
    "StopReason",
    "majority_certain",
]
