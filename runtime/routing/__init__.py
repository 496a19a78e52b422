"""Budget-aware model routing (runtime floor).

Owns the choice of model tier for each step of a rollout: the
``RoutingPolicy`` protocol and its policies (always-small, always-large,
fixed, cascade on signals, threshold on a difficulty score), the budget
rules all of them obey (``TierLadder``), their pydantic configuration, the
signals they read, an offline task simulator and the cost-success frontier
report.  Reads the budget ledger's headroom; never imports agents, tools or
aggregators.
"""

from agentrt.runtime.routing.config import (
    AlwaysLargeConfig,
    AlwaysSmallConfig,
    CascadeConfig,
    FixedConfig,
    RoutingConfig,
    ThresholdConfig,
    TierConfig,
    build_policy,
    load_routing_config,
)
from agentrt.runtime.routing.frontier import (
    PolicyScore,
    evaluate_frontier,
    frontier_main,
    mark_pareto,
    render_table,
)
from agentrt.runtime.routing.policies import (
    CascadePolicy,
    DifficultyScorer,
    FixedTierPolicy,
    ProvidedDifficulty,
    RolloutRouter,
    RoutingPolicy,
    SignalDifficulty,
    SignalWeights,
    ThresholdPolicy,
    always_large,
    always_small,
)
from agentrt.runtime.routing.signals import (
    Signals,
    StepContext,
    mean_logprob,
    perplexity,
    same_action,
    signals_from_step,
)
from agentrt.runtime.routing.simulation import SimProfile, SimTask, SimulatedTaskRunner
from agentrt.runtime.routing.tiers import Tier, TierLadder

__all__ = [
    "AlwaysLargeConfig",
    "AlwaysSmallConfig",
    "CascadeConfig",
    "CascadePolicy",
    "DifficultyScorer",
    "FixedConfig",
    "FixedTierPolicy",
    "PolicyScore",
    "ProvidedDifficulty",
    "RolloutRouter",
    "RoutingConfig",
    "RoutingPolicy",
    "SignalDifficulty",
    "SignalWeights",
    "Signals",
    "SimProfile",
    "SimTask",
    "SimulatedTaskRunner",
    "StepContext",
    "ThresholdConfig",
    "ThresholdPolicy",
    "Tier",
    "TierConfig",
    "TierLadder",
    "always_large",
    "always_small",
    "build_policy",
    "evaluate_frontier",
    "frontier_main",
    "load_routing_config",
    "mark_pareto",
    "mean_logprob",
    "perplexity",
    "render_table",
    "same_action",
    "signals_from_step",
]
