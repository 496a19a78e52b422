"""Evaluation from one pool: draw N rollouts per task once, then estimate
every k <= N from that pool.

Owns ``draw_pools`` (one run of N rollouts per task, through a ``Runner``,
its trajectories recorded), ``evaluate_pools`` (pass@k and pass^k at every
k from the unbiased estimators; each aggregator at k by re-aggregating
k-subsets of the pool, every subset when there are few, else a seeded
sample, with no rollout run again; oracle@k beside it; cost per task;
paired comparisons with their interval; a power calculation),
``EvalReport`` and its table, and the ``agentrt eval`` command.  The
estimators are ``agentrt.runtime.evaluation._estimators``; the task format
``eval_tasks``; the pool's file format ``trajectory_data``; the plot
``eval_plot``.

A ``Runner`` is anything with ``run`` and ``aggregate`` like
``agentrt.Runtime``'s; the CLI wires a ``Runtime`` in.  Must not print
outside ``eval_command``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

from agentrt.protocols._events import Event
from agentrt.protocols._ids import nth_rollout_id
from agentrt.protocols._run import RunResult, ScalingSpec
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.cli._flags import add_placement_arguments
from agentrt.runtime.engine._runtime import stored_aggregator
from agentrt.runtime.evaluation._estimators import (
    MIN_TASKS,
    Difference,
    Estimate,
    mean_estimate,
    paired_difference,
    pass_at_k,
    pass_hat_k,
    runs_needed,
    tasks_needed,
)
from agentrt.runtime.evaluation._task_sets import EvalTask, Verifier, build_verifier, load_tasks
from agentrt.runtime.evaluation._trajectory_data import (
    Pool,
    TrajectoryRecorder,
    read_file,
    write_pools,
)
from agentrt.runtime.kernel._errors import ConfigError, UserError
from agentrt.runtime.observe._log import get_logger

log = get_logger(__name__)

EventSink = Callable[[Event], Awaitable[None]]


class Runner(Protocol):
    """What an evaluation runs with (``agentrt.Runtime`` is one)."""

    async def run(
        self, task: str, *, scaling: ScalingSpec, events: EventSink | None = None
    ) -> RunResult: ...

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        scaling: ScalingSpec,
        trajectories: Mapping[str, Trajectory] | None = None,
    ) -> RunResult: ...


# -- aggregator specs -------------------------------------------------------------


class AggregateSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An aggregator as the command line names it: ``NAME[:KEY=VALUE,...]``."""

    label: str
    scaling: ScalingSpec


def parse_aggregate(text: str, *, where: str = "--aggregate") -> AggregateSpec:
    """``rtv`` or ``rtv:g=2,v=4`` (values read as JSON when they parse).
    Raises ``ConfigError`` naming ``where`` for a malformed spec, an unknown
    aggregator or option, or one that cannot re-aggregate a pool (PDR)."""
    name, _, rest = text.partition(":")
    here = f"{where} {text!r}"
    if not name.strip():
        raise ConfigError("expected NAME[:KEY=VALUE,...]", where=here)
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected KEY=VALUE, got {part!r}", where=here)
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    scaling = ScalingSpec(rollouts=1, aggregate=name.strip(), options=options)
    stored_aggregator(scaling, where=here)  # fails now, before any model call
    return AggregateSpec(label=text, scaling=scaling)


# -- the report -------------------------------------------------------------------


class CurvePoint(msgspec.Struct, frozen=True, kw_only=True):
    """pass@k and pass^k at one k, from the pool."""

    k: int
    pass_at: Estimate
    pass_hat: Estimate
    tokens_per_task: float
    """Mean tokens of k rollouts of a task."""
    usd_per_task: float


class AggregatorPoint(msgspec.Struct, frozen=True, kw_only=True):
    """An aggregator at one k: over k-subsets of each task's pool."""

    k: int
    subsets: int
    """k-subsets aggregated per task (at most)."""
    exact: bool
    """Every k-subset was aggregated (else a seeded sample of them)."""
    accuracy: Estimate
    oracle: Estimate
    """oracle@k: some rollout of the k was right (pass@k, exact)."""
    picked: float | None
    """Of the subsets where some rollout was right, the share where the
    aggregator's answer was right (``None``: no such subset)."""
    tokens_per_task: float
    """k rollouts plus the aggregation, mean per task."""
    usd_per_task: float
    model_calls_per_task: float
    aggregation_calls: int
    """Model calls the aggregations at this k made, in all."""
    per_task: list[float]


