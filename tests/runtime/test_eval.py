"""Evaluation: estimators, verifiers, the run over a task set, the table and the SVG."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentrt.protocols import Cost, RunResult, ScalingSpec, Usage
from agentrt.runtime.cli.eval import (
    EvalTask,
    bootstrap_ci,
    build_parser,
    build_verifier,
    eval_command,
    evaluate,
    format_table,
    load_tasks,
    pass_at_k,
    pass_hat_k,
    wilson,
)
from agentrt.runtime.cli.eval_plot import curves, write_svg
from agentrt.runtime.errors import ConfigError


def brute(n: int, c: int, k: int, *, every: bool) -> float:
    """Over all k-subsets of n runs (c passing), the share where any / every run passes."""
    runs = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(runs, k))
    hits = sum((all(s) if every else any(s)) for s in subsets)
    return hits / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 2), (10, 3, 1), (10, 3, 5), (8, 8, 3), (6, 0, 2)])
def test_pass_at_k_and_pass_hat_k_match_enumeration(n: int, c: int, k: int) -> None:
    assert math.isclose(pass_at_k(n, c, k), brute(n, c, k, every=False))
    assert math.isclose(pass_hat_k(n, c, k), brute(n, c, k, every=True))


def test_known_values_and_bad_input() -> None:
    assert math.isclose(pass_at_k(5, 2, 2), 0.7)
    assert math.isclose(pass_hat_k(5, 2, 2), 0.1)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(3, 1, 4)


def test_confidence_intervals() -> None:
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.490, abs=1e-3)
    assert hi == pytest.approx(0.943, abs=1e-3)
    values = [1.0] * 30 + [0.0] * 70
    blo, bhi = bootstrap_ci(values)
    assert blo < 0.3 < bhi
    assert blo > 0.18
    assert bhi < 0.42


def test_verifiers() -> None:
    task = EvalTask(id="1", task="q", answer="3.14159")
    assert build_verifier("exact")("  The answer is 3.14159. ", task)
    assert not build_verifier("exact")("3.1416", task)
    assert build_verifier("numeric:1e-3")("about 3.1416", task)
    assert not build_verifier("numeric")("3.1416", task)
    assert build_verifier("regex")("pi is 3.14159!", EvalTask(id="2", task="q", answer=r"3\.14"))
    by_path = build_verifier("agentrt.runtime.cli.eval:exact")  # any `pkg.mod:fn`
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


class FakeRunner:
    """Answers right on the runs where ``(call number) % period != 0``;
    majority uses 100 tokens a rollout, rtv 150."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, task: str, *, scaling: ScalingSpec) -> RunResult:
        self.calls += 1
        right = self.calls % (2 + scaling.rollouts) != 0
        per = 100 if scaling.aggregate == "majority" else 150
        tokens = per * scaling.rollouts
        return RunResult(
            run_id=f"r{self.calls}",
            status="succeeded",
            answer=task.upper() if right else "wrong",
            cost=Cost(usage=Usage(prompt_tokens=tokens - 10, completion_tokens=10), usd=0.001),
        )


@pytest.mark.anyio
async def test_evaluate_table_and_svg(tmp_path: Path) -> None:
    tasks = [EvalTask(id=str(i), task=f"t{i}", answer=f"T{i}") for i in range(5)]
    strategies = [ScalingSpec(rollouts=n, aggregate=a) for a in ("majority", "rtv") for n in (1, 2)]
    runner = FakeRunner()
    report = await evaluate(runner, tasks, strategies, runs=4, ks=(1, 2), concurrency=1)
    assert runner.calls == 5 * 4 * 4
    first = report.strategies[0]
    passed = sum(sum(t.passed) for t in first.tasks)
    assert first.pass_at[1].value == pytest.approx(passed / 20)
    assert first.pass_at[1].low <= first.pass_at[1].value <= first.pass_at[1].high
    assert first.pass_at[2].value >= first.pass_at[1].value >= first.pass_hat[2].value
    assert first.tokens_per_task == 100
    assert report.strategies[3].tokens_per_task == 300

    table = format_table(report)
    assert "pass@2" in table
    assert "pass^2" in table
    assert len(table.splitlines()) == 2 + 4

    lines = curves(report)
    assert sorted(lines) == ["majority", "rtv"]
    assert [p[0] for p in lines["rtv"]] == [150, 300]
    out = write_svg(report, tmp_path / "curve.svg")
    root = ET.parse(out).getroot()  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    groups = root.findall("{http://www.w3.org/2000/svg}g")
    assert [g.get("data-name") for g in groups] == ["majority", "rtv"]
    assert all(len(g.findall("{http://www.w3.org/2000/svg}circle")) == 2 for g in groups)


@pytest.mark.anyio
async def test_eval_command_prints_the_table_and_writes_plot_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "task": "x", "answer": "X"}\n{"id": "b", "task": "y", "answer": "Y"}\n'
    )
    runner = FakeRunner()

    @contextlib.asynccontextmanager
    async def open_runner(args: argparse.Namespace) -> AsyncIterator[FakeRunner]:
        yield runner

    args = build_parser().parse_args(
        [
            str(tasks),
            "--runs",
            "3",
            "--strategy",
            "majority",
            "--strategy",
            "rtv",
            "--rollouts",
            "1",
            "--rollouts",
            "3",
            "--plot",
            str(tmp_path / "out.svg"),
            "--json",
            str(tmp_path / "out.json"),
        ]
    )
    report = await eval_command(args, open_runner)
    assert runner.calls == 2 * 3 * 4
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:4] == ["strategy", "N", "pass@1", "pass@2"]
    assert "plot:" in printed
    ET.parse(tmp_path / "out.svg")
    saved = json.loads((tmp_path / "out.json").read_text())
    assert len(saved["strategies"]) == len(report.strategies) == 4
