"""Routing configuration: pydantic models and the factory that builds policies.

Owns the user-facing shape ``{"policy": "cascade", "tiers": [...], ...}``
(one model per policy, a union discriminated on ``policy``),
``load_routing_config`` (validation with errors that name the key) and
``build_policy`` (config + prices -> a ``RoutingPolicy``).  Unknown policy
names, unknown tier references, tiers without prices and thresholds that do
not match the tiers are ``ConfigError``s.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.routing._policies import (
    ALL_SIGNALS,
    CascadePolicy,
    DifficultyScorer,
    EscalationSignal,
    FixedTierPolicy,
    ProvidedDifficulty,
    RoutingPolicy,
    SignalDifficulty,
    SignalWeights,
    ThresholdPolicy,
    always_large,
    always_small,
)
from agentrt.runtime.routing._tiers import Tier, TierLadder


class TierConfig(BaseModel):
    """One tier: a name policies refer to and the model that serves it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """The tier's name (``small``, ``large``)."""

    model: str = Field(min_length=1)
    """The model name requests are sent with; must be in the price table."""


class _PolicyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tiers: list[TierConfig] = Field(min_length=1)
    """The tiers, cheapest first."""

    degrade_below: float | None = Field(default=0.2, ge=0.0, le=1.0)
    """When the smallest share left of any budget cap falls under this, the
    highest allowed tier drops in proportion; ``None`` disables it."""

    def _tier_names(self) -> list[str]:
        return [t.name for t in self.tiers]

    def _require_tier(self, key: str, name: str | None) -> None:
        if name is not None and name not in self._tier_names():
            raise ValueError(
                f"{key} names unknown tier {name!r}; the tiers are {', '.join(self._tier_names())}"
            )

    @model_validator(mode="after")
    def _unique_tiers(self) -> Self:
        names = self._tier_names()
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate tier names: {', '.join(duplicates)}")
        return self

    def ladder(self, prices: PriceTable) -> TierLadder:
        """The tier ladder with prices attached."""
        return TierLadder(
            [Tier(t.name, t.model) for t in self.tiers],
            prices,
            degrade_below=self.degrade_below,
        )


class AlwaysSmallConfig(_PolicyConfig):
    """Always the cheapest tier (a boundary policy)."""

    policy: Literal["always-small"]
    """Selects this policy."""


class AlwaysLargeConfig(_PolicyConfig):
    """Always the most capable tier (a boundary policy)."""

    policy: Literal["always-large"]
    """Selects this policy."""


class FixedConfig(_PolicyConfig):
    """Always one named tier."""

    policy: Literal["fixed"]
    """Selects this policy."""

    tier: str
    """The tier to use."""

    @model_validator(mode="after")
    def _known_tier(self) -> Self:
        self._require_tier("tier", self.tier)
        return self


class CascadeConfig(_PolicyConfig):
    """Start small, escalate on signals, optionally step back down."""

    policy: Literal["cascade"]
    """Selects this policy."""

    start_tier: str | None = None
    """Tier of the first step; ``None`` = the cheapest."""

    escalate_on: list[EscalationSignal] = list(ALL_SIGNALS)
    """Signals that escalate one tier: ``tool_failed``, ``repeated_action``,
    ``low_confidence``, ``judge_disagreement``."""

    min_mean_logprob: float = -1.0
    """A previous reply whose mean token logprob is below this is
    low-confidence (-1.0 is a perplexity above e, about 2.72)."""

    max_judge_disagreement: float = Field(default=0.5, ge=0.0, le=1.0)
    """Judge disagreement share above which to escalate."""

    deescalate_after: int | None = Field(default=None, ge=1)
    """Step back down after this many steps on a higher tier with no
    signal; ``None`` never de-escalates."""

    @model_validator(mode="after")
    def _known_tier(self) -> Self:
        self._require_tier("start_tier", self.start_tier)
        return self


