"""Evaluation from one pool: every k from one draw of N rollouts per task
(model calls counted), aggregators on k-subsets with oracle@k beside them,
paired comparisons, the table, the export, the plot and bad input."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest

from agentrt.protocols import (
    Cost,
    RunResult,
    ScalingSpec,
    Trajectory,
    TrajectorySummary,
    Usage,
)
from agentrt.runtime.evaluation._eval import (
    EvalReport,
    build_parser,
    choose_subsets,
    default_ks,
    eval_command,
    evaluate_pools,
    format_table,
    parse_aggregate,
)
from agentrt.runtime.evaluation._plot import curves, write_svg
from agentrt.runtime.evaluation._task_sets import EvalTask, build_verifier, load_tasks
from agentrt.runtime.evaluation._trajectory_data import Pool
from agentrt.runtime.kernel._errors import ConfigError

# -- a population with known answers ------------------------------------------------

# Task i's pool: the answers its rollouts give, in order (N = 5).
ANSWERS = {
    "a": ["A", "A", "x", "A", "y"],
    "b": ["x", "B", "x", "y", "B"],
    "c": ["C", "C", "C", "C", "C"],
    "d": ["x", "x", "y", "z", "x"],
}
N = 5


class PoolRunner:
    """Draws each task's scripted pool; aggregates by plurality (first seen
    wins a tie), charging 10 tokens per summary aggregated.  Counts calls."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []
        self.aggregations: list[tuple[str, int]] = []

    async def run(self, task: str, *, scaling: ScalingSpec, events: object = None) -> RunResult:
        self.runs.append((task, scaling.rollouts))
        answers = ANSWERS[task]
        summaries = [
            TrajectorySummary(
                rollout_id=f"{task}-r{i}",
                answer=answer,
                cost=Cost(usage=Usage(prompt_tokens=90, completion_tokens=10), model_calls=1),
            )
            for i, answer in enumerate(answers[: scaling.rollouts])
        ]
        return RunResult(
            run_id=task,
            status="succeeded",
            answer=answers[0],
            summaries=summaries,
            cost=Cost(model_calls=len(summaries)),
        )

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        scaling: ScalingSpec,
        trajectories: Mapping[str, Trajectory] | None = None,
    ) -> RunResult:
        self.aggregations.append((scaling.aggregate, len(summaries)))
        answer = plurality([s.answer for s in summaries])
        calls = 0 if scaling.aggregate == "majority" else len(summaries) - 1
        return RunResult(
            run_id="agg",
            status="succeeded",
            answer=answer,
            cost=Cost(usage=Usage(prompt_tokens=10 * calls), model_calls=calls),
        )


def plurality(answers: Sequence[str | None]) -> str | None:
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == top)


def pools() -> list[Pool]:
    return [
        Pool(
            group=task,
            task=task,
            task_id=task,
            expected=task.upper(),
            summaries=[
                TrajectorySummary(
                    rollout_id=f"{task}-r{i}",
                    answer=a,
                    cost=Cost(usage=Usage(prompt_tokens=90, completion_tokens=10), model_calls=1),
                )
                for i, a in enumerate(answers)
            ],
        )
        for task, answers in ANSWERS.items()
    ]


def brute_majority_at(k: int) -> float:
    """Mean over tasks of the share of k-subsets whose plurality is right."""
    shares = []
    for task, answers in ANSWERS.items():
        subsets = list(itertools.combinations(answers, k))
        shares.append(sum(plurality(list(s)) == task.upper() for s in subsets) / len(subsets))
    return sum(shares) / len(shares)


