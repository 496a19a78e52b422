"""Admission: novel verified facts in, near-duplicates and floods out."""

from __future__ import annotations

import pytest

from agentrt.runtime.memory._admission import AdmissionConfig, Candidate, ScoredAdmission
from agentrt.runtime.memory._bank import MemoryBank
from agentrt.runtime.memory._view import MemoryView


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


# -- a scored admission that can say no -----------------------------------------


def test_failures_and_empty_answers_are_refused_even_when_verified() -> None:
    policy = ScoredAdmission()
    for value in ("Error: connection refused", "Traceback (most recent call last):", "No results"):
        decision = policy.decide(fact("search(q=zinc price)", value=value), [])
        assert not decision.admitted, value
        assert "looks like a failure or an empty answer" in decision.reason


def test_values_that_say_too_little_or_are_not_text_are_refused() -> None:
    policy = ScoredAdmission()
    thin = policy.decide(fact("status check", value="ok"), [])
    assert not thin.admitted
    assert "says too little (information 0.17 < 0.30)" in thin.reason
    binary = policy.decide(fact("raw bytes", value="\x00\x01\x02\x03 zinc \x04\x05\x06\x07"), [])
    assert not binary.admitted
    assert binary.reason.startswith("not text")


def test_the_same_finding_passes_as_a_verified_result_but_not_as_a_half_new_claim() -> None:
    """The score decides between candidates the gates let through: a tool
    result close to a stored key (novelty 0.5) is admitted, the same text as
    the model's own claim is not; a fully new claim is."""
    policy = ScoredAdmission()
    value = "Zinc melts at 419.5 C and boils at 907 C according to the CRC handbook"
    stored = ["zinc melting point copper"]
    verified = policy.decide(fact("zinc melting point", value=value), stored)
    claim = policy.decide(fact("zinc melting point", value=value, verified=False), stored)
    new_claim = policy.decide(fact("zinc boiling point", value=value, verified=False), [])
    assert verified.admitted
    assert verified.novelty == pytest.approx(1 - 3 / 4)  # 3 of 4 shared words
    assert not claim.admitted
    assert "below threshold 0.65 (unverified claim, novelty 0.25" in claim.reason
    assert new_claim.admitted
    assert new_claim.score == pytest.approx(0.35 + 0.25 + 0.1)


def test_admission_is_configurable_and_bad_patterns_are_named() -> None:
    lenient = ScoredAdmission(AdmissionConfig(reject_patterns=[], min_information=0.0))
    assert lenient.decide(fact("search(zinc)", value="No results"), []).admitted
    with pytest.raises(ValueError, match=r"reject_patterns\[1\] '\(': "):
        AdmissionConfig(reject_patterns=["^ok$", "("])
