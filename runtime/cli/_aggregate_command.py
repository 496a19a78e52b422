"""``agentrt aggregate``: re-aggregate rollouts that already ran, with any
aggregator, without running a rollout again.

Owns the command: its arguments, reading the pools (an exported ``.jsonl``
or ``.parquet`` file, or the daemon's run store: ``trajectory_data``),
aggregating each through the ``Runtime`` (``Runtime.aggregate``: judges on
the configured models), printing one line per pool, and writing the pools
out (``--export``: how a daemon run's trajectories become a file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import msgspec

from agentrt.protocols._run import RunResult
from agentrt.runtime.cli._flags import add_placement_arguments
from agentrt.runtime.evaluation._eval import OpenRunner, parse_aggregate
from agentrt.runtime.evaluation._task_sets import EvalTask, build_verifier
from agentrt.runtime.evaluation._trajectory_data import Pool, read_pools, write_pools
from agentrt.runtime.kernel._errors import AgentrtError, UserError
from agentrt.runtime.observe._log import configure_logging


class PoolResult(msgspec.Struct, frozen=True, kw_only=True):
    """One pool re-aggregated."""

    group: str
    task: str
    rollouts: int
    answered: int
    answer: str | None
    winner_rationale: str
    expected: str | None
    correct: bool | None
    """``None`` when the pool has no expected answer."""
    model_calls: int
    tokens: int
    usd: float


def build_parser(prog: str = "agentrt aggregate") -> argparse.ArgumentParser:
    """The ``agentrt aggregate`` command line."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Re-aggregate stored rollouts with any aggregator, running no rollout: SOURCE is "
            "an exported .jsonl/.parquet file (agentrt eval --export, agentrt aggregate "
            "--export) or the daemon's run store (a SQLite file)."
        ),
    )
    parser.add_argument("source", type=Path, metavar="SOURCE", help="a file or a run store")
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help="a run of the store to take (repeatable; default every finished run)",
    )
    parser.add_argument(
        "--aggregate",
        default="majority",
        metavar="NAME[:K=V,...]",
        help="the aggregator and its options, e.g. rtv:g=2,v=4 (default majority)",
    )
    parser.add_argument(
        "--verifier",
        default="exact",
        help="how an answer is checked against a pool's expected one (default exact)",
    )
    parser.add_argument(
        "--export",
        type=Path,
        metavar="OUT",
        help="also write the pools read (.jsonl, or .parquet with pyarrow)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--agent", help="whose first model judges ask (a spec or [agents] name)")
    parser.add_argument("--model", help="the model judges ask (a backend or model)")
    parser.add_argument(
        "--config", type=Path, help="agentrt.toml: the models (default: the embedded model)"
    )
    add_placement_arguments(parser)
    return parser


async def aggregate_command(args: argparse.Namespace, open_runner: OpenRunner) -> list[PoolResult]:
    """Run ``agentrt aggregate`` with parsed ``args``: prints one line per
    pool (or JSON with ``--json``).  A bad aggregator, option, source or
    schema version is a ``ConfigError`` before any model call."""
    spec = parse_aggregate(args.aggregate)
    build_verifier(args.verifier)  # a bad one fails now
    pools = await read_pools(args.source, args.run)
    if args.export is not None:
        write_pools(args.export, pools)
    results: list[PoolResult] = []
    async with open_runner(args) as runner:
        for pool in pools:
            result = await runner.aggregate(
                pool.task, pool.summaries, scaling=spec.scaling, trajectories=pool.trajectories
            )
            results.append(_result(pool, result, args.verifier))
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(results)).decode() + "\n")
    else:
        sys.stdout.write(format_results(results, spec.label) + "\n")
        if args.export is not None:
            sys.stdout.write(f"exported: {args.export}\n")
    return results


def _result(pool: Pool, result: RunResult, verifier: str) -> PoolResult:
    correct: bool | None = None
    if pool.expected is not None:
        task = EvalTask(id=pool.group, task=pool.task, answer=pool.expected, verifier=None)
        check = build_verifier(pool.verifier) if pool.verifier else build_verifier(verifier)
        correct = result.answer is not None and bool(check(result.answer, task))
    return PoolResult(
        group=pool.group,
        task=pool.task,
        rollouts=len(pool.summaries),
        answered=sum(1 for s in pool.summaries if s.answer is not None and s.answer.strip()),
        answer=result.answer,
        winner_rationale=result.rationale,
        expected=pool.expected,
        correct=correct,
        model_calls=result.cost.model_calls,
        tokens=result.cost.usage.total_tokens,
        usd=result.cost.usd,
    )


def format_results(results: Sequence[PoolResult], label: str) -> str:
    """One line per pool, then the accuracy when answers were expected."""
    lines = []
    for r in results:
        verdict = (
            ""
            if r.correct is None
            else f"; expected {r.expected}: " + ("right" if r.correct else "wrong")
        )
        lines.append(
            f"{r.group}: {r.answer if r.answer is not None else '(no answer)'} "
            f"({r.answered}/{r.rollouts} rollouts answered{verdict}; {label}: "
            f"{r.model_calls} model calls, {r.tokens} tokens)"
        )
    judged = [r for r in results if r.correct is not None]
    if judged:
        right = sum(bool(r.correct) for r in judged)
        lines.append(f"accuracy: {right}/{len(judged)} ({right / len(judged):.3f})")
    lines.append(f"model calls: {sum(r.model_calls for r in results)} (no rollout was run)")
    return "\n".join(lines)


def aggregate_main(argv: list[str]) -> int:
    """``agentrt aggregate``: exit 0, 2 for a user error, 1 for a failure."""
    from agentrt.runtime.cli._run_command import eval_runner

    args = build_parser().parse_args(argv)
    configure_logging("WARNING")
    try:
        anyio.run(lambda: aggregate_command(args, eval_runner), backend="asyncio")
    except UserError as error:
        sys.stderr.write(f"agentrt: {' '.join(str(error).split())}\n")
        return 2
    except AgentrtError as error:
        sys.stderr.write(f"agentrt: {' '.join(str(error).split())}\n")
        return 1
    return 0


__all__ = ["PoolResult", "aggregate_command", "aggregate_main", "build_parser", "format_results"]
