"""``agentrt eval --swe``: coding tasks (SWE-bench-format instances) drawn
into pools, each rollout in its own copy of the task's repository, its diff
its answer and its tests its verdict; the SWE-bench predictions written
from one aggregation of each task's whole pool; the coding part of the
report.

Owns ``draw_coding_pools``, ``tests_verifier`` (correct = that diff passed
the task's tests), ``predict`` and ``CodingOutcome``.  Estimation is
``eval.evaluate_pools``; a task's rollouts are ``engine.coding_task``; the
file formats are ``engine.swebench``.  Must not print.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import msgspec

from agentrt.aggregators._compose import parse_config
from agentrt.protocols._ids import nth_rollout_id
from agentrt.protocols._run import ScalingSpec
from agentrt.protocols._trajectory import TrajectorySummary
from agentrt.runtime.evaluation._coding_task import (
    CodingRun,
    CodingRunner,
    CodingTask,
    run_coding_task,
)
from agentrt.runtime.evaluation._swebench import Prediction, SweInstance
from agentrt.runtime.evaluation._task_sets import EvalTask, Verifier
from agentrt.runtime.evaluation._trajectory_data import Pool, TrajectoryRecorder
from agentrt.runtime.kernel._errors import ConfigError, UserError
from agentrt.runtime.observe._log import get_logger

if TYPE_CHECKING:
    from agentrt.runtime.evaluation._eval import AggregateSpec, EvalReport, OpenRunner

__all__ = [
    "EXPECTED",
    "CodingOutcome",
    "add_swe_arguments",
    "check_swe_arguments",
    "default_repo_cache",
    "draw_coding_pools",
    "format_outcomes",
    "predict",
    "test_settings",
    "tests_verifier",
]

log = get_logger(__name__)

#: A coding pool's "expected answer": correctness is its tests, not a string.
EXPECTED = "the task's tests pass"


class CodingOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One task in agentrt's own report: rollouts whose tests passed, the
    predicted patch's verdict, why the task could not run (``error``) and
    the wall time its tests took."""

    instance_id: str
    rollouts: int
    passed: int
    """Rollouts whose tests passed."""
    with_diff: int
    """Rollouts that changed something."""
    prediction_passed: bool | None = None
    """The predicted patch's tests (``None``: no tests, or no patch)."""
    aggregate: str = ""
    rationale: str = ""
    patch: str = ""
    """The predicted patch (empty: none)."""
    refined: int = 0
    """Rollouts the run's aggregator added (``--run-aggregate pdr``), tested too."""
    error: str | None = None
    verify_s: float = 0.0
    duration_s: float = 0.0


def default_repo_cache() -> Path:
    """``$TMPDIR/agentrt-repo-cache``: base snapshots unless ``--repo-cache``."""
    return Path(tempfile.gettempdir()) / "agentrt-repo-cache"


def _passing(summaries: Sequence[TrajectorySummary]) -> dict[str, bool]:
    """Each diff's verdict (a diff that passed once passes)."""
    table: dict[str, bool] = {}
    for s in summaries:
        if s.answer is not None and s.verification is not None:
            table[s.answer] = table.get(s.answer, False) or s.verification.passed
    return table


def tests_verifier(pools: Sequence[Pool]) -> Verifier:
    """Correct = the answer is a diff of that task's pool whose tests passed."""
    tables = {p.task_id or p.group: _passing(p.summaries) for p in pools}

    def verify(answer: str | None, task: EvalTask) -> bool:
        return answer is not None and tables.get(task.id, {}).get(answer, False)

    return verify


