"""Property: many concurrent rollouts never push a ledger over its caps
(whether a call that does not fit is refused or lowered to its share), and
the ledger's totals equal the sum of the usage servers reported, exactly."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction

import anyio
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentrt.protocols import Budget, Usage
from agentrt.runtime.budget._ledger import BudgetLedger, BudgetSnapshot
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable, usd_to_pico
from agentrt.runtime.kernel._errors import BudgetExceeded

PRICE_TEXT = {
    "small": ("0.15", "0.6", "0.075"),
    "large": ("3", "15", "1.5"),
}
PRICES = PriceTable(
    models={
        name: ModelPrice.model_validate(
            {
                "prompt_usd_per_mtok": p,
                "completion_usd_per_mtok": c,
                "cached_prompt_usd_per_mtok": k,
            }
        )
        for name, (p, c, k) in PRICE_TEXT.items()
    }
)
ROLLOUTS = 50
TASKS = 5


def independent_cost(model: str, usage: Usage) -> Fraction:
    """USD recomputed from the price strings, with rationals (not the code
    under test's integer path)."""
    prompt, completion, cached = (Fraction(x) for x in PRICE_TEXT[model])
    hit = min(usage.cached_prompt_tokens, usage.prompt_tokens)
    return (
        (usage.prompt_tokens - hit) * prompt + hit * cached + usage.completion_tokens * completion
    ) / 10**6


@dataclass
class Caps:
    tokens: int | None
    pico: int | None


@dataclass
class Observer:
    """Checks the caps at every change of every ledger (called by the
    ledger right after each reservation, charge and release)."""

    caps: dict[str, Caps]
    checks: int = 0
    max_in_flight: int = 0
    violations: list[str] = field(default_factory=list)

    def __call__(self, snap: BudgetSnapshot) -> None:
        self.checks += 1
        self.max_in_flight = max(self.max_in_flight, snap.in_flight)
        cap = self.caps[snap.ledger]
        committed_tokens = snap.spent.usage.total_tokens + snap.reserved_tokens
        committed_pico = snap.spent_pico + snap.reserved_pico
        if cap.tokens is not None and committed_tokens > cap.tokens:
            self.violations.append(f"{snap.ledger}: {committed_tokens} > {cap.tokens} tokens")
        if cap.pico is not None and committed_pico > cap.pico:
            self.violations.append(f"{snap.ledger}: {committed_pico} > {cap.pico} pico-USD")


Call = tuple[str, int, int, int, Fraction, Fraction, Fraction, int]
"""model, prompt estimate, max_tokens, n, share of the estimate the prompt
really was, share of ``n * max_tokens`` generated, share of the prompt
served from cache, scheduling points between reserve and charge."""


def random_plan(rng: random.Random) -> list[list[Call]]:
    """One list of calls per rollout.  Drawn from a Random that hypothesis
    seeds (drawing ~1,500 values through hypothesis itself is too slow)."""

    def share() -> Fraction:
        return Fraction(rng.randint(0, 100), 100)

    return [
        [
            (
                rng.choice(sorted(PRICE_TEXT)),
                rng.randint(0, 3000),
                rng.randint(1, 1500),
                rng.randint(1, 2),
                share(),
                share(),
                share(),
                rng.randint(0, 3),
            )
            for _ in range(rng.randint(1, 4))
        ]
        for _ in range(ROLLOUTS)
    ]


@dataclass
class Outcome:
    run: BudgetLedger
    tasks: list[BudgetLedger]
    observer: Observer
    charged: list[tuple[int, str, Usage]]
    refused: int


async def run_plan(
    plan: list[list[Call]], run_tokens: int, run_usd: float, task_tokens: int | None
) -> Outcome:
    """Run one rollout per plan entry concurrently, each reserving, pausing
    and charging its calls; check the caps at every change."""
    caps = {"run": Caps(run_tokens, usd_to_pico(run_usd))}
    observer = Observer(caps)
    run = BudgetLedger(
        "run", Budget(max_tokens=run_tokens, max_usd=run_usd), PRICES, on_update=observer
    )
    tasks = []
    for i in range(TASKS):
        caps[f"run/task-{i}"] = Caps(task_tokens, None)
        tasks.append(run.child(f"task-{i}", Budget(max_tokens=task_tokens), on_update=observer))
    outcome = Outcome(run, tasks, observer, [], 0)

    async def rollout(index: int, calls: list[Call]) -> None:
        ledger = tasks[index % TASKS]
        for model, estimate, max_tokens, n, p_share, c_share, hit_share, pauses in calls:
            # Half the rollouts take a call lowered to their share of what
            # is left (``min_tokens``) rather than a refusal.
            fitted = 16 if index % 2 else None
            try:
                reservation = ledger.reserve(model, estimate, max_tokens, n=n, min_tokens=fitted)
            except BudgetExceeded:
                outcome.refused += 1
                continue
            async with reservation:
                for _ in range(pauses):
                    await anyio.lowlevel.checkpoint()
                prompt = int(estimate * p_share)
                usage = Usage(
                    prompt_tokens=prompt,
                    completion_tokens=int(n * reservation.max_tokens * c_share),
                    cached_prompt_tokens=int(prompt * hit_share),
                )
                reservation.charge(usage)
                outcome.charged.append((index % TASKS, model, usage))
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for index, calls in enumerate(plan):
            tg.start_soon(rollout, index, calls)
    return outcome


def check_exact_totals(outcome: Outcome, plan: list[list[Call]]) -> None:
    charged = outcome.charged
    assert outcome.observer.violations[:3] == []
    assert outcome.observer.checks >= 2 * len(charged)
    final = outcome.run.snapshot()
    assert (final.reserved_tokens, final.reserved_pico, final.in_flight, final.overruns) == (
        0,
        0,
        0,
        0,
    )
    assert final.spent.model_calls == len(charged)
    assert final.spent.usage == sum((u for _, _, u in charged), Usage())
    exact = sum((independent_cost(m, u) for _, m, u in charged), Fraction(0))
    assert Fraction(final.spent_pico, 10**12) == exact
    assert final.spent.usd == float(exact)
    for i, task in enumerate(outcome.tasks):
        mine = [u for t, _, u in charged if t == i]
        assert task.snapshot().spent.usage == sum(mine, Usage())
    assert outcome.refused + len(charged) == sum(len(c) for c in plan)


@pytest.mark.anyio
@settings(
    max_examples=30,
    deadline=None,
    # The plan comes from a seeded Random, which shrinks poorly: report the
    # failing seed as found instead of spending minutes shrinking it.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rng=st.randoms(use_true_random=False),
    run_tokens=st.integers(5_000, 200_000),
    run_usd=st.sampled_from([0.002, 0.01, 0.05, 0.5]),
    task_tokens=st.one_of(st.none(), st.integers(2_000, 60_000)),
)
async def test_concurrent_rollouts_never_cross_a_cap_and_totals_are_exact(
    rng: random.Random, run_tokens: int, run_usd: float, task_tokens: int | None
) -> None:
    plan = random_plan(rng)
    outcome = await run_plan(plan, run_tokens, run_usd, task_tokens)
    check_exact_totals(outcome, plan)


@pytest.mark.anyio
async def test_the_property_setup_really_contends_for_the_caps() -> None:
    """A fixed plan where the caps must bind and calls must overlap: guards
    the property test against going vacuous."""
    call: Call = ("large", 2000, 1000, 1, Fraction(1), Fraction(1, 2), Fraction(0), 2)
    plan = [[call] * 3 for _ in range(ROLLOUTS)]
    outcome = await run_plan(plan, run_tokens=40_000, run_usd=0.5, task_tokens=12_000)
    check_exact_totals(outcome, plan)
    assert outcome.refused > 0
    assert outcome.observer.max_in_flight > 1
    # The run cap (40,000) admits 13 calls of 3,000 tokens at once; after
    # they are charged at 2,500 each, more fit, but never past the cap.
    spent = outcome.run.snapshot().spent.usage.total_tokens
    assert 0 < spent <= 40_000
