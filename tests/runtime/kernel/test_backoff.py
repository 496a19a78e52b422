"""The one restart-with-backoff policy: delays, the reset, giving up."""

from __future__ import annotations

import pytest

from agentrt.runtime.kernel._backoff import Backoff, RestartBackoff

pytestmark = pytest.mark.uvloop


def test_delays_grow_exponentially_up_to_the_cap() -> None:
    policy = Backoff(initial_s=0.5, multiplier=2.0, max_s=3.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    # Far past the cap, the power must not overflow.
    assert policy.delay(100_000) == 3.0
    assert Backoff(initial_s=1.0, multiplier=1.0, max_s=9.0).delay(50) == 1.0


def test_jitter_adds_at_most_its_fraction() -> None:
    policy = Backoff(initial_s=2.0, max_s=10.0, jitter=0.25)
    assert policy.delay(1, 0.0) == 2.0
    assert policy.delay(1, 0.5) == 2.25
    assert policy.delay(4, 0.999) == pytest.approx(10.0 * 1.24975)


def test_crashes_in_a_row_back_off_and_a_healthy_stretch_resets_them() -> None:
    backoff = RestartBackoff(
        Backoff(initial_s=1.0, multiplier=3.0, max_s=100.0, reset_after_s=10.0), rand=lambda: 0.0
    )
    assert backoff.crashed(healthy_for=0.1) == 1.0
    assert backoff.crashed(healthy_for=9.9) == 3.0
    assert backoff.crashed(healthy_for=0.0) == 9.0
    assert backoff.crashes == 3
    # Ten healthy seconds: this crash is the first in a row again.
    assert backoff.crashed(healthy_for=10.0) == 1.0
    assert (backoff.crashes, backoff.restarts) == (1, 4)
    backoff.reset()
    assert backoff.crashed(healthy_for=0.0) == 1.0


def test_more_crashes_in_a_row_than_allowed_give_up() -> None:
    backoff = RestartBackoff(Backoff(initial_s=0.0, max_restarts=2, reset_after_s=5.0))
    assert backoff.crashed(0.0) == 0.0
    assert backoff.crashed(0.0) == 0.0
    assert backoff.crashed(0.0) is None
    assert backoff.limit_reason() == "3 crashes in a row, limit 2 restarts"
    assert backoff.restarts == 2
    # Still given up until something resets the count.
    assert backoff.crashed(4.9) is None
    assert backoff.crashed(5.0) == 0.0


def test_no_restarts_at_all() -> None:
    backoff = RestartBackoff(Backoff(max_restarts=0))
    assert backoff.crashed(1000.0) is None
    assert backoff.limit_reason() == "restarts are off"


def test_no_limit_never_gives_up() -> None:
    backoff = RestartBackoff(Backoff(initial_s=0.01, max_s=0.02))
    assert all(backoff.crashed(0.0) is not None for _ in range(10_000))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"initial_s": -1.0}, "initial_s=-1.0"),
        ({"multiplier": 0.5}, "multiplier=0.5"),
        ({"jitter": 1.5}, "jitter=1.5"),
        ({"max_s": float("nan")}, "max_s=nan"),
        ({"max_restarts": -1}, "max_restarts=-1"),
        ({"reset_after_s": -0.1}, "reset_after_s=-0.1"),
    ],
)
def test_bad_values_are_refused_by_name(options: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=f"invalid backoff: {named}"):
        Backoff(**options)  # type: ignore[arg-type]


def test_counting_starts_at_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        Backoff().delay(0)
