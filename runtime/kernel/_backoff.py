"""Restart with backoff: the one policy for bringing back something that died.

:class:`Backoff` is the policy (capped exponential delay with optional
jitter, a reset after a healthy stretch, a limit on crashes in a row) and
:class:`RestartBackoff` its running state.  Every restart loop in agentrt
(a managed model server's process, an MCP server's connection) asks a
``RestartBackoff`` what to do after a crash, so they all mean the same thing
by "backoff".  Pure data and arithmetic: no I/O, no clock (callers measure
how long the thing was healthy).  Must not import agents, tools or
aggregators.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import final

__all__ = ["Backoff", "RestartBackoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How to restart after a crash.

    The ``n``-th crash in a row waits ``min(max_s, initial_s * multiplier **
    (n - 1))``, plus up to ``jitter`` of that at random.  A crash after at
    least ``reset_after_s`` of health counts as the first in a row again.
    More than ``max_restarts`` crashes in a row (``None``: no limit) and the
    caller gives up.
    """

    initial_s: float = 0.5
    """Wait before the first restart."""
    max_s: float = 30.0
    """The wait never exceeds this (before jitter)."""
    multiplier: float = 2.0
    """Each further crash in a row multiplies the wait by this."""
    jitter: float = 0.0
    """Random extra fraction of the wait (0..1), so many clients do not restart in step."""
    reset_after_s: float = 30.0
    """Healthy seconds after which the crash count (and the wait) starts over."""
    max_restarts: int | None = None
    """Restarts allowed in a row; one more crash and the caller gives up."""

    def __post_init__(self) -> None:
        problems = [
            f"{name}={value!r} must be {bound}"
            for name, value, ok, bound in (
                ("initial_s", self.initial_s, self.initial_s >= 0, ">= 0"),
                ("max_s", self.max_s, self.max_s >= 0, ">= 0"),
                ("multiplier", self.multiplier, self.multiplier >= 1, ">= 1"),
                ("jitter", self.jitter, 0 <= self.jitter <= 1, "between 0 and 1"),
                ("reset_after_s", self.reset_after_s, self.reset_after_s >= 0, ">= 0"),
                (
                    "max_restarts",
                    self.max_restarts,
                    self.max_restarts is None or self.max_restarts >= 0,
                    ">= 0 or None",
                ),
            )
            if not ok  # NaN fails every comparison, so it lands here too
        ]
        if problems:
            raise ValueError(f"invalid backoff: {'; '.join(problems)}")

    def delay(self, crashes: int, rand: float = 0.0) -> float:
        """The wait before restarting after the ``crashes``-th crash in a row
        (1-based); ``rand`` in [0, 1) draws the jitter."""
        if crashes < 1:
            raise ValueError(f"crashes counts from 1, got {crashes}")
        # Capped before the power can overflow: 2.0 ** 2000 raises.
        exponent = min(crashes - 1, 1024)
        try:
            base = min(self.max_s, self.initial_s * self.multiplier**exponent)
        except OverflowError:
            base = self.max_s
        return base * (1.0 + self.jitter * rand)


@final
@dataclass(slots=True)
class RestartBackoff:
    """The state of one :class:`Backoff`: crashes in a row and restarts granted.

    ::

        backoff = RestartBackoff(policy)
        while True:
            began = anyio.current_time()
            await run_once()                     # returns when it crashed
            delay = backoff.crashed(anyio.current_time() - began)
            if delay is None:
                raise GaveUp(backoff.limit_reason())
            await anyio.sleep(delay)
    """

    policy: Backoff
    rand: Callable[[], float] = field(default=random.random, repr=False)
    """Draws the jitter, in [0, 1)."""
    crashes: int = 0
    """Crashes in a row (reset by a healthy stretch, or by :meth:`reset`)."""
    restarts: int = 0
    """Restarts granted so far (every ``crashed`` that returned a delay)."""

    def crashed(self, healthy_for: float) -> float | None:
        """Record a crash of something that had been healthy for
        ``healthy_for`` seconds; return how long to wait before restarting
        it, or ``None`` when the policy gives up."""
        if healthy_for >= self.policy.reset_after_s:
            self.crashes = 0
        self.crashes += 1
        limit = self.policy.max_restarts
        if limit is not None and self.crashes > limit:
            return None
        self.restarts += 1
        return self.policy.delay(self.crashes, self.rand())

    def reset(self) -> None:
        """Forget the crashes in a row (a restart someone asked for)."""
        self.crashes = 0

    def limit_reason(self) -> str:
        """Why the policy gave up, for an error message."""
        limit = self.policy.max_restarts
        if limit == 0:
            return "restarts are off"
        return f"{self.crashes} crashes in a row, limit {limit} restarts"