# -- the pool -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_every_k_comes_from_one_pool_and_each_aggregator_from_its_subsets() -> None:
    runner = PoolRunner()
    specs = [parse_aggregate("majority"), parse_aggregate("rtv:g=2,v=2")]
    report = await evaluate_pools(runner, pools(), specs, subsets=100)
    assert runner.runs == []  # no rollout is drawn again: the pool is given
    ks = default_ks(N)
    assert ks == [1, 2, 4, 5]
    # Every k-subset of every pool is aggregated once per aggregator (C(5,k) <= 100).
    expected_calls = {k: 4 * len(list(itertools.combinations(range(N), k))) for k in ks}
    for name in ("majority", "rtv"):
        sizes = Counter(size for agg, size in runner.aggregations if agg == name)
        assert sizes == expected_calls
    majority = report.aggregators[0]
    for point in majority.points:
        assert point.exact
        assert point.accuracy.value == pytest.approx(brute_majority_at(point.k))
    # oracle@k is pass@k; the aggregator never beats it here (it only picks).
    for point, curve in zip(majority.points, report.curve, strict=True):
        assert point.oracle.value == pytest.approx(curve.pass_at.value)
        assert point.accuracy.value <= point.oracle.value + 1e-12
    # Task d never has a right rollout: at k = N oracle is 3/4 and majority
    # picked a right one in every pool that had one except b (x x y B B: x first).
    at_n = majority.points[-1]
    assert at_n.oracle.value == pytest.approx(0.75)
    assert at_n.accuracy.value == pytest.approx(0.5)
    assert at_n.picked == pytest.approx(2 / 3)
    # Cost per task: k rollouts of 100 tokens, plus rtv's k-1 calls of 10 tokens.
    rtv_at_n = report.aggregators[1].points[-1]
    assert rtv_at_n.tokens_per_task == pytest.approx(N * 100 + (N - 1) * 10)
    assert rtv_at_n.model_calls_per_task == pytest.approx(N + N - 1)
    assert report.aggregation_model_calls == sum(
        (size - 1) for agg, size in runner.aggregations if agg == "rtv"
    )


@pytest.mark.anyio
async def test_eval_command_draws_one_pool_per_task_prints_curves_and_a_paired_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": t, "task": t, "answer": t.upper()}) + "\n" for t in ANSWERS)
    )
    runner = PoolRunner()

    @contextlib.asynccontextmanager
    async def open_runner(args: argparse.Namespace) -> AsyncIterator[PoolRunner]:
        yield runner

    argv = [
        str(tasks),
        "--rollouts",
        str(N),
        "--aggregate",
        "majority",
        "--aggregate",
        "rtv:v=2",
        "--subsets",
        "3",
        "--export",
        str(tmp_path / "pool.jsonl"),
        "--plot",
        str(tmp_path / "out.svg"),
        "--json",
        str(tmp_path / "out.json"),
        "--keep-workspaces",
    ]
    report = await eval_command(build_parser().parse_args(argv), open_runner)
    # One run per task, of N rollouts: the curves of every k come from it.
    assert sorted(runner.runs) == [(t, N) for t in sorted(ANSWERS)]
    assert report.pool_model_calls == 4 * N
    # --subsets 3: at most 3 subsets per task and k (all at k = N: C(5,5) = 1).
    sizes = Counter(size for agg, size in runner.aggregations if agg == "majority")
    assert sizes == {1: 12, 2: 12, 4: 12, 5: 4}
    printed = capsys.readouterr().out
    assert f"pool: 4 tasks x {N} rollouts, drawn once ({4 * N} model calls)" in printed
    assert "compare majority@5 - pass@1:" in printed
    assert "workspaces kept in: " in printed
    assert "compare majority@5 - rtv:v=2@5:" in printed
    assert "bounded variance (few tasks)" in printed
    assert "power: to detect a 2-point change in pass@1" in printed
    assert "* not to be trusted: fewer than 10 tasks" in printed
    saved = json.loads((tmp_path / "out.json").read_text())
    assert [c["aggregate"] for c in saved["aggregators"]] == ["majority", "rtv:v=2"]
    root = ET.parse(tmp_path / "out.svg").getroot()
    groups = root.findall("{http://www.w3.org/2000/svg}g")
    assert [g.get("data-name") for g in groups] == ["majority", "rtv:v=2"]
    assert sorted(curves(report)) == ["majority", "rtv:v=2"]

    # The exported pool evaluates again without drawing a rollout.
    again = PoolRunner()

    @contextlib.asynccontextmanager
    async def reopen(args: argparse.Namespace) -> AsyncIterator[PoolRunner]:
        yield again

    args = build_parser().parse_args(["--from", str(tmp_path / "pool.jsonl"), "--subsets", "3"])
    second = await eval_command(args, reopen)
    assert again.runs == []
    assert second.pool_model_calls == 0
    assert [p.pass_at.value for p in second.curve] == [p.pass_at.value for p in report.curve]
    assert second.aggregators[0].points[-1].accuracy == report.aggregators[0].points[-1].accuracy