async def draw_coding_pools(
    runner: CodingRunner,
    items: Sequence[tuple[SweInstance, CodingTask]],
    *,
    rollouts: int,
    cache: Path,
    concurrency: int = 1,
    workspace_root: Path | None = None,
    keep: bool = False,
    aggregator: ScalingSpec | None = None,
    label: str = "",
) -> tuple[list[Pool], int, list[CodingOutcome]]:
    """One run of ``rollouts`` rollouts per task, ``concurrency`` tasks at
    once; the pools, the model calls made and each task's outcome.  A task
    that cannot run (its repository, its base commit) or whose run fails
    gets failed rollouts with the reason, and the others go on.
    ``aggregator`` (labelled ``label``): each run chooses its task's patch
    itself (PDR may run refinement rollouts); the outcomes carry it."""
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    pools: list[Pool | None] = [None] * len(items)
    outcomes: list[CodingOutcome | None] = [None] * len(items)
    calls = [0] * len(items)

    async def one(i: int, instance: SweInstance, task: CodingTask) -> None:
        recorder = TrajectoryRecorder()
        async with limiter:
            try:
                run = await run_coding_task(
                    runner,
                    task,
                    rollouts=rollouts,
                    cache=cache,
                    workspace_root=workspace_root,
                    keep=keep,
                    events=recorder,
                    aggregator=aggregator,
                )
            except UserError:
                raise
            except Exception as exc:
                log.warning("eval.coding_run_failed", task=task.id, error=repr(exc))
                why = f"run failed: {exc!r}"
                summaries = [
                    TrajectorySummary(rollout_id=nth_rollout_id(task.id, j), failure_modes=[why])
                    for j in range(rollouts)
                ]
                outcomes[i] = CodingOutcome(
                    instance_id=task.id, rollouts=rollouts, passed=0, with_diff=0, error=why
                )
            else:
                summaries = run.summaries
                calls[i] = run.model_calls
                outcome = CodingOutcome(
                    instance_id=task.id,
                    rollouts=len(summaries),
                    passed=sum(1 for s in summaries if s.verification and s.verification.passed),
                    with_diff=sum(1 for s in summaries if s.answer),
                    error=run.error,
                    verify_s=round(run.verify_s, 3),
                    duration_s=round(run.duration_s, 3),
                )
                outcomes[i] = outcome if aggregator is None else _chosen_in_run(outcome, run, label)
        for j in range(len(summaries), rollouts):  # cut short (a budget)
            summaries.append(
                TrajectorySummary(rollout_id=f"{task.id}-missing{j}", failure_modes=["missing"])
            )
        pools[i] = Pool(
            group=task.id,
            task=task.problem,
            summaries=summaries,
            trajectories=recorder.trajectories(task.problem),
            task_id=task.id,
            expected=EXPECTED,
        )

    async with anyio.create_task_group() as tg:
        for i, (instance, task) in enumerate(items):
            tg.start_soon(one, i, instance, task)
    return (
        [p for p in pools if p is not None],
        sum(calls),
        [o for o in outcomes if o is not None],
    )


async def predict(
    runner: CodingRunner,
    pools: Sequence[Pool],
    outcomes: Sequence[CodingOutcome],
    *,
    scaling: ScalingSpec,
    label: str,
    model_name: str,
) -> tuple[list[Prediction], list[CodingOutcome]]:
    """Each task's prediction: ``scaling``'s aggregator over its whole pool
    (an empty patch when nothing was chosen); the outcomes with the
    prediction's verdict.  The runner must have ``aggregate`` (a ``Runtime``)."""
    aggregate = getattr(runner, "aggregate")  # noqa: B009 (the Runner protocol has it)
    verify = tests_verifier(pools)
    predictions: list[Prediction] = []
    updated: list[CodingOutcome] = []
    by_id = {o.instance_id: o for o in outcomes}
    for pool in pools:
        task_id = pool.task_id or pool.group
        try:
            result = await aggregate(
                pool.task, pool.summaries, scaling=scaling, trajectories=pool.trajectories
            )
            patch = result.raw_answer if result.raw_answer is not None else result.answer
            patch, rationale = patch or "", result.rationale
        except UserError:
            raise
        except Exception as exc:
            log.warning("eval.predict_failed", task=task_id, error=repr(exc))
            patch, rationale = "", f"aggregation failed: {exc!r}"
        predictions.append(
            Prediction(instance_id=task_id, model_name_or_path=model_name, model_patch=patch)
        )
        outcome = by_id.get(task_id)
        if outcome is not None:
            tested = any(s.verification is not None for s in pool.summaries)
            task = EvalTask(id=task_id, task=pool.task, answer=EXPECTED)
            updated.append(
                msgspec.structs.replace(
                    outcome,
                    patch=patch,
                    prediction_passed=verify(patch, task) if tested and patch else None,
                    aggregate=label,
                    rationale=rationale,
                )
            )
    return predictions, updated


def _chosen_in_run(outcome: CodingOutcome, run: CodingRun, label: str) -> CodingOutcome:
    """``outcome`` with the patch the run's own aggregator chose and its verdict."""
    every = [*run.summaries, *run.refined]
    tested = any(s.verification is not None for s in every)
    patch = run.answer or ""
    return msgspec.structs.replace(
        outcome,
        patch=patch,
        aggregate=label,
        rationale=run.rationale,
        refined=len(run.refined),
        prediction_passed=_passing(every).get(patch, False) if tested and patch else None,
    )


