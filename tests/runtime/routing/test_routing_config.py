"""Routing configuration: policies built from config, clear errors otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.routing._routing_config import CascadeConfig, build_policy, load_routing_config
from agentrt.runtime.routing._step_signals import Signals, StepContext

PRICES = PriceTable.model_validate(
    {
        "models": {
            "qwen-small": {"prompt_usd_per_mtok": 0.1, "completion_usd_per_mtok": 0.4},
            "qwen-large": {"prompt_usd_per_mtok": 2, "completion_usd_per_mtok": 8},
        }
    }
)
TIERS = [{"name": "small", "model": "qwen-small"}, {"name": "large", "model": "qwen-large"}]


def step(**signals: Any) -> StepContext:
    return StepContext(step_index=1, signals=Signals(**signals), prompt_tokens=10, max_tokens=10)


@pytest.mark.parametrize(
    ("config", "calm_tier", "alarmed_tier"),
    [
        ({"policy": "always-small"}, "small", "small"),
        ({"policy": "always-large"}, "large", "large"),
        ({"policy": "fixed", "tier": "large"}, "large", "large"),
        ({"policy": "cascade"}, "small", "large"),
        ({"policy": "threshold", "thresholds": [0.5], "scorer": "signals"}, "small", "large"),
    ],
)
def test_each_policy_builds_from_config(
    config: dict[str, Any], calm_tier: str, alarmed_tier: str
) -> None:
    policy = build_policy({**config, "tiers": TIERS}, PRICES)
    calm = policy.route(step())
    alarmed = policy.route(step(last_tool_failed=True, repeated_action=True))
    assert (calm.tier, alarmed.tier) == (calm_tier, alarmed_tier)
    assert calm.policy == policy.name


def test_cascade_options_reach_the_policy() -> None:
    config = load_routing_config(
        {
            "policy": "cascade",
            "tiers": TIERS,
            "escalate_on": ["low_confidence"],
            "min_mean_logprob": -0.5,
        }
    )
    assert isinstance(config, CascadeConfig)
    policy = build_policy(config, PRICES)
    assert policy.route(step(last_tool_failed=True)).tier == "small"
    assert policy.route(step(mean_logprob=-0.6)).tier == "large"


def errors_of(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        build_policy(config, PRICES)
    return str(info.value)


def test_unknown_policy_name_lists_the_known_ones() -> None:
    message = errors_of({"policy": "random", "tiers": TIERS})
    assert "routing.policy: unknown policy 'random'; known: " in message
    for known in ("'always-small'", "'always-large'", "'cascade'", "'threshold'", "'fixed'"):
        assert known in message
    assert "routing.policy: missing; one of " in errors_of({"tiers": TIERS})


def test_unknown_tier_references_are_named() -> None:
    message = errors_of({"policy": "cascade", "tiers": TIERS, "start_tier": "medium"})
    assert "start_tier names unknown tier 'medium'; the tiers are small, large" in message
    message = errors_of({"policy": "fixed", "tiers": TIERS, "tier": "xl"})
    assert "unknown tier 'xl'" in message


def test_malformed_configs_name_the_key() -> None:
    assert "routing.tiers.1.model: Field required" in errors_of(
        {"policy": "always-small", "tiers": [TIERS[0], {"name": "large"}]}
    )
    assert "routing.escalate_onn: Extra inputs are not permitted" in errors_of(
        {"policy": "cascade", "tiers": TIERS, "escalate_onn": []}
    )
    assert "2 tiers need 1 thresholds, got 2" in errors_of(
        {"policy": "threshold", "tiers": TIERS, "thresholds": [0.3, 0.6]}
    )
    assert "unknown weights ['tool_fail']" in errors_of(
        {
            "policy": "threshold",
            "tiers": TIERS,
            "thresholds": [0.5],
            "scorer": "signals",
            "weights": {"tool_fail": 1.0},
        }
    )
    assert "duplicate tier names: small" in errors_of(
        {"policy": "always-small", "tiers": [TIERS[0], TIERS[0]]}
    )
    assert "routing.degrade_below" in errors_of(
        {"policy": "always-small", "tiers": TIERS, "degrade_below": 2}
    )


def test_tiers_need_prices_and_cost_order() -> None:
    message = errors_of({"policy": "cascade", "tiers": [*TIERS, {"name": "xl", "model": "gpt-9"}]})
    assert "tier 'xl': no price for model 'gpt-9'" in message
    assert "routing.tiers" in message
    message = errors_of({"policy": "cascade", "tiers": list(reversed(TIERS))})
    assert "tiers must be listed cheapest first" in message
