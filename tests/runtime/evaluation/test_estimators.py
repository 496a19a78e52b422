"""The estimators: exact pass@k / pass^k, one Wilson interval, intervals that
stay honest with few tasks, the paired difference and the power calculation."""

from __future__ import annotations

import itertools
import math
import random
from statistics import NormalDist

import pytest

from agentrt.runtime.evaluation._estimators import (
    MIN_TASKS,
    mean_estimate,
    paired_difference,
    pass_at_k,
    pass_hat_k,
    runs_needed,
    t95,
    tasks_needed,
    wilson_interval,
)


def brute(n: int, c: int, k: int, *, every: bool) -> float:
    """Over all k-subsets of n runs (c passing), the share where any / every run passes."""
    runs = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(runs, k))
    return sum((all(s) if every else any(s)) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 2), (10, 3, 1), (10, 3, 5), (8, 8, 3), (6, 0, 2)])
def test_pass_at_k_and_pass_hat_k_match_enumeration(n: int, c: int, k: int) -> None:
    assert math.isclose(pass_at_k(n, c, k), brute(n, c, k, every=False))
    assert math.isclose(pass_hat_k(n, c, k), brute(n, c, k, every=True))
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(3, 1, 4)


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.490, abs=1e-3)
    assert hi == pytest.approx(0.943, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_three_tasks_all_right_are_not_certain() -> None:
    # The percentile bootstrap said [1.00, 1.00] here.
    est = mean_estimate([1.0, 1.0, 1.0])
    assert est.value == 1.0
    assert est.high == 1.0
    assert est.low < 0.5
    assert not est.trusted
    assert mean_estimate([0.5] * MIN_TASKS).trusted
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mean_estimate([1.5])


def test_the_interval_over_tasks_covers_the_mean() -> None:
    # Tasks of varying difficulty, 4 runs each: the 95 % interval of the mean
    # of per-task pass rates covers the true mean at least 93 % of the time.
    rng = random.Random(7)
    difficulty = [rng.random() for _ in range(2000)]
    truth = sum(difficulty) / len(difficulty)
    covered = 0
    trials = 400
    for _ in range(trials):
        tasks = rng.sample(difficulty, 12)
        values = [sum(rng.random() < p for _ in range(4)) / 4 for p in tasks]
        est = mean_estimate(values)
        covered += est.low <= truth <= est.high
    assert covered / trials >= 0.93


def test_paired_difference() -> None:
    a = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    b = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    d = paired_difference(a, b)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean = sum(diffs) / 12
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 11)
    assert d.value == pytest.approx(mean)
    assert d.high - d.value == pytest.approx(t95(11) * sd / math.sqrt(12))
    assert d.trusted
    assert d.significant
    assert d.correlation is not None
    assert d.correlation > 0
    few = paired_difference([1.0, 1.0, 1.0], [0.0, 1.0, 1.0])
    assert not few.trusted
    assert few.low < 0 < few.high
    assert "few tasks" in few.method
    same = paired_difference([1.0] * 12, [1.0] * 12)
    assert not same.trusted  # no spread: [0, 0] would claim certainty
    assert same.low < 0 < same.high
    with pytest.raises(ValueError, match="same tasks"):
        paired_difference([1.0], [1.0, 0.0])


def test_t95_table_and_expansion_agree() -> None:
    assert t95(1) == 12.706
    assert t95(30) == pytest.approx(2.042)
    assert t95(31) == pytest.approx(2.040, abs=2e-3)
    assert t95(1000) == pytest.approx(1.962, abs=1e-3)


def test_power() -> None:
    z2 = (NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)) ** 2  # 7.849
    assert tasks_needed(0.5, 0.02) == math.ceil(z2 * 2 * 0.25 / 0.02**2) == 9812
    assert tasks_needed(0.5, 0.02, rho=0.5) == math.ceil(z2 * 0.25 / 0.02**2)
    # On 100 tasks right 2 of 4 times: within-task variance 2*2/(4*3) per run.
    assert runs_needed([(4, 2)] * 100, 0.02) == math.ceil(z2 * 2 * (4 / 12) / (100 * 0.02**2))
    assert runs_needed([(1, 1)] * 5, 0.02) is None
    assert runs_needed([(4, 4), (4, 0)] * 5, 0.02) is None  # no task's runs disagree
    with pytest.raises(ValueError, match="delta"):
        tasks_needed(0.5, 0)