def format_outcomes(outcomes: Sequence[CodingOutcome]) -> str:
    """The coding part of the table: per task, rollouts passing, the
    prediction's verdict, errors."""
    lines = ["", "coding tasks: rollouts whose tests passed, and the predicted patch"]
    width = max((len(o.instance_id) for o in outcomes), default=8)
    for o in outcomes:
        verdict = {True: "passes", False: "fails", None: "-"}[o.prediction_passed]
        line = (
            f"  {o.instance_id.ljust(width)}  {o.passed}/{o.rollouts} passed, "
            f"{o.with_diff} with a diff"
            + (f", {o.refined} refinements" if o.refined else "")
            + f"; prediction ({o.aggregate or '-'}): {verdict}; "
            f"tests {o.verify_s:.1f} s of {o.duration_s:.1f} s"
        )
        if o.error:
            line += f"\n  {''.ljust(width)}  error: {o.error}"
        lines.append(line)
    solved = sum(1 for o in outcomes if o.prediction_passed)
    lines.append(f"  predictions passing their tests: {solved}/{len(outcomes)}")
    return "\n".join(lines)


# -- the command line ----------------------------------------------------------------


def add_swe_arguments(parser: argparse.ArgumentParser) -> None:
    """``agentrt eval``'s coding-task options."""
    group = parser.add_argument_group(
        "coding tasks (SWE-bench format)",
        "TASKS.jsonl holds SWE-bench instances: each rollout works in its own copy of the "
        "instance's repository at base_commit, its diff is its answer, and the task's tests "
        "decide whether it is right",
    )
    group.add_argument(
        "--swe", action="store_true", help="TASKS is SWE-bench instances (JSONL or .parquet)"
    )
    group.add_argument(
        "--repos", type=Path, metavar="DIR", help="local clones, DIR/owner__name (or DIR/name)"
    )
    group.add_argument(
        "--predictions",
        type=Path,
        metavar="OUT.jsonl",
        help="write predictions for the swebench harness (the first --aggregate over each "
        "task's whole pool)",
    )
    group.add_argument(
        "--model-name", default="agentrt", help="model_name_or_path of the predictions"
    )
    group.add_argument(
        "--harness-instances",
        type=Path,
        metavar="OUT.jsonl",
        help="write the instances as the swebench harness's --dataset_name reads them (with "
        "image, eval_script, log_parser, eval_type; made from the test command when missing)",
    )
    group.add_argument(
        "--traj-dir",
        type=Path,
        metavar="DIR",
        help="write each rollout as mini-SWE-agent's DIR/<instance_id>/<rollout>.traj.json",
    )
    group.add_argument(
        "--test-command",
        metavar="CMD",
        help="how to run an instance's tests when it has no test_command; {tests} becomes "
        "its FAIL_TO_PASS and PASS_TO_PASS ids, e.g. 'python3 -m pytest -q {tests}'",
    )
    group.add_argument(
        "--test-timeout", type=float, default=300.0, help="seconds per test run (300)"
    )
    group.add_argument(
        "--test-path",
        action="append",
        metavar="DIR",
        help="a host directory the tests need (a virtualenv...), shown read-only; repeatable",
    )
    group.add_argument(
        "--test-env", action="append", metavar="K=V", help="a variable for the tests; repeatable"
    )
    group.add_argument(
        "--repo-cache",
        type=Path,
        metavar="DIR",
        help="where base snapshots of the repositories go (default: $TMPDIR/agentrt-repo-cache)",
    )
    group.add_argument(
        "--run-aggregate",
        metavar="NAME[:K=V,...]",
        help="choose each task's patch inside its run instead (pdr allowed: its refinement "
        "rollouts work on the repository and are tested too); the predictions come from it",
    )
    group.add_argument(
        "--keep-workspaces",
        action="store_true",
        help="leave each rollout's workspace for debugging ($TMPDIR/agentrt-workspaces/RUN/rN; "
        "without --swe, the sandbox workspaces of every run); also keep_workspaces = true",
    )