class ThresholdConfig(_PolicyConfig):
    """Tier by a difficulty score against cut points (RouteLLM-style)."""

    policy: Literal["threshold"]
    """Selects this policy."""

    thresholds: list[float]
    """Increasing cut points in [0, 1], one fewer than tiers."""

    scorer: Literal["signals", "provided"] = "signals"
    """``signals``: a prior plus weighted behaviour signals of the previous
    step (tool failure, repeated action, low token confidence when the agent
    asks for ``logprobs``, judge disagreement, steps taken): what agent
    rollouts have.  ``provided``: a ``difficulty`` value given with each step
    (the offline simulator); agent rollouts supply none, so it needs
    ``fallback_difficulty``."""

    fallback_difficulty: float | None = Field(default=None, ge=0.0, le=1.0)
    """For ``provided``: the score when a step carries no difficulty
    (required: agent rollouts never carry one)."""

    weights: dict[str, float] = {}
    """For ``signals``: overrides of ``SignalWeights`` fields (``prior``,
    ``tool_failed``, ``repeated_action``, ``low_confidence``,
    ``judge_disagreement``, ``per_step``, ``confident_logprob``,
    ``min_mean_logprob``)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if len(self.thresholds) != len(self.tiers) - 1:
            raise ValueError(
                f"{len(self.tiers)} tiers need {len(self.tiers) - 1} thresholds, "
                f"got {len(self.thresholds)}"
            )
        if any(not 0.0 <= t <= 1.0 for t in self.thresholds):
            raise ValueError(f"thresholds must lie in [0, 1], got {self.thresholds}")
        known = set(SignalWeights.__struct_fields__)
        unknown = sorted(set(self.weights) - known)
        if unknown:
            raise ValueError(f"unknown weights {unknown}; known: {', '.join(sorted(known))}")
        merged = SignalWeights(**self.weights)
        if merged.confident_logprob <= merged.min_mean_logprob:
            raise ValueError(
                f"weights.confident_logprob ({merged.confident_logprob}) must be above "
                f"weights.min_mean_logprob ({merged.min_mean_logprob})"
            )
        if self.scorer == "provided" and self.fallback_difficulty is None:
            raise ValueError(
                "scorer 'provided' needs fallback_difficulty: agent rollouts carry no "
                "difficulty value (use scorer 'signals' to route on their signals)"
            )
        return self

    def build_scorer(self) -> DifficultyScorer:
        """The configured difficulty scorer."""
        if self.scorer == "signals":
            return SignalDifficulty(SignalWeights(**self.weights))
        return ProvidedDifficulty(self.fallback_difficulty)


RoutingConfig = Annotated[
    AlwaysSmallConfig | AlwaysLargeConfig | FixedConfig | CascadeConfig | ThresholdConfig,
    Field(discriminator="policy"),
]
"""Any routing policy's configuration, chosen by its ``policy`` key."""

_adapter: TypeAdapter[RoutingConfig] = TypeAdapter(RoutingConfig)


def load_routing_config(data: Mapping[str, Any], *, where: str = "routing") -> RoutingConfig:
    """Validate a routing configuration; ``ConfigError`` lists every problem
    with its key (``routing.tiers.1.model: Field required``)."""
    try:
        return _adapter.validate_python(dict(data))
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in error["loc"] if p not in _TAGS)
            message = error["msg"]
            if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
                loc = "policy"
                known = ", ".join(repr(t) for t in sorted(_TAGS))
                given = data.get("policy")
                message = (
                    f"unknown policy {given!r}; known: {known}"
                    if given is not None
                    else f"missing; one of {known}"
                )
            problems.append(f"{where}{'.' + loc if loc else ''}: {message}")
        raise ConfigError("invalid routing configuration:\n  " + "\n  ".join(problems)) from None


_TAGS = frozenset({"always-small", "always-large", "fixed", "cascade", "threshold"})


def build_policy(
    config: RoutingConfig | Mapping[str, Any], prices: PriceTable, *, name: str | None = None
) -> RoutingPolicy:
    """A routing policy from its configuration (validated if a mapping)."""
    cfg = config if isinstance(config, BaseModel) else load_routing_config(config)
    ladder = cfg.ladder(prices)
    match cfg:
        case AlwaysSmallConfig():
            policy: RoutingPolicy = always_small(ladder)
        case AlwaysLargeConfig():
            policy = always_large(ladder)
        case FixedConfig():
            policy = FixedTierPolicy(ladder, cfg.tier, name=name)
        case CascadeConfig():
            policy = CascadePolicy(
                ladder,
                start_tier=cfg.start_tier,
                escalate_on=cfg.escalate_on,
                min_mean_logprob=cfg.min_mean_logprob,
                max_judge_disagreement=cfg.max_judge_disagreement,
                deescalate_after=cfg.deescalate_after,
                name=name or "cascade",
            )
        case ThresholdConfig():
            policy = ThresholdPolicy(
                ladder, cfg.thresholds, cfg.build_scorer(), name=name or "threshold"
            )
    return policy


__all__ = [
    "AlwaysLargeConfig",
    "AlwaysSmallConfig",
    "CascadeConfig",
    "FixedConfig",
    "RoutingConfig",
    "ThresholdConfig",
    "TierConfig",
    "build_policy",
    "load_routing_config",
]