class AggregatorCurve(msgspec.Struct, frozen=True, kw_only=True):
    aggregate: str
    points: list[AggregatorPoint]


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """``a - b`` on the same tasks (``pass@K`` or ``AGGREGATE@K``)."""

    a: str
    b: str
    difference: Difference


class PowerEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """What it takes to see a change ``delta`` in pass@1 (80 % power, 5 %)."""

    delta: float
    p: float
    """The pass@1 sized for (0.5 when the observed one is 0 or 1)."""
    rho: float
    """The correlation assumed between paired strategies (from the first
    comparison, else 0)."""
    tasks_needed: int
    """New tasks (one run each, paired) to detect ``delta``."""
    runs_needed: int | None
    """Runs per task to detect ``delta`` on these tasks (``None``: the pools
    show no within-task variance: fewer than 2 rollouts, or all agree)."""


class TaskOutcome(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    correct: list[bool]
    answers: list[str | None]


class EvalReport(msgspec.Struct, frozen=True, kw_only=True):
    tasks: int
    rollouts: int
    """Pool size per task (the smallest, when they differ)."""
    pool_model_calls: int
    """Model calls made to draw the pool (0 when it was read from a file)."""
    aggregation_model_calls: int
    curve: list[CurvePoint]
    aggregators: list[AggregatorCurve]
    comparisons: list[Comparison]
    power: PowerEstimate
    outcomes: list[TaskOutcome]


# -- drawing the pool -------------------------------------------------------------


async def draw_pools(
    runner: Runner, tasks: Sequence[EvalTask], *, rollouts: int, concurrency: int = 4
) -> tuple[list[Pool], int]:
    """One run of ``rollouts`` rollouts per task, majority-aggregated (no
    model call); returns the pools and the model calls made.  A run that
    raises leaves its task a pool of failed rollouts (logged)."""
    if rollouts < 1:
        raise ConfigError(f"must be >= 1, got {rollouts}", where="--rollouts")
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    pools: list[Pool | None] = [None] * len(tasks)
    calls = [0] * len(tasks)

    async def one(i: int, task: EvalTask) -> None:
        recorder = TrajectoryRecorder()
        scaling = ScalingSpec(rollouts=rollouts, aggregate="majority")
        summaries: list[TrajectorySummary]
        async with limiter:
            try:
                result = await runner.run(task.task, scaling=scaling, events=recorder)
            except UserError:
                raise
            except Exception as exc:
                log.warning("eval.run_failed", task=task.id, error=repr(exc))
                why = f"run failed: {exc!r}"
                summaries = [
                    TrajectorySummary(rollout_id=nth_rollout_id(task.id, j), failure_modes=[why])
                    for j in range(rollouts)
                ]
            else:
                summaries = list(result.summaries)
                calls[i] = result.cost.model_calls
        for j in range(len(summaries), rollouts):  # cut short (early stop, a budget)
            log.warning("eval.rollout_missing", task=task.id, rollout=j)
            summaries.append(
                TrajectorySummary(rollout_id=f"{task.id}-missing{j}", failure_modes=["missing"])
            )
        pools[i] = Pool(
            group=task.id,
            task=task.task,
            summaries=summaries,
            trajectories=recorder.trajectories(task.task),
            task_id=task.id,
            expected=task.answer,
            verifier=task.verifier,
        )

    async with anyio.create_task_group() as tg:
        for i, task in enumerate(tasks):
            tg.start_soon(one, i, task)
    return [p for p in pools if p is not None], sum(calls)


# -- estimating from the pool -----------------------------------------------------


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to ``n``, and ``n``."""
    ks = {n}
    k = 1
    while k < n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def choose_subsets(
    n: int, k: int, limit: int, rng: random.Random
) -> tuple[list[tuple[int, ...]], bool]:
    """Every k-subset of ``range(n)`` when there are at most ``limit``,
    else ``limit`` distinct ones drawn at random; and whether that is all."""
    total = math.comb(n, k)
    if total <= limit:
        return list(itertools.combinations(range(n), k)), True
    seen: set[tuple[int, ...]] = set()
    while len(seen) < limit:
        seen.add(tuple(sorted(rng.sample(range(n), k))))
    return sorted(seen), False


def _task_of(pool: Pool) -> EvalTask:
    return EvalTask(
        id=pool.task_id or pool.group, task=pool.task, answer=pool.expected, verifier=pool.verifier
    )


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return math.fsum(items) / len(items) if items else 0.0


async def evaluate_pools(
    runner: Runner,
    pools: Sequence[Pool],
    aggregates: Sequence[AggregateSpec],
    *,
    ks: Iterable[int] | None = None,
    subsets: int = 16,
    verifier: Verifier | str = "exact",
    compare: Sequence[tuple[str, str]] = (),
    detect: float = 0.02,
    concurrency: int = 4,
    seed: int = 0,
    pool_model_calls: int = 0,
) -> EvalReport:
    """Estimate everything from ``pools`` (see the module docstring).  Only
    the aggregations call models.  Raises ``ConfigError`` for no pools, a
    pool without an expected answer, a ``k`` past the pool or a comparison
    naming something not estimated."""
    if not pools:
        raise ConfigError("no tasks to evaluate", where="eval")
    if subsets < 1:
        raise ConfigError(f"must be >= 1, got {subsets}", where="--subsets")
    for pool in pools:
        if pool.expected is None:
            raise ConfigError(
                "has no expected answer: an evaluation needs one per task",
                where=f"task {pool.group!r}",
            )
    default = build_verifier(verifier) if isinstance(verifier, str) else verifier
    tasks = [_task_of(p) for p in pools]
    verify = [build_verifier(t.verifier) if t.verifier else default for t in tasks]
    n = min(len(p.summaries) for p in pools)
    wanted = sorted(set(ks)) if ks is not None else default_ks(n)
    bad = [k for k in wanted if not 1 <= k <= n]
    if bad:
        raise ConfigError(f"k must lie in 1..{n} (the pool's size), got {bad}", where="--k")
    correct = [
        [s.answer is not None and bool(verify[i](s.answer, tasks[i])) for s in pool.summaries]
        for i, pool in enumerate(pools)
    ]
    tokens = [[s.cost.usage.total_tokens for s in p.summaries] for p in pools]
    usd = [[s.cost.usd for s in p.summaries] for p in pools]
    calls = [[s.cost.model_calls for s in p.summaries] for p in pools]

    curve = []
    for k in wanted:
        counts = [(len(c), sum(c)) for c in correct]
        curve.append(
            CurvePoint(
                k=k,
                pass_at=mean_estimate([pass_at_k(m, c, k) for m, c in counts]),
                pass_hat=mean_estimate([pass_hat_k(m, c, k) for m, c in counts]),
                tokens_per_task=_mean(k * _mean(t) for t in tokens),
                usd_per_task=_mean(k * _mean(u) for u in usd),
            )
        )

    limiter = anyio.CapacityLimiter(max(1, concurrency))
    curves: list[AggregatorCurve] = []
    for spec in aggregates:
        points = []
        for k in wanted:
            points.append(
                await _aggregate_at(
                    runner,
                    pools=pools,
                    spec=spec,
                    k=k,
                    limit=subsets,
                    seed=seed,
                    correct=correct,
                    verify=verify,
                    tasks=tasks,
                    costs=(tokens, usd, calls),
                    limiter=limiter,
                )
            )  # fmt: skip
        curves.append(AggregatorCurve(aggregate=spec.label, points=points))

    comparisons = [_compare(a, b, curve, curves, correct) for a, b in compare]
    p1 = _mean(sum(c) / len(c) for c in correct)
    rho = comparisons[0].difference.correlation if comparisons else None
    rho = 0.0 if rho is None else max(-1.0, min(1.0, rho))
    # A pass@1 of exactly 0 or 1 has no variance to size with: assume the worst, 0.5.
    sized = p1 if 0 < p1 < 1 else 0.5
    power = PowerEstimate(
        delta=detect,
        p=sized,
        rho=rho,
        tasks_needed=tasks_needed(sized, detect, rho=rho),
        runs_needed=runs_needed([(len(c), sum(c)) for c in correct], detect),
    )
    return EvalReport(
        tasks=len(pools),
        rollouts=n,
        pool_model_calls=pool_model_calls,
        aggregation_model_calls=sum(p.aggregation_calls for c in curves for p in c.points),
        curve=curve,
        aggregators=curves,
        comparisons=comparisons,
        power=power,
        outcomes=[
            TaskOutcome(task_id=t.id, correct=c, answers=[s.answer for s in p.summaries])
            for t, c, p in zip(tasks, correct, pools, strict=True)
        ],
    )


async def _aggregate_at(
    runner: Runner,
    *,
    pools: Sequence[Pool],
    spec: AggregateSpec,
    k: int,
    limit: int,
    seed: int,
    correct: list[list[bool]],
    verify: list[Verifier],
    tasks: list[EvalTask],
    costs: tuple[list[list[int]], list[list[float]], list[list[int]]],
    limiter: anyio.CapacityLimiter,
) -> AggregatorPoint:
    tokens, usd, calls = costs
    plans = [
        choose_subsets(len(p.summaries), k, limit, random.Random(f"{seed}:{p.group}:{k}"))
        for p in pools
    ]
    # (task, subset) -> (right, tokens, usd, calls) of the aggregation
    done: dict[tuple[int, int], tuple[bool, int, float, int]] = {}

    async def one(i: int, j: int, subset: tuple[int, ...]) -> None:
        pool = pools[i]
        chosen = [pool.summaries[x] for x in subset]
        steps = {
            s.rollout_id: pool.trajectories[s.rollout_id]
            for s in chosen
            if s.rollout_id in pool.trajectories
        }
        async with limiter:
            try:
                result = await runner.aggregate(
                    pool.task, chosen, scaling=spec.scaling, trajectories=steps
                )
            except UserError:
                raise
            except Exception as exc:
                log.warning("eval.aggregate_failed", task=pool.group, k=k, error=repr(exc))
                done[i, j] = (False, 0, 0.0, 0)
                return
        # The verifier reads the rollout's own text (a patch whole; an answer's
        # marker the verifier extracts itself), when the runner kept it.
        text = result.raw_answer if result.raw_answer is not None else result.answer
        ok = text is not None and bool(verify[i](text, tasks[i]))
        cost: Cost = result.cost
        done[i, j] = (ok, cost.usage.total_tokens, cost.usd, cost.model_calls)

    async with anyio.create_task_group() as tg:
        for i, (chosen_subsets, _) in enumerate(plans):
            for j, subset in enumerate(chosen_subsets):
                tg.start_soon(one, i, j, subset)

    accuracy: list[float] = []
    task_tokens: list[float] = []
    task_usd: list[float] = []
    task_calls: list[float] = []
    reachable = hits = 0
    for i, (chosen_subsets, _) in enumerate(plans):
        cells = [done[i, j] for j in range(len(chosen_subsets))]
        accuracy.append(_mean(c[0] for c in cells))
        task_tokens.append(
            _mean(
                c[1] + sum(tokens[i][x] for x in s)
                for c, s in zip(cells, chosen_subsets, strict=True)
            )
        )
        task_usd.append(
            _mean(
                c[2] + sum(usd[i][x] for x in s) for c, s in zip(cells, chosen_subsets, strict=True)
            )
        )
        task_calls.append(
            _mean(
                c[3] + sum(calls[i][x] for x in s)
                for c, s in zip(cells, chosen_subsets, strict=True)
            )
        )
        for c, s in zip(cells, chosen_subsets, strict=True):
            if any(correct[i][x] for x in s):
                reachable += 1
                hits += c[0]
    oracle = mean_estimate([pass_at_k(len(c), sum(c), k) for c in correct])
    return AggregatorPoint(
        k=k,
        subsets=max(len(s) for s, _ in plans),
        exact=all(e for _, e in plans),
        accuracy=mean_estimate(accuracy),
        oracle=oracle,
        picked=hits / reachable if reachable else None,
        tokens_per_task=_mean(task_tokens),
        usd_per_task=_mean(task_usd),
        model_calls_per_task=_mean(task_calls),
        aggregation_calls=sum(c[3] for c in done.values()),
        per_task=accuracy,
    )


def _per_task(
    label: str,
    curve: Sequence[CurvePoint],
    curves: Sequence[AggregatorCurve],
    correct: list[list[bool]],
) -> list[float]:
    name, at, k_text = label.rpartition("@")
    try:
        k = int(k_text)
    except ValueError:
        k = -1
    if not at or k < 1:
        raise ConfigError(f"expected pass@K or AGGREGATE@K, got {label!r}", where="--compare")
    if name == "pass":
        if not any(p.k == k for p in curve):
            raise ConfigError(f"pass@{k} was not estimated (see --k)", where="--compare")
        return [pass_at_k(len(c), sum(c), k) for c in correct]
    for c in curves:
        if c.aggregate == name:
            for point in c.points:
                if point.k == k:
                    return point.per_task
            raise ConfigError(f"{name} was not estimated at k={k} (see --k)", where="--compare")
    known = ", ".join(["pass", *(c.aggregate for c in curves)])
    raise ConfigError(
        f"{name!r} is not an --aggregate of this evaluation ({known})", where="--compare"
    )


def _compare(
    a: str,
    b: str,
    curve: Sequence[CurvePoint],
    curves: Sequence[AggregatorCurve],
    correct: list[list[bool]],
) -> Comparison:
    left = _per_task(a, curve, curves, correct)
    right = _per_task(b, curve, curves, correct)
    return Comparison(a=a, b=b, difference=paired_difference(left, right))


def default_comparisons(aggregates: Sequence[AggregateSpec], n: int) -> list[tuple[str, str]]:
    """The first aggregator at n against one rollout (pass@1), and against
    the second aggregator at n when there is one."""
    if not aggregates:
        return []
    first = f"{aggregates[0].label}@{n}"
    out = [(first, "pass@1")]
    if len(aggregates) > 1:
        out.append((first, f"{aggregates[1].label}@{n}"))
    return out


# -- the table ----------------------------------------------------------------------


def _cell(e: Estimate) -> str:
    return f"{e.value:.3f} [{e.low:.2f},{e.high:.2f}]{'' if e.trusted else '*'}"


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_table(report: EvalReport) -> str:
    """The report as plain text: the pool, pass@k / pass^k by k, each
    aggregator by k beside oracle@k with its cost, the comparisons and the
    power calculation."""
    out = [
        f"pool: {report.tasks} tasks x {report.rollouts} rollouts, drawn once "
        f"({report.pool_model_calls} model calls); every k below is estimated from it "
        f"(aggregations: {report.aggregation_model_calls} model calls)",
        "",
    ]
    rows = [["k", "pass@k", "pass^k", "tokens/task", "usd/task"]]
    for point in report.curve:
        rows.append(
            [
                str(point.k),
                _cell(point.pass_at),
                _cell(point.pass_hat),
                f"{point.tokens_per_task:.0f}",
                f"{point.usd_per_task:.4f}",
            ]
        )
    out += _columns(rows)
    if report.aggregators:
        rows = [
            [
                "aggregate",
                "k",
                "accuracy",
                "oracle@k",
                "picked",
                "tokens/task",
                "usd/task",
                "calls/task",
            ]
        ]
        for agg in report.aggregators:
            for p in agg.points:
                rows.append(
                    [
                        agg.aggregate,
                        f"{p.k}" + ("" if p.exact else f" ({p.subsets} subsets)"),
                        _cell(p.accuracy),
                        f"{p.oracle.value:.3f}",
                        "-" if p.picked is None else f"{p.picked:.3f}",
                        f"{p.tokens_per_task:.0f}",
                        f"{p.usd_per_task:.4f}",
                        f"{p.model_calls_per_task:.1f}",
                    ]
                )
        out += ["", *_columns(rows)]
    for comparison in report.comparisons:
        d = comparison.difference
        rho = "" if d.correlation is None else f", rho {d.correlation:.2f}"
        verdict = "differs" if d.significant else "no difference shown"
        out.append(
            f"\ncompare {comparison.a} - {comparison.b}: {d.value:+.3f} "
            f"[{d.low:+.3f},{d.high:+.3f}]{'' if d.trusted else '*'} "
            f"({d.method}, {d.tasks} tasks{rho}): {verdict}"
        )
    pw = report.power
    runs = (
        "no within-task variance to size runs with (pools of 1, or every pool agrees)"
        if pw.runs_needed is None
        else f"{pw.runs_needed} runs per task"
    )
    out.append(
        f"\npower: to detect a {pw.delta * 100:g}-point change in pass@1 (at {pw.p:.3f}; "
        f"80% power, 5% two-sided): {pw.tasks_needed} paired tasks at one run each "
        f"(rho {pw.rho:.2f}); on these {report.tasks} tasks, {runs}"
    )
    untrusted = any(not p.pass_at.trusted for p in report.curve) or any(
        not c.difference.trusted for c in report.comparisons
    )
    if untrusted:
        out.append(
            f"\n* not to be trusted: fewer than {MIN_TASKS} tasks (or no spread): the interval "
            "treats each task as one draw and is wide; more tasks, not more rollouts, narrow it"
        )
    out.append(
        "\npicked: of the k-subsets where some rollout was right (oracle), the share the "
        "aggregator got right"
    )
    return "\n".join(out)


# -- the command ------------------------------------------------------------------


def build_parser(prog: str = "agentrt eval") -> argparse.ArgumentParser:
    """The ``agentrt eval`` command line."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Draw N rollouts per task of TASKS.jsonl once, then estimate pass@k and pass^k "
            "at every k <= N and each aggregator at k from that pool (no re-runs), with "
            "oracle@k, cost per task, paired comparisons and a power calculation."
        ),
    )
    parser.add_argument(
        "tasks", type=Path, nargs="?", metavar="TASKS.jsonl", help="one JSON task a line"
    )
    parser.add_argument(
        "--from",
        dest="pool",
        type=Path,
        metavar="POOL",
        help="evaluate an exported pool (.jsonl or .parquet) instead of drawing one",
    )
    parser.add_argument("--rollouts", type=int, default=8, help="pool size N per task (8)")
    parser.add_argument(
        "--aggregate",
        action="append",
        metavar="NAME[:K=V,...]",
        help="an aggregator to estimate at every k, e.g. majority or rtv:g=2,v=4; "
        "repeat to compare (default majority)",
    )
    parser.add_argument(
        "--k", action="append", type=int, metavar="K", help="the k to report (default 1,2,4..N)"
    )
    parser.add_argument(
        "--subsets",
        type=int,
        default=16,
        help="k-subsets per task an aggregator is run on; all when there are fewer (16)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        help="a paired comparison, e.g. majority@8 pass@1 (default: the first aggregator "
        "at N against pass@1 and against the second aggregator)",
    )
    parser.add_argument(
        "--detect", type=float, default=0.02, help="the change the power calculation sizes for"
    )
    parser.add_argument(
        "--verifier",
        default="exact",
        help="exact, numeric[:TOL], regex or pkg.mod:fn (default exact)",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="runs in flight (4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subset samples (0)")
    parser.add_argument(
        "--export",
        type=Path,
        metavar="OUT",
        help="write the pool's trajectories and summaries (.jsonl, or .parquet with pyarrow)",
    )
    parser.add_argument("--plot", type=Path, metavar="OUT.svg", help="write the curves as SVG")
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="write the full report")
    parser.add_argument("--agent", help="a spec file or a name from [agents] in --config")
    parser.add_argument(
        "--config",
        type=Path,
        help="agentrt.toml: models, agents, MCP servers (default: the embedded model)",
    )
    add_placement_arguments(parser)
    from agentrt.runtime.evaluation._swe_eval import add_swe_arguments  # it imports this module

    add_swe_arguments(parser)
    return parser


