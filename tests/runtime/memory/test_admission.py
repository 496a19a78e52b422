"""Admission: novel verified facts in, near-duplicates and floods out."""

from __future__ import annotations

import pytest

from agentrt.runtime.memory import (
    AdmissionConfig,
    Candidate,
    MemoryBank,
    MemoryView,
    ScoredAdmission,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fact(key: str, *, verified: bool = True, rollout: str = "r0", value: str = "") -> Candidate:
    return Candidate(
        key=key,
        value=value or f"the full text behind: {key}",
        verified=verified,
        rollout_id=rollout,
    )


def test_a_novel_verified_fact_is_admitted_with_a_high_score() -> None:
    policy = ScoredAdmission()
    decision = policy.decide(fact("boiling point of water is 100 C"), ["capital of France"])
    assert decision.admitted
    assert decision.score == pytest.approx(1.0)
    assert decision.novelty == pytest.approx(1.0)


def test_a_near_duplicate_is_rejected() -> None:
    policy = ScoredAdmission()
    decision = policy.decide(
        fact("Boiling point of water is 100 C!"), ["boiling point of water is 100 C"]
    )
    assert not decision.admitted
    assert "near-duplicate" in decision.reason


def test_an_unverified_claim_needs_novelty_and_length_to_pass() -> None:
    policy = ScoredAdmission(AdmissionConfig(threshold=0.55))
    assert policy.decide(fact("a guess about zinc", verified=False), []).admitted
    # Half-similar and unverified: novelty 0.5 -> 0.25 + 0.1 < 0.55.
    half = policy.decide(fact("a guess about zinc", verified=False), ["a guess about copper"])
    assert not half.admitted
    assert "below threshold" in half.reason
    assert not policy.decide(fact("x", value=" "), []).admitted


def test_admissions_are_rate_limited_per_rollout() -> None:
    clock = Clock()
    policy = ScoredAdmission(AdmissionConfig(max_per_window=2, window_s=10.0), clock=clock)
    assert policy.decide(fact("first fact", rollout="r0"), []).admitted
    assert policy.decide(fact("second fact", rollout="r0"), []).admitted
    limited = policy.decide(fact("third fact", rollout="r0"), [])
    assert not limited.admitted
    assert "rate limit" in limited.reason
    assert policy.decide(fact("third fact", rollout="r1"), []).admitted
    clock.now += 10.5
    assert policy.decide(fact("third fact", rollout="r0"), []).admitted


@pytest.mark.anyio
async def test_the_view_finds_neighbours_in_the_bank_before_deciding() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-1")
        first, first_id = await view.offer(fact("melting point of zinc is 420 C"))
        again, again_id = await view.offer(fact("the melting point of zinc is 420 C"))
        other, other_id = await view.offer(fact("density of gold is 19.3 g/cm3"))
        assert first.admitted
        assert first_id is not None
        assert not again.admitted
        assert again_id is None
        assert other.admitted
        assert other_id is not None
        stored = await bank.get(first_id, view.owners)
        assert stored is not None
        assert stored.score == pytest.approx(first.score + 0.1)
        assert (view.offered, view.admitted) == (3, 2)
