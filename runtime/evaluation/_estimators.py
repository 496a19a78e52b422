"""Estimators and intervals for evaluations: unbiased pass@k and pass^k from
a pool of n runs, the one Wilson score interval, an honest interval for a
mean over tasks (the task is the unit of variance), a paired interval of
the difference between two strategies on the same tasks, and power
calculations (tasks, or runs per task, needed to see a given change).

Pure arithmetic on numbers (stdlib only, 95 % intervals); must not know
about runs, models or the command line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Final

import msgspec

MIN_TASKS: Final = 10
"""Below this many tasks an interval is flagged as not to be trusted: it
treats each task as one draw, and a handful of draws says little."""

Z95: Final = 1.959963984540054

# Student's t, two-sided 95 %, by degrees of freedom (1..30).
_T95: Final = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` runs of which ``c`` passed:
    ``1 - C(n-c, k) / C(n, k)`` (the chance that some of k runs drawn
    without replacement passes).  Raises ``ValueError`` unless
    ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that all of k runs drawn without replacement pass,
    ``C(c, k) / C(n, k)`` (reliability, not just reach).  Raises
    ``ValueError`` like ``pass_at_k``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (95 % by default); ``(0, 1)``
    when ``n`` is 0.  ``successes`` may be fractional (a mean times ``n``)."""
    if n <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, successes / n))
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


class Estimate(msgspec.Struct, frozen=True, kw_only=True):
    """A mean over tasks with its 95 % interval."""

    value: float
    low: float
    high: float
    tasks: int
    trusted: bool
    """False with fewer than ``MIN_TASKS`` tasks (or, for a difference, no
    spread to measure): read the interval as a rough guide only."""
    method: str


def mean_estimate(per_task: Sequence[float]) -> Estimate:
    """The mean of per-task values in [0, 1] (a task's pass@k, its share of
    subsets an aggregator got right) with a Wilson interval over the tasks.

    A value in [0, 1] with mean p has variance at most p(1-p), so the Wilson
    interval with n = tasks covers the mean at least as well as it covers a
    proportion: with 3 tasks all right it says [0.44, 1.00], not [1, 1].
    Raises ``ValueError`` for no values or one outside [0, 1]."""
    if not per_task:
        raise ValueError("an estimate needs at least one task")
    for value in per_task:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"per-task values must lie in [0, 1], got {value}")
    n = len(per_task)
    mean = math.fsum(per_task) / n
    low, high = wilson_interval(mean * n, n)
    return Estimate(
        value=mean,
        low=min(low, mean),
        high=max(high, mean),
        tasks=n,
        trusted=n >= MIN_TASKS,
        method="wilson over tasks",
    )


def t95(df: int) -> float:
    """Student's t quantile for a two-sided 95 % interval with ``df`` degrees
    of freedom (a table to 30, then the Cornish-Fisher expansion)."""
    if df < 1:
        raise ValueError(f"t95 needs df >= 1, got {df}")
    if df <= len(_T95):
        return _T95[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """``a - b`` over the same tasks, with its paired 95 % interval."""

    value: float
    low: float
    high: float
    tasks: int
    trusted: bool
    method: str
    correlation: float | None
    """Pearson correlation of the two strategies' per-task values (``None``
    when either has no spread): what pairing gains."""

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Difference:
    """The mean of per-task differences ``a[i] - b[i]`` (values in [0, 1]).

    With at least ``MIN_TASKS`` tasks and some spread in the differences:
    Student's t over the tasks.  Otherwise a t interval would be too narrow
    (no spread gives [d, d]); the bounded-variance interval is used instead
    (Wilson over the tasks on ``(d + 1) / 2``), flagged as not trusted.
    Raises ``ValueError`` for lengths that differ or no tasks."""
    if len(a) != len(b):
        raise ValueError(f"a paired difference needs the same tasks: {len(a)} vs {len(b)} values")
    if not a:
        raise ValueError("a paired difference needs at least one task")
    n = len(a)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean = math.fsum(diffs) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    rho = correlation(a, b)
    if n >= MIN_TASKS and sd > 0:
        half = t95(n - 1) * sd / math.sqrt(n)
        return Difference(
            value=mean,
            low=max(-1.0, mean - half),
            high=min(1.0, mean + half),
            tasks=n,
            trusted=True,
            method="paired t over tasks",
            correlation=rho,
        )
    low, high = wilson_interval((mean + 1) / 2 * n, n)
    why = "few tasks" if n < MIN_TASKS else "no spread"
    return Difference(
        value=mean,
        low=min(2 * low - 1, mean),
        high=max(2 * high - 1, mean),
        tasks=n,
        trusted=False,
        method=f"bounded variance ({why})",
        correlation=rho,
    )


def correlation(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Pearson correlation; ``None`` when either side has no spread."""
    n = len(a)
    if n < 2 or len(b) != n:
        return None
    ma, mb = math.fsum(a) / n, math.fsum(b) / n
    sa = math.fsum((x - ma) ** 2 for x in a)
    sb = math.fsum((y - mb) ** 2 for y in b)
    if sa == 0 or sb == 0:
        return None
    return math.fsum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True)) / math.sqrt(sa * sb)


def _z_sum(alpha: float, power: float) -> float:
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def tasks_needed(
    p: float, delta: float, *, rho: float = 0.0, alpha: float = 0.05, power: float = 0.8
) -> int:
    """Tasks (one run each, paired) needed to detect a change ``delta`` in
    an accuracy near ``p`` (two-sided ``alpha``, the given ``power``): the
    standard error of a paired difference is about
    ``sqrt(2 p (1-p) (1-rho) / n)``.  Raises ``ValueError`` for a ``delta``
    outside (0, 1] or ``p``/``rho`` out of range."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must lie in (0, 1], got {delta}")
    if not 0 <= p <= 1 or not -1 <= rho <= 1:
        raise ValueError(f"p must lie in [0, 1] and rho in [-1, 1], got {p} and {rho}")
    variance = 2 * p * (1 - p) * (1 - rho)
    return max(1, math.ceil(_z_sum(alpha, power) ** 2 * variance / (delta * delta)))


def runs_needed(
    counts: Sequence[tuple[int, int]],
    delta: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int | None:
    """Runs per task needed to detect a change ``delta`` in mean accuracy
    on *these* tasks (two independent sets of runs), from ``(n, c)`` per
    task: the variance of a task's mean over R runs is p(1-p)/R, estimated
    without bias as c(n-c)/(n(n-1)).  ``None`` when some task has fewer than
    2 runs, or when no task's runs disagree (no within-task variance to
    measure).  Raises ``ValueError`` for a ``delta`` outside (0, 1] or no
    tasks."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must lie in (0, 1], got {delta}")
    if not counts:
        raise ValueError("runs_needed needs at least one task")
    if any(n < 2 for n, _ in counts):
        return None
    t = len(counts)
    within = math.fsum(c * (n - c) / (n * (n - 1)) for n, c in counts) / t
    if within == 0:
        return None
    return max(1, math.ceil(_z_sum(alpha, power) ** 2 * 2 * within / (t * delta * delta)))


__all__ = [
    "MIN_TASKS",
    "Z95",
    "Difference",
    "Estimate",
    "correlation",
    "mean_estimate",
    "paired_difference",
    "pass_at_k",
    "pass_hat_k",
    "runs_needed",
    "t95",
    "tasks_needed",
    "wilson_interval",
]
