"""Model tiers and the budget rules every routing policy obeys: ``Tier`` and
``TierLadder``.

Pure computation over a ``StepContext``: no I/O.  Must not import agents,
tools or aggregators.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import final

import msgspec

from agentrt.protocols._trajectory import RoutingDecision
from agentrt.runtime.budget._ledger import Headroom
from agentrt.runtime.budget._pricing import UNPRICED_RATES, PriceTable, TokenRates, pico_to_usd
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError, InvalidRequestError
from agentrt.runtime.routing._step_signals import UNCAPPED, StepContext


class Tier(msgspec.Struct, frozen=True):
    """A named rung of the ladder served by one model (``small``: ``qwen-1.5b``)."""

    name: str
    model: str


def _decision(tier: Tier, policy: str, notes: list[str], room: Headroom) -> RoutingDecision:
    """The decision for ``tier``, with the budget left at the time."""
    return RoutingDecision(
        model=tier.model,
        policy=policy,
        reason="; ".join(notes),
        tier=tier.name,
        budget_left_usd=room.usd,
        budget_left_tokens=room.tokens,
    )


def _money(pico: int) -> str:
    return f"${pico_to_usd(pico):.6f}"


@final
class TierLadder:
    """Tiers cheapest first, their per-token rates and the budget rules."""

    def __init__(
        self,
        tiers: Sequence[Tier],
        prices: PriceTable,
        *,
        degrade_below: float | None = 0.2,
        where: str = "routing.tiers",
    ) -> None:
        if not tiers:
            raise ConfigError("at least one tier is needed", where=where)
        names = [t.name for t in tiers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"duplicate tier names: {', '.join(duplicates)}", where=where)
        if degrade_below is not None and not 0.0 <= degrade_below <= 1.0:
            raise ConfigError(f"degrade_below must be in [0, 1], got {degrade_below}", where=where)
        rates: list[TokenRates] = []
        for tier in tiers:
            price = prices.price(tier.model)
            if price is None and prices.unpriced_free_uncapped:
                rates.append(UNPRICED_RATES)  # counted only by a max_usd cap, which refuses it
                continue
            if price is None:
                raise ConfigError(
                    f"tier {tier.name!r}: no price for model {tier.model!r} "
                    f"(priced: {', '.join(sorted(prices.models)) or 'none'})",
                    where=where,
                )
            rates.append(price.rates())
        for i in range(1, len(tiers)):
            lo, hi = rates[i - 1], rates[i]
            if hi.prompt < lo.prompt and hi.completion < lo.completion:
                raise ConfigError(
                    f"tiers must be listed cheapest first: {tiers[i].name!r} ({tiers[i].model}) "
                    f"is cheaper than {tiers[i - 1].name!r} ({tiers[i - 1].model}) before it",
                    where=where,
                )
        self.tiers: tuple[Tier, ...] = tuple(tiers)
        self.rates: tuple[TokenRates, ...] = tuple(rates)
        self.degrade_below = degrade_below
        self._index = {t.name: i for i, t in enumerate(tiers)}

    def __len__(self) -> int:
        return len(self.tiers)

    @property
    def top(self) -> int:
        """Index of the most capable (most expensive) tier."""
        return len(self.tiers) - 1

    def names(self) -> str:
        return ", ".join(t.name for t in self.tiers)

    def index(self, name: str) -> int:
        """The position of tier ``name``; ``InvalidRequestError`` if unknown."""
        found = self._index.get(name)
        if found is None:
            raise InvalidRequestError(f"unknown tier {name!r}; the tiers are {self.names()}")
        return found

    def worst_case(self, index: int, ctx: StepContext) -> tuple[int, int]:
        """Worst-case (tokens, pico-USD) of the context's call on a tier."""
        completion = ctx.n * ctx.max_tokens
        tokens = ctx.prompt_tokens + completion
        return tokens, self.rates[index].worst_case_pico(ctx.prompt_tokens, completion)

    def ceiling(self, ctx: StepContext) -> int:
        """The highest tier the budget's drain still allows."""
        fraction = ctx.headroom.fraction
        level = self.degrade_below
        if level is None or fraction is None or fraction >= level or level == 0:
            return self.top
        return math.floor(self.top * fraction / level)

    def decide(self, policy: str, wanted: int, reason: str, ctx: StepContext) -> RoutingDecision:
        """Turn the tier a policy wants into the tier it gets, appending
        each adjustment to the reason.  Degrade: under ``degrade_below`` of
        any cap left, the highest allowed tier drops in proportion
        (``floor((tiers - 1) * fraction_left / degrade_below)``).  Fit: never
        a tier whose worst case (prompt estimate + ``n * max_tokens``, no
        cache hits) exceeds the headroom; step down to the most capable that
        fits.  Raises ``BudgetExceeded`` if even the cheapest does not fit."""
        room = ctx.headroom
        if room is UNCAPPED:  # no cap anywhere: nothing to degrade or to fit
            tier = self.tiers[wanted]
            return RoutingDecision(model=tier.model, policy=policy, reason=reason, tier=tier.name)
        notes = [reason]
        ceiling = self.ceiling(ctx)
        if wanted > ceiling:
            fraction = ctx.headroom.fraction or 0.0
            notes.append(
                f"degraded from {self.tiers[wanted].name} to {self.tiers[ceiling].name}: "
                f"{fraction:.0%} of the budget left (< {self.degrade_below:.0%})"
            )
            wanted = ceiling
        chosen = wanted
        first_miss: tuple[str, int, int] | None = None
        while chosen >= 0:
            tokens, pico = self.worst_case(chosen, ctx)
            cap = room.shortfall(tokens, pico)
            if cap is None:
                break
            if first_miss is None:
                first_miss = (cap, tokens, pico)
            chosen -= 1
        if chosen < 0 and ctx.min_tokens is not None:
            # No tier fits in full: the cheapest runs with fewer tokens
            # (the ledger lowers ``max_tokens`` to its share), if it can
            # still do useful work.
            tokens = ctx.prompt_tokens + ctx.n * ctx.min_tokens
            if (
                room.shortfall(
                    tokens,
                    self.rates[0].worst_case_pico(ctx.prompt_tokens, tokens - ctx.prompt_tokens),
                )
                is None
            ):
                tier = self.tiers[0]
                notes.append(
                    f"{tier.name} with max_tokens lowered to fit the "
                    f"{self._left(first_miss[0] if first_miss else 'max_tokens', ctx)} left"
                )
                return _decision(tier, policy, notes, room)
        if chosen < 0:
            raise BudgetExceeded(self._unaffordable(ctx), limit=first_miss[0] if first_miss else "")
        if first_miss is not None:
            cap, tokens, pico = first_miss
            notes.append(
                f"downgraded from {self.tiers[wanted].name} to {self.tiers[chosen].name}: "
                f"its worst case {self._need(cap, tokens, pico)} exceeds the "
                f"{self._left(cap, ctx)} left ({cap})"
            )
        return _decision(self.tiers[chosen], policy, notes, room)

    def _need(self, cap: str, tokens: int, pico: int) -> str:
        if cap == "max_usd":
            return _money(pico)
        if cap == "max_tokens":
            return f"{tokens:,} tokens"
        return "1 call"

    def _left(self, cap: str, ctx: StepContext) -> str:
        room = ctx.headroom
        if cap == "max_usd":
            return _money(room.pico or 0)
        if cap == "max_tokens":
            return f"{room.tokens or 0:,} tokens"
        if cap == "max_model_calls":
            return f"{room.calls or 0} calls"
        return f"{max(room.seconds or 0.0, 0.0):.3f} s"

    def _unaffordable(self, ctx: StepContext) -> str:
        tokens, pico = self.worst_case(0, ctx)
        cheapest = self.tiers[0]
        cap = ctx.headroom.shortfall(tokens, pico) or "budget"
        return (
            f"no tier fits the budget at step {ctx.step_index}: even the cheapest, "
            f"{cheapest.name} ({cheapest.model}), needs {self._need(cap, tokens, pico)} "
            f"and only {self._left(cap, ctx)} is left ({cap})"
        )


__all__ = ["Tier", "TierLadder"]
