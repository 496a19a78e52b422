"""The cost-success frontier of routing policies over a task set.

Owns ``evaluate_frontier`` (run every task under every policy, concurrently
and bounded), ``PolicyScore`` (mean success with a Wilson 95% interval, mean
cost), ``mark_pareto`` (which policies no other beats on both cost and
success), ``render_table`` and ``frontier_main``, the entry point behind
``agentrt frontier`` (the CLI layer calls it; this module writes only to the
stream it is given).

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO, TypeVar

import anyio
import msgspec

from agentrt.protocols._run import Budget
from agentrt.protocols._usage import Cost
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.evaluation._estimators import wilson_interval
from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.routing._policies import (
    CascadePolicy,
    ProvidedDifficulty,
    RoutingPolicy,
    ThresholdPolicy,
    always_large,
    always_small,
)
from agentrt.runtime.routing._simulation import (
    SIM_PRICES,
    SIM_TIERS,
    SimProfile,
    SimTask,
    SimulatedTaskRunner,
    load_tasks_jsonl,
    simulated_tasks,
)
from agentrt.runtime.routing._tiers import Tier, TierLadder

T = TypeVar("T")
TaskRunner = Callable[[T, RoutingPolicy], Awaitable[tuple[bool, Cost]]]
"""Runs one task under one policy: ``(task, policy) -> (success, cost)``."""


class PolicyScore(msgspec.Struct, frozen=True, kw_only=True):
    """How one policy did over the task set."""

    policy: str
    tasks: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_usd: float
    mean_tokens: float
    mean_calls: float
    pareto: bool = False


def score(policy: str, outcomes: Sequence[tuple[bool, Cost]]) -> PolicyScore:
    """Aggregate one policy's per-task outcomes."""
    n = len(outcomes)
    wins = sum(ok for ok, _ in outcomes)
    low, high = wilson_interval(wins, n)
    per = max(n, 1)
    return PolicyScore(
        policy=policy,
        tasks=n,
        successes=wins,
        success_rate=wins / per,
        ci_low=low,
        ci_high=high,
        mean_usd=math.fsum(c.usd for _, c in outcomes) / per,
        mean_tokens=sum(c.usage.total_tokens for _, c in outcomes) / per,
        mean_calls=sum(c.model_calls for _, c in outcomes) / per,
    )


def mark_pareto(scores: Sequence[PolicyScore]) -> list[PolicyScore]:
    """The scores sorted by cost, each marked Pareto-optimal unless another
    policy costs no more and succeeds at least as often, one strictly."""

    def dominated(a: PolicyScore) -> bool:
        return any(
            b.mean_usd <= a.mean_usd
            and b.success_rate >= a.success_rate
            and (b.mean_usd < a.mean_usd or b.success_rate > a.success_rate)
            for b in scores
        )

    marked = [msgspec.structs.replace(s, pareto=not dominated(s)) for s in scores]
    return sorted(marked, key=lambda s: (s.mean_usd, -s.success_rate, s.policy))