OpenRunner = Callable[[argparse.Namespace], AbstractAsyncContextManager[Runner]]
"""Opens the runner for parsed ``eval`` arguments (the CLI builds a ``Runtime``)."""


def _checked_arguments(args: argparse.Namespace) -> list[AggregateSpec]:
    """The ``--aggregate`` specs, once every argument is checked."""
    if (args.tasks is None) == (args.pool is None):
        raise ConfigError("give a TASKS.jsonl file or --from POOL (one of them)", where="eval")
    aggregates = [parse_aggregate(text) for text in args.aggregate or ["majority"]]
    if not 0 < args.detect <= 1:
        raise ConfigError(f"must lie in (0, 1], got {args.detect}", where="--detect")
    build_verifier(args.verifier)
    from agentrt.runtime.evaluation._swe_eval import check_swe_arguments

    check_swe_arguments(args)
    names = {a.label for a in aggregates}
    for pair in args.compare or []:
        for label in pair:
            name, at, k_text = label.rpartition("@")
            if not at or not k_text.isdigit() or (name != "pass" and name not in names):
                raise ConfigError(
                    f"expected pass@K or AGGREGATE@K with AGGREGATE one of the --aggregate "
                    f"values ({', '.join(sorted(names))}), got {label!r}",
                    where="--compare",
                )
    if args.pool is None:
        if args.rollouts < 1:
            raise ConfigError(f"must be >= 1, got {args.rollouts}", where="--rollouts")
        if any(not 1 <= k <= args.rollouts for k in args.k or []):
            raise ConfigError(f"k must lie in 1..{args.rollouts} (--rollouts)", where="--k")
    return aggregates


