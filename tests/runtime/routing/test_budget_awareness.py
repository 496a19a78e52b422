"""Every routing policy obeys the budget: fit, degrade, refuse."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.protocols import Budget, RoutingDecision, Usage
from agentrt.runtime.budget._ledger import BudgetLedger, Headroom
from agentrt.runtime.kernel._errors import BudgetExceeded
from agentrt.runtime.routing._policies import (
    CascadePolicy,
    FixedTierPolicy,
    ProvidedDifficulty,
    RolloutRouter,
    RoutingPolicy,
    ThresholdPolicy,
    always_large,
    always_small,
)
from agentrt.runtime.routing._step_signals import Signals, StepContext
from agentrt.runtime.routing._tiers import TierLadder
from tests.runtime.routing._priced_tiers import PRICES, TIERS

TWO = TierLadder([TIERS[0], TIERS[2]], PRICES)
THREE = TierLadder(TIERS, PRICES, degrade_below=0.3)

# 1000 prompt + 500 completion tokens: small $0.0003, mid $0.003, large $0.0105
LARGE_PICO = 1000 * 3_000_000 + 500 * 15_000_000
SMALL_PICO = 1000 * 100_000 + 500 * 400_000


def ctx(headroom: Headroom, **signals: object) -> StepContext:
    return StepContext(
        step_index=3,
        signals=Signals(**signals),  # type: ignore[arg-type]
        headroom=headroom,
        prompt_tokens=1000,
        max_tokens=500,
        previous_tier="small",
    )


def test_downgrades_to_the_tier_whose_worst_case_fits() -> None:
    room = Headroom(pico=LARGE_PICO - 1, fraction=0.9)
    decision = always_large(TWO).route(ctx(room))
    assert decision.tier == "small"
    assert decision.reason == (
        "always-large: large (m-large) at step 3; downgraded from large to small: "
        "its worst case $0.010500 exceeds the $0.010500 left (max_usd)"
    )
    assert decision.budget_left_usd == pytest.approx((LARGE_PICO - 1) / 1e12)
    exact = always_large(TWO).route(ctx(Headroom(pico=LARGE_PICO, fraction=0.9)))
    assert exact.tier == "large"


def test_token_headroom_binds_every_tier_alike() -> None:
    fits = always_large(TWO).route(ctx(Headroom(tokens=1500, fraction=0.9)))
    assert fits.tier == "large"
    assert fits.budget_left_tokens == 1500
    with pytest.raises(BudgetExceeded) as info:
        always_large(TWO).route(ctx(Headroom(tokens=1499, fraction=0.9)))
    assert info.value.limit == "max_tokens"
    assert "needs 1,500 tokens and only 1,499 tokens is left" in str(info.value)


def test_raises_when_even_the_cheapest_tier_does_not_fit() -> None:
    for policy in (always_small(TWO), always_large(TWO), CascadePolicy(TWO)):
        with pytest.raises(BudgetExceeded) as info:
            policy.route(ctx(Headroom(pico=SMALL_PICO - 1, fraction=0.01)))
        assert info.value.limit == "max_usd"
        message = str(info.value)
        assert "no tier fits the budget at step 3" in message
        assert "small (m-small), needs $0.000300" in message
    with pytest.raises(BudgetExceeded) as calls:
        always_small(TWO).route(ctx(Headroom(calls=0)))
    assert calls.value.limit == "max_model_calls"


def test_degrades_as_the_budget_drains() -> None:
    policy = always_large(THREE)  # degrade_below = 0.3
    ample = Headroom(pico=10**12)
    tiers = [
        policy.route(ctx(msgspec_replace(ample, fraction=f))).tier
        for f in (0.9, 0.3, 0.29, 0.15, 0.149, 0.0)
    ]
    assert tiers == ["large", "large", "mid", "mid", "small", "small"]
    reason = policy.route(ctx(msgspec_replace(ample, fraction=0.2))).reason
    assert reason.endswith("degraded from large to mid: 20% of the budget left (< 30%)")
    two = always_large(TWO)  # degrade_below = 0.2 (default): two tiers -> small below
    assert two.route(ctx(msgspec_replace(ample, fraction=0.19))).tier == "small"
    no_degrade = always_large(TierLadder([TIERS[0], TIERS[2]], PRICES, degrade_below=None))
    assert no_degrade.route(ctx(msgspec_replace(ample, fraction=0.01))).tier == "large"


def msgspec_replace(room: Headroom, **changes: object) -> Headroom:
    return msgspec.structs.replace(room, **changes)


POLICIES: list[RoutingPolicy] = [
    always_small(THREE),
    always_large(THREE),
    FixedTierPolicy(THREE, "mid"),
    CascadePolicy(THREE),
    ThresholdPolicy(THREE, [0.3, 0.6], ProvidedDifficulty()),
]


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(POLICIES),
    pico=st.one_of(st.none(), st.integers(0, 2 * LARGE_PICO)),
    tokens=st.one_of(st.none(), st.integers(0, 3000)),
    fraction=st.one_of(st.none(), st.floats(0, 1)),
    prompt=st.integers(0, 4000),
    max_tokens=st.integers(1, 2000),
    failed=st.booleans(),
    difficulty=st.floats(0, 1),
    previous=st.sampled_from([None, "small", "mid", "large"]),
)
def test_never_picks_a_tier_whose_worst_case_exceeds_the_headroom(
    *,
    policy: RoutingPolicy,
    pico: int | None,
    tokens: int | None,
    fraction: float | None,
    prompt: int,
    max_tokens: int,
    failed: bool,
    difficulty: float,
    previous: str | None,
) -> None:
    context = StepContext(
        step_index=1,
        signals=Signals(last_tool_failed=failed, difficulty=difficulty),
        headroom=Headroom(pico=pico, tokens=tokens, fraction=fraction),
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        previous_tier=previous,
    )
    ladder = policy.ladder
    fits = [
        ladder.worst_case(i, context)
        for i in range(len(ladder))
        if context.headroom.shortfall(*ladder.worst_case(i, context)) is None
    ]
    try:
        decision = policy.route(context)
    except BudgetExceeded:
        # Only when not even the cheapest tier fits (tiers are ordered by cost).
        assert context.headroom.shortfall(*ladder.worst_case(0, context)) is not None
        return
    assert fits
    chosen = ladder.index(decision.tier)
    need_tokens, need_pico = ladder.worst_case(chosen, context)
    assert tokens is None or need_tokens <= tokens
    assert pico is None or need_pico <= pico
    assert chosen <= ladder.ceiling(context)


def test_router_on_a_draining_ledger_degrades_then_stops_within_the_cap() -> None:
    ledger = BudgetLedger("task", Budget(max_usd=0.1), PRICES)
    router = RolloutRouter(always_large(TWO))
    decisions: list[RoutingDecision] = []

    def drain() -> None:
        for step in range(10_000):
            decision, reservation = router.reserve(ledger, step, prompt_tokens=1000, max_tokens=500)
            decisions.append(decision)
            reservation.charge(Usage(prompt_tokens=1000, completion_tokens=400))

    with pytest.raises(BudgetExceeded):
        drain()
    tiers = [d.tier for d in decisions]
    first_small = tiers.index("small")
    assert first_small > 0
    assert set(tiers[:first_small]) == {"large"}
    assert set(tiers[first_small:]) == {"small"}  # never back up as it drains
    assert "degraded from large to small" in decisions[first_small].reason
    # Degraded while at least one large call would still have fitted.
    left_usd = decisions[first_small].budget_left_usd
    assert left_usd is not None
    assert left_usd > LARGE_PICO / 1e12
    snap = ledger.snapshot()
    assert snap.spent_pico <= 10**11
    assert snap.spent_pico + SMALL_PICO > 10**11  # it stopped only when nothing fit


class GreedyFirst:
    """A policy that, once, ignores the budget (as if another rollout took
    the headroom between routing and reserving)."""

    name = "greedy-first"

    def __init__(self, ladder: TierLadder) -> None:
        self.ladder = ladder
        self.calls = 0

    def route(self, ctx: StepContext) -> RoutingDecision:
        self.calls += 1
        if self.calls == 1:
            return RoutingDecision(model="m-large", policy=self.name, reason="greedy", tier="large")
        return always_small(self.ladder).route(ctx)


def test_router_reserve_reroutes_when_the_reservation_is_refused() -> None:
    ledger = BudgetLedger("task", Budget(max_usd=0.005), PRICES)
    policy = GreedyFirst(TWO)
    router = RolloutRouter(policy)
    decision, reservation = router.reserve(ledger, 0, prompt_tokens=1000, max_tokens=500)
    assert decision.tier == "small"
    assert policy.calls == 2
    assert reservation.pico == SMALL_PICO