async def evaluate_frontier(
    tasks: Sequence[T],
    policies: Mapping[str, RoutingPolicy],
    run_task: TaskRunner[T],
    *,
    concurrency: int = 32,
) -> list[PolicyScore]:
    """Run every task under every policy (at most ``concurrency`` at once)
    and score them; a runner's exception fails the evaluation."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    limiter = anyio.CapacityLimiter(concurrency)
    results: dict[str, list[tuple[bool, Cost] | None]] = {
        name: [None] * len(tasks) for name in policies
    }

    async def one(name: str, policy: RoutingPolicy, index: int, task: T) -> None:
        async with limiter:
            results[name][index] = await run_task(task, policy)

    async with anyio.create_task_group() as tg:
        for name, policy in policies.items():
            for index, task in enumerate(tasks):
                tg.start_soon(one, name, policy, index, task)
    return mark_pareto(
        [score(name, [o for o in outcomes if o is not None]) for name, outcomes in results.items()]
    )


def render_table(scores: Sequence[PolicyScore], *, title: str = "") -> str:
    """A plain-text table, cheapest first; ``*`` marks the Pareto frontier."""
    header = ("policy", "success", "95% CI", "mean $", "tokens", "calls", "pareto")
    rows = [
        (
            s.policy,
            f"{s.success_rate:.1%}",
            f"[{s.ci_low:.1%}, {s.ci_high:.1%}]",
            f"{s.mean_usd:.6f}",
            f"{s.mean_tokens:,.0f}",
            f"{s.mean_calls:.2f}",
            "*" if s.pareto else "",
        )
        for s in scores
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join((first, *rest)).rstrip()

    out = [title] if title else []
    out += [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    return "\n".join(out) + "\n"


def default_policies(
    tiers: Sequence[Tier] = SIM_TIERS,
    prices: PriceTable = SIM_PRICES,
    *,
    threshold: float = 0.5,
    degrade_below: float | None = 0.2,
) -> dict[str, RoutingPolicy]:
    """The boundary policies, a cascade and a difficulty threshold (for
    two tiers; with more, one threshold per boundary evenly spaced)."""
    ladder = TierLadder(tiers, prices, degrade_below=degrade_below)
    cuts = [threshold] if len(ladder) == 2 else [(i + 1) / len(ladder) for i in range(ladder.top)]
    policies: list[RoutingPolicy] = [
        always_small(ladder),
        always_large(ladder),
        CascadePolicy(ladder),
        ThresholdPolicy(ladder, cuts, ProvidedDifficulty()),
    ]
    return {p.name: p for p in policies}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrt frontier",
        description="Cost-success frontier of routing policies over a task set.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--simulate", action="store_true", help="use a simulated task set (the default)"
    )
    source.add_argument(
        "--tasks",
        type=Path,
        help='JSONL file: {"id": ..., "difficulty": 0..1, "reference": {"small": false, ...}}',
    )
    parser.add_argument("--n-tasks", type=int, default=300, help="simulated task count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-usd", type=float, default=0.25, help="hard cap per task")
    parser.add_argument("--max-steps", type=int, default=SimProfile().max_steps)
    parser.add_argument("--threshold", type=float, default=0.5, help="difficulty cut point")
    parser.add_argument("--concurrency", type=int, default=32)
    return parser


def frontier_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Print the frontier table; returns a process exit code (0 ok, 2 bad input)."""
    stream = out if out is not None else sys.stdout
    args = _parser().parse_args(argv)
    try:
        if args.n_tasks < 1 or args.max_steps < 1 or args.budget_usd <= 0:
            raise ValueError("--n-tasks and --max-steps must be >= 1 and --budget-usd > 0")
        if args.tasks is not None:
            text = args.tasks.read_text(encoding="utf-8")
            tasks: list[SimTask] = load_tasks_jsonl(text.splitlines(), source=str(args.tasks))
            label = f"{len(tasks)} tasks from {args.tasks}"
        else:
            tasks = simulated_tasks(args.n_tasks, seed=args.seed)
            label = f"{len(tasks)} simulated tasks (seed {args.seed})"
        runner = SimulatedTaskRunner(
            profile=SimProfile(max_steps=args.max_steps),
            budget=Budget(max_usd=args.budget_usd),
            seed=args.seed,
        )
        policies = default_policies(threshold=args.threshold)
        scores = anyio.run(
            lambda: evaluate_frontier(tasks, policies, runner, concurrency=args.concurrency)
        )
    except (OSError, ValueError, AgentrtError) as exc:
        sys.stderr.write(f"agentrt frontier: {exc}\n")
        return 2
    title = f"cost-success frontier: {label}, budget ${args.budget_usd:g} per task"
    stream.write(render_table(scores, title=title))
    return 0


__all__ = [
    "PolicyScore",
    "TaskRunner",
    "default_policies",
    "evaluate_frontier",
    "frontier_main",
    "mark_pareto",
    "render_table",
    "score",
    "wilson_interval",
]