async def evaluate_arguments(
    args: argparse.Namespace,
    runner: Runner,
    pools: Sequence[Pool],
    aggregates: Sequence[AggregateSpec],
    *,
    verifier: str | Verifier,
    pool_model_calls: int,
) -> EvalReport:
    """``evaluate_pools`` with the estimate options of parsed ``eval`` arguments
    (``--k``, ``--subsets``, ``--compare`` or the default comparisons, ...)."""
    n = min(len(p.summaries) for p in pools)
    return await evaluate_pools(
        runner,
        pools,
        aggregates,
        ks=args.k,
        subsets=args.subsets,
        verifier=verifier,
        compare=[tuple(c) for c in args.compare]
        if args.compare
        else default_comparisons(aggregates, n),
        detect=args.detect,
        concurrency=args.concurrency,
        seed=args.seed,
        pool_model_calls=pool_model_calls,
    )


def note_pool_and_plot(args: argparse.Namespace, report: EvalReport) -> None:
    """Say where ``--export`` wrote the pool and ``--keep-workspaces`` left
    the workspaces, and write the ``--plot``, when asked."""
    if args.export is not None:
        sys.stdout.write(f"pool: {args.export}\n")
    if getattr(args, "keep_workspaces", False):
        from agentrt.tools.sandbox._workspaces import default_workspace_root

        sys.stdout.write(f"workspaces kept in: {default_workspace_root()} (a directory per run)\n")
    if args.plot is not None:
        from agentrt.runtime.evaluation._plot import write_svg  # the plot imports this module

        write_svg(report, args.plot)
        sys.stdout.write(f"plot: {args.plot}\n")


