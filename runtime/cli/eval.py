"""Evaluation: run a task set K times per strategy, verify, and estimate.

Owns the task file format (JSONL, one ``EvalTask`` a line: ``task`` -- or
``question``/``prompt`` -- and the expected ``answer``, optional ``id`` and
``verifier``), the verifiers (``exact`` after normalisation, ``numeric``
with a tolerance, ``regex``, or any ``pkg.mod:fn`` callable), the
estimators (unbiased pass@k, pass^k, Wilson and bootstrap confidence
intervals), ``evaluate`` (every task x strategy x run through a ``Runner``)
and ``EvalReport`` with its table.  The plot lives in ``eval_plot``.

A ``Runner`` is anything with ``async run(task, *, scaling) -> RunResult``
-- ``agentrt.Runtime`` is one; the CLI wires it in.  This module therefore
imports only protocols, errors and the log: never agents, tools,
aggregators or the facade.
"""

from __future__ import annotations

import argparse
import importlib
import math
import random
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import anyio
import msgspec

from agentrt.protocols import RunResult, ScalingSpec
from agentrt.runtime.cli.flags import add_placement_arguments
from agentrt.runtime.errors import ConfigError
from agentrt.runtime.log import get_logger

log = get_logger(__name__)


class EvalTask(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a task set."""

    id: str
    task: str
    answer: str | None = None
    """The expected answer (a pattern for ``regex``)."""
    verifier: str | None = None
    """This task's verifier, overriding the run's."""


Verifier = Callable[[str | None, EvalTask], bool]
"""``(the run's answer, the task) -> correct?``"""


class Runner(Protocol):
    """What ``evaluate`` runs tasks with (``agentrt.Runtime`` is one)."""

    async def run(self, task: str, *, scaling: ScalingSpec) -> RunResult: ...


# -- task files ---------------------------------------------------------------


def load_tasks(path: str | Path) -> list[EvalTask]:
    """Read a JSONL task file; a bad line is a ``ConfigError`` naming it."""
    tasks: list[EvalTask] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"not JSON: {exc}", where=where) from None
        if not isinstance(raw, dict):
            raise ConfigError("each line must be a JSON object", where=where)
        text = raw.get("task") or raw.get("question") or raw.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("needs a `task` (or `question`/`prompt`) string", where=where)
        answer = raw.get("answer", raw.get("expected"))
        verifier = raw.get("verifier")
        tasks.append(
            EvalTask(
                id=str(raw.get("id", number)),
                task=text,
                answer=None if answer is None else str(answer),
                verifier=None if verifier is None else str(verifier),
            )
        )
    if not tasks:
        raise ConfigError("no tasks", where=str(path))
    return tasks


# -- verifiers ----------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def normalize(text: str) -> str:
    """Case-folded, whitespace collapsed, surrounding quotes, trailing
    punctuation and a leading "the answer is" removed."""
    out = " ".join(text.split()).casefold()
    out = re.sub(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*", "", out)
    return out.strip().strip("\"'`").rstrip(".!").strip()


def exact(answer: str | None, task: EvalTask) -> bool:
    """Equal after ``normalize``."""
    return (
        answer is not None
        and task.answer is not None
        and normalize(answer) == normalize(task.answer)
    )


def _first_number(text: str) -> float | None:
    found = _NUMBER.search(text)
    if found is None:
        return None
    try:
        return float(found.group().replace(",", ""))
    except ValueError:
        return None


def numeric(rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> Verifier:
    """The first number of the answer equals the expected, within tolerance."""

    def verify(answer: str | None, task: EvalTask) -> bool:
        if answer is None or task.answer is None:
            return False
        got, want = _first_number(answer), _first_number(task.answer)
        if got is None or want is None:
            return False
        return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)

    return verify


def regex(answer: str | None, task: EvalTask) -> bool:
    """The expected answer is a pattern found in the answer."""
    if answer is None or task.answer is None:
        return False
    return re.search(task.answer, answer) is not None


def build_verifier(spec: str) -> Verifier:
    """``exact``, ``numeric`` (or ``numeric:TOL``), ``regex`` or
    ``pkg.mod:fn`` (a callable ``(answer, task) -> bool``)."""
    name, _, arg = spec.partition(":")
    if name == "exact" and not arg:
        return exact
    if name == "regex" and not arg:
        return regex
    if name == "numeric":
        try:
            return numeric(float(arg)) if arg else numeric()
        except ValueError:
            raise ConfigError(f"bad tolerance {arg!r}", where=f"verifier {spec!r}") from None
    if arg:
        try:
            fn = getattr(importlib.import_module(name), arg)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load: {exc}", where=f"verifier {spec!r}") from None
        if not callable(fn):
            raise ConfigError("is not callable", where=f"verifier {spec!r}")
        return fn  # type: ignore[no-any-return]
    raise ConfigError(
        "unknown verifier; use exact, numeric[:TOL], regex or pkg.mod:fn",
        where=f"verifier {spec!r}",
    )


# -- estimators ---------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` runs of which ``c`` passed:
    ``1 - C(n-c, k) / C(n, k)`` (the chance that some of k runs drawn
    without replacement passes)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that all of k runs drawn without replacement pass,
    ``C(c, k) / C(n, k)`` (reliability, not just reach)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


def wilson(successes: float, total: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion (95 % by default)."""
    if total <= 0:
        return 0.0, 1.0
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_ci(
    values: Sequence[float], *, iters: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling
    tasks, the unit of variance here)."""
    if not values:
        return 0.0, 1.0
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(iters))
    lo = means[int((1 - level) / 2 * iters)]
    hi = means[min(iters - 1, int((1 + level) / 2 * iters))]
    return lo, hi


# -- running ------------------------------------------------------------------


class TaskRuns(msgspec.Struct, frozen=True, kw_only=True):
    """One task's K runs under one strategy."""

    task_id: str
    passed: list[bool]
    tokens: list[int]
    usd: list[float]
    answers: list[str | None]


class Estimate(msgspec.Struct, frozen=True, kw_only=True):
    value: float
    low: float
    high: float


class StrategyReport(msgspec.Struct, frozen=True, kw_only=True):
    """A strategy's results over the task set."""

    strategy: str
    rollouts: int
    tasks: list[TaskRuns]
    pass_at: dict[int, Estimate]
    """pass@k by k (k = 1 is pass@1 estimated from all K runs)."""
    pass_hat: dict[int, Estimate]
    """pass^k by k."""
    tokens_per_task: float
    """Mean tokens of one run of a task."""
    usd_per_task: float


class EvalReport(msgspec.Struct, frozen=True, kw_only=True):
    runs: int
    strategies: list[StrategyReport]


def _estimate(per_task: list[float], seed: int) -> Estimate:
    lo, hi = bootstrap_ci(per_task, seed=seed)
    return Estimate(value=sum(per_task) / len(per_task), low=lo, high=hi)


def summarize(
    strategy: str, rollouts: int, tasks: list[TaskRuns], ks: Iterable[int]
) -> StrategyReport:
    """Estimates over ``tasks`` (every task run the same number of times)."""
    n = min(len(t.passed) for t in tasks)
    pass_at: dict[int, Estimate] = {}
    pass_hat: dict[int, Estimate] = {}
    for k in sorted({1, *ks}):
        if k > n:
            continue
        counts = [(len(t.passed), sum(t.passed)) for t in tasks]
        pass_at[k] = _estimate([pass_at_k(m, c, k) for m, c in counts], seed=k)
        pass_hat[k] = _estimate([pass_hat_k(m, c, k) for m, c in counts], seed=k + 1000)
    runs = [(tok, usd) for t in tasks for tok, usd in zip(t.tokens, t.usd, strict=True)]
    return StrategyReport(
        strategy=strategy,
        rollouts=rollouts,
        tasks=tasks,
        pass_at=pass_at,
        pass_hat=pass_hat,
        tokens_per_task=sum(t for t, _ in runs) / len(runs),
        usd_per_task=sum(u for _, u in runs) / len(runs),
    )


async def evaluate(
    runner: Runner,
    tasks: Sequence[EvalTask],
    strategies: Sequence[ScalingSpec],
    *,
    runs: int = 3,
    verifier: Verifier | str = "exact",
    ks: Iterable[int] = (1, 2, 4, 8),
    concurrency: int = 4,
) -> EvalReport:
    """Run every task ``runs`` times under each strategy and estimate.  A
    run that raises counts as failed (logged), the evaluation goes on."""
    if runs < 1:
        raise ConfigError(f"runs must be >= 1, got {runs}", where="eval")
    default = build_verifier(verifier) if isinstance(verifier, str) else verifier
    per_task = {t.id: build_verifier(t.verifier) if t.verifier else default for t in tasks}
    limiter = anyio.CapacityLimiter(concurrency)
    reports: list[StrategyReport] = []
    ks = list(ks)
    for spec in strategies:
        rows = await _run_strategy(
            runner, tasks, spec, runs=runs, verifiers=per_task, limiter=limiter
        )
        reports.append(summarize(spec.aggregate, spec.rollouts, rows, ks))
    return EvalReport(runs=runs, strategies=reports)


async def _run_strategy(
    runner: Runner,
    tasks: Sequence[EvalTask],
    spec: ScalingSpec,
    *,
    runs: int,
    verifiers: dict[str, Verifier],
    limiter: anyio.CapacityLimiter,
) -> list[TaskRuns]:
    cells: dict[tuple[str, int], tuple[bool, int, float, str | None]] = {}

    async def one(task: EvalTask, i: int) -> None:
        async with limiter:
            try:
                result = await runner.run(task.task, scaling=spec)
            except Exception as exc:
                log.warning("eval.run_failed", task=task.id, run=i, error=repr(exc))
                cells[task.id, i] = (False, 0, 0.0, None)
                return
        ok = result.answer is not None and verifiers[task.id](result.answer, task)
        usage = result.cost.usage
        cells[task.id, i] = (ok, usage.total_tokens, result.cost.usd, result.answer)

    async with anyio.create_task_group() as tg:
        for task in tasks:
            for i in range(runs):
                tg.start_soon(one, task, i)
    return [
        TaskRuns(
            task_id=t.id,
            passed=[cells[t.id, i][0] for i in range(runs)],
            tokens=[cells[t.id, i][1] for i in range(runs)],
            usd=[cells[t.id, i][2] for i in range(runs)],
            answers=[cells[t.id, i][3] for i in range(runs)],
        )
        for t in tasks
    ]


def format_table(report: EvalReport) -> str:
    """The report as a plain-text table (one row per strategy x rollouts)."""
    ks = sorted({k for s in report.strategies for k in s.pass_at})
    head = ["strategy", "N", *(f"pass@{k}" for k in ks), *(f"pass^{k}" for k in ks if k > 1)]
    head += ["tokens/task", "usd/task"]
    rows = [head]
    for s in report.strategies:

        def cell(e: Estimate | None) -> str:
            return "-" if e is None else f"{e.value:.3f} [{e.low:.2f},{e.high:.2f}]"

        rows.append(
            [
                s.strategy,
                str(s.rollouts),
                *(cell(s.pass_at.get(k)) for k in ks),
                *(cell(s.pass_hat.get(k)) for k in ks if k > 1),
                f"{s.tokens_per_task:.0f}",
                f"{s.usd_per_task:.4f}",
            ]
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def build_parser(prog: str = "agentrt eval") -> argparse.ArgumentParser:
    """The ``agentrt eval`` command line."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run every task of TASKS.jsonl K times per strategy and rollout count; print "
            "pass@k and pass^k with 95 % intervals, tokens and cost per task."
        ),
    )
    parser.add_argument("tasks", type=Path, metavar="TASKS.jsonl", help="one JSON task a line")
    parser.add_argument("--runs", type=int, default=3, help="runs per task and strategy (3)")
    parser.add_argument(
        "--strategy",
        action="append",
        metavar="NAME",
        help="an aggregator (majority, rtv, pdr...); repeat to compare (default majority)",
    )
    parser.add_argument(
        "--rollouts",
        action="append",
        type=int,
        metavar="N",
        help="rollouts per run; repeat for an accuracy-vs-tokens curve (default 1)",
    )
    parser.add_argument(
        "--verifier",
        default="exact",
        help="exact, numeric[:TOL], regex or pkg.mod:fn (default exact)",
    )
    parser.add_argument(
        "--k", action="append", type=int, metavar="K", help="pass@k / pass^k to report"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="runs in flight (4)")
    parser.add_argument("--plot", type=Path, metavar="OUT.svg", help="write the curves as SVG")
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="write the full report")
    parser.add_argument("--agent", help="a spec file or a name from [agents] in --config")
    parser.add_argument(
        "--config",
        type=Path,
        help="agentrt.toml: models, agents, MCP servers (default: the embedded model)",
    )
    add_placement_arguments(parser)
    return parser


OpenRunner = Callable[[argparse.Namespace], AbstractAsyncContextManager[Runner]]
"""Opens the runner for parsed ``eval`` arguments (the CLI builds a ``Runtime``)."""


async def eval_command(args: argparse.Namespace, open_runner: OpenRunner) -> EvalReport:
    """Run ``agentrt eval`` with parsed ``args``; prints the table (stdout)
    and writes the plot / JSON when asked."""
    tasks = load_tasks(args.tasks)
    strategies = [
        ScalingSpec(rollouts=n, aggregate=name)
        for name in args.strategy or ["majority"]
        for n in args.rollouts or [1]
    ]
    for spec in strategies:
        if spec.rollouts < 1:
            raise ConfigError(f"--rollouts must be >= 1, got {spec.rollouts}", where="eval")
    async with open_runner(args) as runner:
        report = await evaluate(
            runner,
            tasks,
            strategies,
            runs=args.runs,
            verifier=args.verifier,
            ks=args.k or (1, 2, 4, 8),
            concurrency=max(1, args.concurrency),
        )
    sys.stdout.write(format_table(report) + "\n")
    if args.plot is not None:
        from agentrt.runtime.cli.eval_plot import write_svg  # the plot imports this module

        write_svg(report, args.plot)
        sys.stdout.write(f"plot: {args.plot}\n")
    if args.json is not None:
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    return report


__all__ = [
    "Estimate",
    "EvalReport",
    "EvalTask",
    "Runner",
    "StrategyReport",
    "TaskRuns",
    "Verifier",
    "bootstrap_ci",
    "build_parser",
    "build_verifier",
    "eval_command",
    "evaluate",
    "exact",
    "format_table",
    "load_tasks",
    "normalize",
    "numeric",
    "pass_at_k",
    "pass_hat_k",
    "regex",
    "summarize",
    "wilson",
]