def test_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``TestVerifierConfig`` fields from the command line."""
    env: dict[str, str] = {}
    for item in args.test_env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected K=V, got {item!r}", where="--test-env")
        env[key] = value
    for path in args.test_path or []:
        if not Path(path).is_dir():
            raise ConfigError(f"{path!r} is not a directory", where="--test-path")
    return {
        "timeout_s": args.test_timeout,
        "read_only_paths": tuple(str(Path(p).resolve()) for p in args.test_path or []),
        "env": env,
    }


def run_aggregator(text: str) -> ScalingSpec:
    """``--run-aggregate NAME[:K=V,...]`` as the aggregation a run does
    itself (values read as JSON when they parse), checked here;
    ``ConfigError`` naming the option otherwise.  The engine builds it."""
    name, _, rest = text.partition(":")
    options: dict[str, Any] = {"name": name.strip()}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected KEY=VALUE, got {part!r}", where="--run-aggregate")
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    parse_config(options, f"--run-aggregate {text!r}")
    name = str(options.pop("name"))
    return ScalingSpec(aggregate=name, options=options)


def check_swe_arguments(args: argparse.Namespace) -> None:
    """``ConfigError`` for coding options without ``--swe`` or ``--swe`` without its needs."""
    if not args.swe:
        given = [
            flag
            for flag, value in (
                ("--repos", args.repos),
                ("--predictions", args.predictions),
                ("--harness-instances", args.harness_instances),
                ("--traj-dir", args.traj_dir),
                ("--test-command", args.test_command),
                ("--test-path", args.test_path),
                ("--run-aggregate", args.run_aggregate),
            )
            if value
        ]
        if given:
            raise ConfigError(f"{', '.join(given)} need --swe", where="eval")
        return
    if args.tasks is None:
        raise ConfigError(
            "--swe needs a TASKS.jsonl (or .parquet) of SWE-bench instances", where="eval"
        )
    if args.repos is None:
        raise ConfigError("--swe needs --repos DIR (the local clones)", where="eval")
    if not args.repos.is_dir():
        raise ConfigError(f"{str(args.repos)!r} is not a directory", where="--repos")
    if args.run_aggregate:
        run_aggregator(args.run_aggregate)  # a bad spec fails before any run
    if not 0 < args.test_timeout <= 3600:
        raise ConfigError(f"must lie in (0, 3600], got {args.test_timeout}", where="--test-timeout")


class SweEvalReport(msgspec.Struct, frozen=True, kw_only=True):
    """``agentrt eval --swe --json``: the estimates and each task's outcome."""

    report: Any
    """The ``EvalReport`` (pass@k, aggregators at k, comparisons, power)."""
    tasks: list[CodingOutcome]
    predictions: str | None = None
    """Where the predictions were written."""


async def swe_eval_command(
    args: argparse.Namespace, open_runner: OpenRunner, aggregates: Sequence[AggregateSpec]
) -> EvalReport:
    """``agentrt eval --swe`` with checked ``args`` and ``--aggregate``
    specs: draw the pools, estimate, predict, print, write."""
    import sys

    from agentrt.runtime.evaluation import _eval as evaluation  # it imports this module lazily
    from agentrt.runtime.evaluation._swebench import (
        load_instances,
        write_harness_instances,
        write_predictions,
    )

    items = load_instances(
        args.tasks,
        repos=args.repos,
        test_command=args.test_command,
        test_settings=test_settings(args),
    )
    if args.harness_instances is not None:  # before the run: a missing eval script stops it
        write_harness_instances(
            args.harness_instances, [i for i, _ in items], test_command=args.test_command
        )
    async with open_runner(args) as runner:
        coding = cast(CodingRunner, runner)
        in_run = run_aggregator(args.run_aggregate) if args.run_aggregate else None
        pools, calls, outcomes = await draw_coding_pools(
            coding,
            items,
            rollouts=args.rollouts,
            cache=args.repo_cache or default_repo_cache(),
            concurrency=args.concurrency,
            keep=args.keep_workspaces,
            aggregator=in_run,
            label=args.run_aggregate or "",
        )
        if args.export is not None:
            from agentrt.runtime.evaluation._trajectory_data import write_pools

            write_pools(args.export, pools)
        if args.traj_dir is not None:
            from agentrt.runtime.evaluation._swe_trajectories import write_traj_files

            write_traj_files(args.traj_dir, pools)
        report = await evaluation.evaluate_arguments(
            args, runner, pools, aggregates, verifier=tests_verifier(pools), pool_model_calls=calls
        )
        first = aggregates[0]
        if in_run is None:
            predictions, outcomes = await predict(
                coding,
                pools,
                outcomes,
                scaling=first.scaling,
                label=first.label,
                model_name=args.model_name,
            )
        else:
            predictions = [
                Prediction(
                    instance_id=o.instance_id,
                    model_name_or_path=args.model_name,
                    model_patch=o.patch,
                )
                for o in outcomes
            ]
    sys.stdout.write(evaluation.format_table(report) + "\n" + format_outcomes(outcomes) + "\n")
    if args.predictions is not None:
        write_predictions(args.predictions, predictions)
        sys.stdout.write(f"predictions: {args.predictions}\n")
    evaluation.note_pool_and_plot(args, report)
    if args.json is not None:
        whole = SweEvalReport(
            report=report,
            tasks=list(outcomes),
            predictions=None if args.predictions is None else str(args.predictions),
        )
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(whole)))
    return report