async def eval_command(args: argparse.Namespace, open_runner: OpenRunner) -> EvalReport:
    """Run ``agentrt eval`` with parsed ``args``; prints the table (stdout)
    and writes the export, plot and JSON when asked.  Every bad argument is
    a ``ConfigError`` before any model call."""
    aggregates = _checked_arguments(args)
    if args.swe:
        from agentrt.runtime.evaluation._swe_eval import swe_eval_command

        return await swe_eval_command(args, open_runner, aggregates)
    tasks: list[EvalTask] = []
    pools: list[Pool] = []
    if args.pool is not None:
        pools = read_file(args.pool)
    else:
        tasks = load_tasks(args.tasks)
        for t in tasks:
            if t.verifier:
                build_verifier(t.verifier)
    async with open_runner(args) as runner:
        calls = 0
        if tasks:
            pools, calls = await draw_pools(
                runner, tasks, rollouts=args.rollouts, concurrency=args.concurrency
            )
        if args.export is not None:
            write_pools(args.export, pools)
        report = await evaluate_arguments(
            args, runner, pools, aggregates, verifier=args.verifier, pool_model_calls=calls
        )
    sys.stdout.write(format_table(report) + "\n")
    note_pool_and_plot(args, report)
    if args.json is not None:
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    return report


__all__ = [
    "AggregateSpec",
    "AggregatorCurve",
    "AggregatorPoint",
    "Comparison",
    "CurvePoint",
    "EvalReport",
    "OpenRunner",
    "PowerEstimate",
    "Runner",
    "TaskOutcome",
    "build_parser",
    "choose_subsets",
    "default_comparisons",
    "default_ks",
    "draw_pools",
    "eval_command",
    "evaluate_pools",
    "format_table",
    "parse_aggregate",
]