def test_the_table_and_svg_of_a_report(tmp_path: Path) -> None:
    report = _report()
    table = format_table(report)
    lines = table.splitlines()
    assert lines[2].split() == ["k", "pass@k", "pass^k", "tokens/task", "usd/task"]
    assert "oracle@k" in table
    assert "picked" in table
    out = write_svg(report, tmp_path / "c.svg")
    root = ET.parse(out).getroot()
    (group,) = root.findall("{http://www.w3.org/2000/svg}g")
    assert len(group.findall("{http://www.w3.org/2000/svg}circle")) == len(default_ks(N))


def _report() -> EvalReport:
    import anyio

    async def go() -> EvalReport:
        return await evaluate_pools(PoolRunner(), pools(), [parse_aggregate("majority")])

    return anyio.run(go)


def test_choose_subsets_enumerates_few_and_samples_many() -> None:
    import random

    every, exact = choose_subsets(5, 2, 10, random.Random(0))
    assert exact
    assert every == list(itertools.combinations(range(5), 2))
    some, exact = choose_subsets(16, 8, 20, random.Random(0))
    assert not exact
    assert len(set(some)) == 20
    assert all(len(s) == 8 and list(s) == sorted(s) for s in some)


# -- task files and verifiers --------------------------------------------------------


def test_verifiers() -> None:
    task = EvalTask(id="1", task="q", answer="3.14159")
    assert build_verifier("exact")("  The answer is 3.14159. ", task)
    assert not build_verifier("exact")("3.1416", task)
    assert build_verifier("numeric:1e-3")("about 3.1416", task)
    assert not build_verifier("numeric")("3.1416", task)
    assert build_verifier("regex")("pi is 3.14159!", EvalTask(id="2", task="q", answer=r"3\.14"))
    by_path = build_verifier("agentrt.runtime.evaluation._task_sets:exact")  # any `pkg.mod:fn`
    assert by_path("3.14159", task)
    assert not by_path("2.7", task)
    with pytest.raises(ConfigError, match="unknown verifier"):
        build_verifier("fuzzy")
    with pytest.raises(ConfigError, match="cannot load"):
        build_verifier("no_such_mod:fn")


def test_load_tasks(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "question": "2+2?", "answer": 4}\n\n{"task": "x"}\n')
    tasks = load_tasks(path)
    assert [(t.id, t.task, t.answer) for t in tasks] == [("a", "2+2?", "4"), ("3", "x", None)]
    path.write_text('{"answer": 1}\n')
    with pytest.raises(ConfigError, match=r"tasks\.jsonl:1"):
        load_tasks(path)


# -- bad input: one clear error, before any model call --------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--aggregate", "majorty"], r"--aggregate 'majorty'.*majorty"),
        (["--aggregate", "rtv:vv=3"], r"--aggregate 'rtv:vv=3'.*vv"),
        (["--aggregate", "rtv:v"], r"expected KEY=VALUE"),
        (["--aggregate", "pdr"], r"runs new rollouts"),
        (["--compare", "rtv@5", "pass@1"], r"--compare.*'rtv@5'"),
        (["--k", "9"], r"--k.*1\.\.5"),
    ],
)
async def test_bad_arguments_fail_before_any_run(
    tmp_path: Path, argv: list[str], match: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "task": "a", "answer": "A"}\n')
    runner = PoolRunner()

    @contextlib.asynccontextmanager
    async def open_runner(args: argparse.Namespace) -> AsyncIterator[PoolRunner]:
        yield runner

    args = build_parser().parse_args([str(tasks), "--rollouts", "5", *argv])
    with pytest.raises(ConfigError, match=match):
        await eval_command(args, open_runner)
    assert runner.runs == []
    assert runner.aggregations == []
