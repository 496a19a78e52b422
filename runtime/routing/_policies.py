"""Routing policies: which model tier serves the next step, and why.  Owns the
``RoutingPolicy`` protocol and its implementations (fixed tier, cascade,
difficulty threshold), the ``DifficultyScorer`` protocol with two scorers,
and ``RolloutRouter``.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from typing import Literal, Protocol, final, runtime_checkable

import msgspec

from agentrt.protocols._trajectory import RoutingDecision
from agentrt.runtime.budget._ledger import BudgetLedger, Headroom, Reservation
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError, InvalidRequestError
from agentrt.runtime.routing._step_signals import (
    NO_SIGNALS,
    UNCAPPED,
    Signals,
    StepContext,
    perplexity,
)
from agentrt.runtime.routing._tiers import TierLadder

EscalationSignal = Literal["tool_failed", "repeated_action", "low_confidence", "judge_disagreement"]
ALL_SIGNALS: tuple[EscalationSignal, ...] = (
    "tool_failed",
    "repeated_action",
    "low_confidence",
    "judge_disagreement",
)


@runtime_checkable
class RoutingPolicy(Protocol):
    """Chooses the model for one step.  A pure function of the
    ``StepContext`` (the rollout's history travels in it), so one policy
    serves any number of parallel rollouts; every policy hands its wish to
    ``TierLadder.decide``, which applies the budget rules.  A policy that
    never reads ``ctx.signals`` may say so with a ``reads_signals = False``
    attribute: a rollout nobody else reads signals for then skips them."""

    @property
    def name(self) -> str:
        """The policy's name as recorded in ``RoutingDecision.policy``."""
        ...

    @property
    def ladder(self) -> TierLadder:
        """The tiers it chooses from."""
        ...

    def route(self, ctx: StepContext) -> RoutingDecision:
        """The decision for ``ctx``; ``BudgetExceeded`` if no tier fits."""
        ...


class _LadderPolicy:
    """The part of a ``RoutingPolicy`` every policy here shares: its name
    and the tiers it chooses from, read-only once built."""

    def __init__(self, ladder: TierLadder, name: str) -> None:
        self._ladder = ladder
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def ladder(self) -> TierLadder:
        return self._ladder


@final
class FixedTierPolicy(_LadderPolicy):
    """Always the same tier (budget permitting).  ``always_small`` and
    ``always_large`` build the two boundary policies of the frontier."""

    reads_signals = False
    """The tier is fixed: no signal changes it (see ``RoutingPolicy``)."""

    def __init__(self, ladder: TierLadder, tier: str, *, name: str | None = None) -> None:
        super().__init__(ladder, name or f"always-{tier}")
        self._wanted = ladder.index(tier)

    def route(self, ctx: StepContext) -> RoutingDecision:
        tier = self._ladder.tiers[self._wanted]
        reason = f"{self._name}: {tier.name} ({tier.model}) at step {ctx.step_index}"
        return self._ladder.decide(self._name, self._wanted, reason, ctx)


def always_small(ladder: TierLadder) -> FixedTierPolicy:
    """The cheapest tier for every step."""
    return FixedTierPolicy(ladder, ladder.tiers[0].name, name="always-small")


def always_large(ladder: TierLadder) -> FixedTierPolicy:
    """The most capable tier for every step."""
    return FixedTierPolicy(ladder, ladder.tiers[-1].name, name="always-large")


@final
class CascadePolicy(_LadderPolicy):
    """Start on ``start_tier``; escalate one tier whenever an enabled signal
    fires; optionally step back down after ``deescalate_after`` steps on a
    higher tier whose latest signals are clear."""

    def __init__(
        self,
        ladder: TierLadder,
        *,
        start_tier: str | None = None,
        escalate_on: Sequence[EscalationSignal] = ALL_SIGNALS,
        min_mean_logprob: float = -1.0,
        max_judge_disagreement: float = 0.5,
        deescalate_after: int | None = None,
        name: str = "cascade",
    ) -> None:
        unknown = sorted(set(escalate_on) - set(ALL_SIGNALS))
        if unknown:
            raise ConfigError(
                f"unknown escalation signals {unknown}; known: {', '.join(ALL_SIGNALS)}",
                where=f"routing.{name}.escalate_on",
            )
        if deescalate_after is not None and deescalate_after < 1:
            raise ConfigError(
                f"deescalate_after must be >= 1, got {deescalate_after}",
                where=f"routing.{name}.deescalate_after",
            )
        super().__init__(ladder, name)
        self._start = 0 if start_tier is None else ladder.index(start_tier)
        self._on = frozenset(escalate_on)
        self._min_logprob = min_mean_logprob
        self._max_disagreement = max_judge_disagreement
        self._deescalate_after = deescalate_after

    def triggers(self, ctx: StepContext) -> list[str]:
        """The enabled signals that fire in ``ctx``, described for a reason."""
        s = ctx.signals
        at = f" at step {ctx.step_index - 1}" if ctx.step_index > 0 else ""
        fired: list[str] = []
        if "tool_failed" in self._on and s.last_tool_failed:
            fired.append(f"tool call failed{at}")
        if "repeated_action" in self._on and s.repeated_action:
            fired.append(f"repeated action{at}")
        if (
            "low_confidence" in self._on
            and s.mean_logprob is not None
            and s.mean_logprob < self._min_logprob
        ):
            fired.append(
                f"low confidence{at} (mean logprob {s.mean_logprob:.2f} < "
                f"{self._min_logprob:.2f}, perplexity {perplexity(s.mean_logprob):.1f})"
            )
        if (
            "judge_disagreement" in self._on
            and s.judge_disagreement is not None
            and s.judge_disagreement > self._max_disagreement
        ):
            fired.append(
                f"judges disagree ({s.judge_disagreement:.2f} > {self._max_disagreement:.2f})"
            )
        return fired

    def route(self, ctx: StepContext) -> RoutingDecision:
        ladder = self._ladder
        step = ctx.step_index
        base = self._start if ctx.previous_tier is None else ladder.index(ctx.previous_tier)
        here = ladder.tiers[base].name
        fired = self.triggers(ctx)
        wanted = base
        if fired:
            if base < ladder.top:
                wanted = base + 1
                reason = (
                    f"escalated from {here} to {ladder.tiers[wanted].name} at step {step}: "
                    + "; ".join(fired)
                )
            else:
                reason = f"stayed on {here} (highest tier) at step {step}: " + "; ".join(fired)
        elif (
            self._deescalate_after is not None
            and base > self._start
            and ctx.steps_on_tier >= self._deescalate_after
        ):
            wanted = base - 1
            reason = (
                f"de-escalated from {here} to {ladder.tiers[wanted].name} at step {step}: "
                f"{ctx.steps_on_tier} steps on {here} and no escalation signal"
            )
        elif ctx.previous_tier is None:
            reason = f"started on {here} at step {step}: cascade start tier, no signal"
        else:
            reason = f"stayed on {here} at step {step}: no escalation signal"
        return ladder.decide(self._name, wanted, reason, ctx)


class DifficultyScorer(Protocol):
    """Scores how hard the next step is, in [0, 1] (RouteLLM-style routers
    score the probability that the strong model is needed)."""

    @property
    def name(self) -> str: ...

    def score(self, ctx: StepContext) -> float: ...


@final
class ProvidedDifficulty:
    """Uses ``signals.difficulty`` as given (the offline simulator, a
    classifier upstream); without one, ``fallback`` or an error.  Agent
    rollouts carry no difficulty: route them with ``SignalDifficulty``."""

    name = "provided"

    def __init__(self, fallback: float | None = None) -> None:
        self._fallback = fallback

    def score(self, ctx: StepContext) -> float:
        value = ctx.signals.difficulty
        if value is None:
            value = self._fallback
        if value is None:
            raise InvalidRequestError(
                f"threshold routing at step {ctx.step_index} needs signals.difficulty "
                "(scorer 'provided' has no fallback)"
            )
        return value


class SignalWeights(msgspec.Struct, frozen=True, kw_only=True):
    """How much each signal adds to the difficulty score."""

    prior: float = 0.3
    """Score when no difficulty is provided and no signal fires."""
    tool_failed: float = 0.3
    """Added when a tool call of the previous step failed."""
    repeated_action: float = 0.3
    """Added when the previous step repeated the one before it."""
    low_confidence: float = 0.3
    """Multiplied by the previous reply's uncertainty in [0, 1]: 0 at a mean
    token logprob of ``confident_logprob`` or above, 1 at
    ``min_mean_logprob`` or below, linear between."""
    judge_disagreement: float = 0.4
    """Multiplied by the disagreement share."""
    per_step: float = 0.0
    """Added per step already taken (long rollouts are harder ones)."""
    confident_logprob: float = -0.3
    """Mean token logprob at or above which a reply counts as confident."""
    min_mean_logprob: float = -1.0
    """Mean token logprob at or below which a reply counts as fully uncertain."""


@final
class SignalDifficulty:
    """``difficulty`` (or the prior) plus weighted behaviour signals, clipped
    to [0, 1]: a cheap, model-free stand-in for a learned router that works
    from what every agent step has (tool failures, repeats, the reply's
    token logprobs when the agent asks for them, the step index)."""

    name = "signals"

    def __init__(self, weights: SignalWeights | None = None) -> None:
        w = weights if weights is not None else SignalWeights()
        if w.confident_logprob <= w.min_mean_logprob:
            raise ConfigError(
                f"confident_logprob ({w.confident_logprob}) must be above "
                f"min_mean_logprob ({w.min_mean_logprob})",
                where="routing.weights",
            )
        self._w = w

    def uncertainty(self, mean_logprob: float | None) -> float:
        """The ramp from a mean token logprob to [0, 1] (0 without logprobs)."""
        if mean_logprob is None:
            return 0.0
        w = self._w
        share = (w.confident_logprob - mean_logprob) / (w.confident_logprob - w.min_mean_logprob)
        return min(max(share, 0.0), 1.0)

    def score(self, ctx: StepContext) -> float:
        s, w = ctx.signals, self._w
        value = w.prior if s.difficulty is None else s.difficulty
        value += w.tool_failed * s.last_tool_failed + w.repeated_action * s.repeated_action
        value += w.low_confidence * self.uncertainty(s.mean_logprob)
        if s.judge_disagreement is not None:
            value += w.judge_disagreement * s.judge_disagreement
        value += w.per_step * ctx.step_index
        return min(max(value, 0.0), 1.0)


@final
class ThresholdPolicy(_LadderPolicy):
    """Tier by difficulty: ``thresholds`` are the increasing cut points
    between consecutive tiers (one fewer than tiers); a score at or above
    the k-th cut point goes to tier k+1 or higher."""

    def __init__(
        self,
        ladder: TierLadder,
        thresholds: Sequence[float],
        scorer: DifficultyScorer,
        *,
        name: str = "threshold",
    ) -> None:
        where = f"routing.{name}.thresholds"
        if len(thresholds) != len(ladder) - 1:
            raise ConfigError(
                f"{len(ladder)} tiers need {len(ladder) - 1} thresholds, got {len(thresholds)}",
                where=where,
            )
        if any(b <= a for a, b in itertools.pairwise(thresholds)):
            raise ConfigError(f"thresholds must increase, got {list(thresholds)}", where=where)
        super().__init__(ladder, name)
        self._cuts = tuple(thresholds)
        self._scorer = scorer

    def route(self, ctx: StepContext) -> RoutingDecision:
        score = self._scorer.score(ctx)
        wanted = bisect.bisect_right(self._cuts, score)
        tier = self._ladder.tiers[wanted].name
        bounds = []
        if wanted > 0:
            bounds.append(f">= {self._cuts[wanted - 1]:.2f}")
        if wanted < len(self._cuts):
            bounds.append(f"< {self._cuts[wanted]:.2f}")
        reason = (
            f"difficulty {score:.2f} (scorer {self._scorer.name}) {' and '.join(bounds)}: "
            f"{tier} at step {ctx.step_index}"
        )
        return self._ladder.decide(self._name, wanted, reason, ctx)


@final
class RolloutRouter:
    """Routes the successive steps of one rollout with a shared policy,
    carrying the history the policy needs (previous tier, steps on it)."""

    def __init__(self, policy: RoutingPolicy) -> None:
        self.policy = policy
        self._previous: str | None = None
        self._on_tier = 0

    def context(
        self,
        step_index: int,
        signals: Signals = NO_SIGNALS,
        headroom: Headroom = UNCAPPED,
        *,
        prompt_tokens: int,
        max_tokens: int,
        n: int = 1,
        min_tokens: int | None = None,
    ) -> StepContext:
        """The ``StepContext`` for the next step, history filled in."""
        return StepContext(
            step_index=step_index,
            signals=signals,
            headroom=headroom,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            n=n,
            min_tokens=min_tokens,
            previous_tier=self._previous,
            steps_on_tier=self._on_tier,
        )

    def record(self, decision: RoutingDecision) -> None:
        """Note that ``decision`` was acted on."""
        self._on_tier = self._on_tier + 1 if decision.tier == self._previous else 1
        self._previous = decision.tier

    def route(
        self,
        step_index: int,
        signals: Signals = NO_SIGNALS,
        headroom: Headroom = UNCAPPED,
        *,
        prompt_tokens: int,
        max_tokens: int,
        n: int = 1,
    ) -> RoutingDecision:
        """Decide the next step and record it."""
        ctx = self.context(
            step_index, signals, headroom, prompt_tokens=prompt_tokens, max_tokens=max_tokens, n=n
        )
        decision = self.policy.route(ctx)
        self.record(decision)
        return decision

    def reserve(
        self,
        ledger: BudgetLedger,
        step_index: int,
        signals: Signals = NO_SIGNALS,
        *,
        prompt_tokens: int,
        max_tokens: int,
        n: int = 1,
        min_tokens: int | None = None,
    ) -> tuple[RoutingDecision, Reservation]:
        """Route on the ledger's headroom and reserve the chosen call.

        With ``min_tokens``, a call whose worst case does not fit is booked
        with ``max_tokens`` lowered to its share of what is left (read it on
        the reservation), and refused only when not even ``min_tokens``
        fit (``BudgetLedger.reserve``).  Parallel rollouts may take the
        headroom between the two; then the step is routed again on the
        fresh headroom (at most once per tier), so a cheaper tier is tried
        before ``BudgetExceeded`` propagates."""
        retries_left: int | None = None  # counted on the first refusal only
        while True:
            ctx = self.context(
                step_index,
                signals,
                ledger.headroom(),
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                n=n,
                min_tokens=min_tokens,
            )
            decision = self.policy.route(ctx)
            try:
                reservation = ledger.reserve(
                    decision.model, prompt_tokens, max_tokens, n=n, min_tokens=min_tokens
                )
            except BudgetExceeded:
                if retries_left is None:
                    retries_left = len(self.policy.ladder) - 1
                if retries_left == 0:
                    raise
                retries_left -= 1
                continue
            self.record(decision)
            return decision, reservation


__all__ = [
    "ALL_SIGNALS",
    "CascadePolicy",
    "DifficultyScorer",
    "EscalationSignal",
    "FixedTierPolicy",
    "ProvidedDifficulty",
    "RolloutRouter",
    "RoutingPolicy",
    "SignalDifficulty",
    "SignalWeights",
    "ThresholdPolicy",
    "always_large",
    "always_small",
]
