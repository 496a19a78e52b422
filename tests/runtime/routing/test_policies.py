"""Routing policies: each one's choice and reason on crafted inputs."""

from __future__ import annotations

import pytest

from agentrt.runtime.kernel._errors import ConfigError, InvalidRequestError
from agentrt.runtime.routing._policies import (
    CascadePolicy,
    ProvidedDifficulty,
    RolloutRouter,
    SignalDifficulty,
    ThresholdPolicy,
    always_large,
    always_small,
)
from agentrt.runtime.routing._step_signals import Signals, StepContext
from agentrt.runtime.routing._tiers import TierLadder
from tests.runtime.routing._priced_tiers import PRICES, TIERS

TWO = TierLadder([TIERS[0], TIERS[2]], PRICES)
THREE = TierLadder(TIERS, PRICES)


def ctx(
    step: int = 0, previous: str | None = None, on_tier: int = 0, **signals: object
) -> StepContext:
    return StepContext(
        step_index=step,
        signals=Signals(**signals),  # type: ignore[arg-type]
        prompt_tokens=1000,
        max_tokens=500,
        previous_tier=previous,
        steps_on_tier=on_tier,
    )


def test_boundary_policies_pick_their_tier_and_say_so() -> None:
    small = always_small(TWO).route(ctx(step=2))
    assert (small.tier, small.model, small.policy) == ("small", "m-small", "always-small")
    assert small.reason == "always-small: small (m-small) at step 2"
    large = always_large(TWO).route(ctx(step=2, last_tool_failed=True))
    assert (large.tier, large.model) == ("large", "m-large")
    assert "always-large: large (m-large)" in large.reason


def test_cascade_starts_small_and_stays_without_signals() -> None:
    policy = CascadePolicy(TWO)
    first = policy.route(ctx())
    assert first.tier == "small"
    assert first.reason.startswith("started on small at step 0")
    calm = policy.route(ctx(step=1, previous="small", on_tier=1, mean_logprob=-0.3))
    assert calm.tier == "small"
    assert calm.reason == "stayed on small at step 1: no escalation signal"


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ({"last_tool_failed": True}, "tool call failed at step 2"),
        ({"repeated_action": True}, "repeated action at step 2"),
        (
            {"mean_logprob": -1.5},
            "low confidence at step 2 (mean logprob -1.50 < -1.00, perplexity 4.5)",
        ),
        ({"judge_disagreement": 0.75}, "judges disagree (0.75 > 0.50)"),
    ],
)
def test_cascade_escalates_on_each_signal_with_a_specific_reason(
    signals: dict[str, object], expected: str
) -> None:
    decision = CascadePolicy(TWO).route(ctx(step=3, previous="small", on_tier=3, **signals))
    assert decision.tier == "large"
    assert decision.model == "m-large"
    assert decision.reason == f"escalated from small to large at step 3: {expected}"


def test_cascade_below_thresholds_does_not_escalate() -> None:
    policy = CascadePolicy(TWO)
    assert policy.route(ctx(step=1, previous="small", mean_logprob=-0.9)).tier == "small"
    assert policy.route(ctx(step=1, previous="small", judge_disagreement=0.5)).tier == "small"


def test_cascade_escalates_one_tier_at_a_time_and_reports_the_top() -> None:
    policy = CascadePolicy(THREE)
    up = policy.route(ctx(step=1, previous="small", last_tool_failed=True))
    assert up.tier == "mid"
    up = policy.route(ctx(step=2, previous="mid", last_tool_failed=True, repeated_action=True))
    assert up.tier == "large"
    assert up.reason.endswith("tool call failed at step 1; repeated action at step 1")
    top = policy.route(ctx(step=3, previous="large", last_tool_failed=True))
    assert top.tier == "large"
    assert top.reason.startswith("stayed on large (highest tier) at step 3")


def test_cascade_respects_enabled_signals_start_tier_and_deescalates() -> None:
    only_tools = CascadePolicy(TWO, escalate_on=["tool_failed"])
    assert only_tools.route(ctx(step=1, previous="small", repeated_action=True)).tier == "small"

    policy = CascadePolicy(THREE, start_tier="mid", deescalate_after=2)
    assert policy.route(ctx()).tier == "mid"
    stays = policy.route(ctx(step=4, previous="large", on_tier=1))
    assert stays.tier == "large"
    down = policy.route(ctx(step=5, previous="large", on_tier=2))
    assert down.tier == "mid"
    assert down.reason == (
        "de-escalated from large to mid at step 5: 2 steps on large and no escalation signal"
    )
    # Never below the start tier, and never while a signal fires.
    assert policy.route(ctx(step=6, previous="mid", on_tier=9)).tier == "mid"
    assert policy.route(ctx(step=6, previous="large", on_tier=9, last_tool_failed=True)).tier == (
        "large"
    )


def test_cascade_rejects_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="unknown escalation signals"):
        CascadePolicy(TWO, escalate_on=["vibes"])  # type: ignore[list-item]
    with pytest.raises(
        InvalidRequestError, match="unknown tier 'huge'; the tiers are small, large"
    ):
        CascadePolicy(TWO).route(ctx(step=1, previous="huge"))


def test_threshold_routes_by_provided_difficulty() -> None:
    policy = ThresholdPolicy(TWO, [0.6], ProvidedDifficulty())
    hard = policy.route(ctx(step=4, difficulty=0.72))
    assert hard.tier == "large"
    assert hard.reason == "difficulty 0.72 (scorer provided) >= 0.60: large at step 4"
    easy = policy.route(ctx(difficulty=0.6 - 1e-9))
    assert easy.tier == "small"
    assert easy.reason.startswith("difficulty 0.60 (scorer provided) < 0.60: small")
    assert policy.route(ctx(difficulty=0.6)).tier == "large"
    with pytest.raises(InvalidRequestError, match=r"needs signals\.difficulty"):
        policy.route(ctx(step=2))
    fallback = ThresholdPolicy(TWO, [0.6], ProvidedDifficulty(fallback=0.9))
    assert fallback.route(ctx()).tier == "large"


def test_threshold_with_three_tiers_and_signal_scorer() -> None:
    policy = ThresholdPolicy(THREE, [0.4, 0.7], SignalDifficulty())
    assert policy.route(ctx()).tier == "small"  # prior 0.3
    mid = policy.route(ctx(last_tool_failed=True))  # 0.6
    assert mid.tier == "mid"
    assert ">= 0.40 and < 0.70" in mid.reason
    assert policy.route(ctx(last_tool_failed=True, mean_logprob=-2.0)).tier == "large"
    assert policy.route(ctx(difficulty=0.1, judge_disagreement=1.0)).tier == "mid"  # 0.5


def test_threshold_rejects_inconsistent_cut_points() -> None:
    with pytest.raises(ConfigError, match="3 tiers need 2 thresholds, got 1"):
        ThresholdPolicy(THREE, [0.5], ProvidedDifficulty())
    with pytest.raises(ConfigError, match="thresholds must increase"):
        ThresholdPolicy(THREE, [0.7, 0.4], ProvidedDifficulty())


def test_rollout_router_carries_the_tier_history() -> None:
    router = RolloutRouter(CascadePolicy(TWO, deescalate_after=2))
    seen = []
    plan = [
        Signals(),
        Signals(last_tool_failed=True),
        Signals(),
        Signals(),
        Signals(),
    ]
    for step, signals in enumerate(plan):
        decision = router.route(step, signals, prompt_tokens=100, max_tokens=100)
        seen.append(decision.tier)
    # escalate at 1, two steps on large (1, 2), back down at 3.
    assert seen == ["small", "large", "large", "small", "small"]
