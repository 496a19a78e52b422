"""Evaluation and re-aggregation on the real engine: ``agentrt eval`` draws
each task's pool once (the backend's calls counted), its export and the
daemon's store both re-aggregate without a rollout, and a file of another
schema version is refused naming where."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from agentrt.aggregators import SimulatedJudge
from agentrt.protocols import (
    ModelRequest,
    RunRequest,
    ScalingSpec,
    TrajectorySummary,
    UserMessage,
)
from agentrt.runtime.cli._aggregate_command import aggregate_command
from agentrt.runtime.cli._aggregate_command import build_parser as aggregate_parser
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.evaluation._eval import OpenRunner, build_parser, eval_command
from agentrt.runtime.evaluation._trajectory_data import VERSION, read_pools
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.serve.store._run_store import RunStore
from agentrt.testing import ScriptedBackend
from tests._support.needs import require

pytestmark = pytest.mark.anyio

# Each task's rollouts answer in this order (a rollout is one model call).
SCRIPT = {"one?": ["1", "1", "9", "1"], "two?": ["8", "2", "8", "2"], "six?": ["6"] * 4}
EXPECTED = {"one?": "1", "two?": "2", "six?": "6"}


def scripted() -> ScriptedBackend:
    answers = {task: iter(replies) for task, replies in SCRIPT.items()}

    def reply(request: ModelRequest) -> str:
        for message in request.messages:
            if isinstance(message, UserMessage) and message.content in answers:
                return next(answers[message.content])
        raise AssertionError(f"an unexpected request: {request.messages}")

    return ScriptedBackend(reply)


def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    lines = [json.dumps({"id": t[:3], "task": t, "answer": a}) for t, a in EXPECTED.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def opener(rt: Runtime) -> OpenRunner:
    @contextlib.asynccontextmanager
    async def open_runner(args: argparse.Namespace) -> AsyncIterator[Runtime]:
        yield rt

    return open_runner


async def test_eval_draws_each_pool_once_and_its_export_re_aggregates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = scripted()
    export = tmp_path / "pool.jsonl"
    async with Runtime({"early_stop": False}, backends=[backend]) as rt:
        args = build_parser().parse_args(
            [
                str(task_file(tmp_path)),
                "--rollouts",
                "4",
                "--aggregate",
                "majority",
                "--aggregate",
                "weighted",
                "--export",
                str(export),
            ]
        )
        with anyio.fail_after(30):
            report = await eval_command(args, opener(rt))
    # 3 tasks x 4 rollouts of one call each: every k of both aggregators from them.
    assert len(backend.requests) == 3 * 4
    assert report.pool_model_calls == 3 * 4
    assert report.aggregation_model_calls == 0
    assert [p.k for p in report.curve] == [1, 2, 4]
    # pass@1 = (3/4 + 2/4 + 4/4) / 3
    assert report.curve[0].pass_at.value == pytest.approx(0.75)
    assert report.curve[-1].pass_at.value == pytest.approx(1.0)
    # majority@4: one? 1 (3 of 4), two? tie 8/2 with 8 first seen, six? 6.
    assert report.aggregators[0].points[-1].accuracy.value == pytest.approx(2 / 3)
    assert "compare majority@4 - pass@1" in capsys.readouterr().out

    # The exported pool: versioned records with trajectories and summaries.
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert len(lines) == 12
    assert {(r["format"], r["version"]) for r in lines} == {("agentrt.trajectories", VERSION)}
    assert all(r["trajectory"]["steps"] for r in lines)
    assert {r["group"] for r in lines} == {"one", "two", "six"}

    # Re-aggregated from the file with another aggregator: no rollout runs.
    backend2 = ScriptedBackend([])
    async with Runtime(backends=[backend2]) as rt2:
        args = aggregate_parser().parse_args([str(export), "--aggregate", "weighted"])
        results = await aggregate_command(args, opener(rt2))
    assert backend2.requests == []
    assert [(r.group, r.answer, r.correct) for r in results] == [
        ("one", "1", True),
        ("two", "8", False),
        ("six", "6", True),
    ]
    printed = capsys.readouterr().out
    assert "accuracy: 2/3" in printed
    assert "no rollout was run" in printed


async def test_a_daemon_store_run_re_aggregates_and_exports(tmp_path: Path) -> None:
    store_path = tmp_path / "runs.db"
    backend = scripted()
    async with (
        RunStore(store_path) as store,
        Runtime({"early_stop": False}, backends=[backend]) as rt,
    ):
        request = RunRequest(task="two?", scaling=ScalingSpec(rollouts=4))
        await store.create_run("run-two", request)
        result = await rt.run(
            "two?", scaling=request.scaling, events=store.record, run_id="run-two"
        )
        await store.finish("run-two", result.status, result, result.error)
    assert len(backend.requests) == 4

    pools = await read_pools(store_path, ["run-two"])
    assert [s.answer for s in pools[0].summaries] == ["8", "2", "8", "2"]
    assert len(pools[0].trajectories) == 4

    out = tmp_path / "run.jsonl"
    async with Runtime(backends=[ScriptedBackend([])]) as rt2:
        args = aggregate_parser().parse_args(
            [str(store_path), "--run", "run-two", "--export", str(out)]
        )
        (res,) = await aggregate_command(args, opener(rt2))
    assert res.group == "run-two"
    assert res.answer == "8"
    assert res.correct is None  # a daemon run has no expected answer
    again = await read_pools(out)
    assert [s.answer for s in again[0].summaries] == ["8", "2", "8", "2"]

    with pytest.raises(ConfigError, match=r"no run 'nope'"):
        await read_pools(store_path, ["nope"])


async def test_parquet_round_trip(tmp_path: Path) -> None:
    require(
        importlib.util.find_spec("pyarrow") is not None,
        "AGENTRT_REQUIRE_PYARROW",
        "pyarrow is not installed (the `parquet` extra)",
    )
    backend = scripted()
    parquet = tmp_path / "pool.parquet"
    async with Runtime({"early_stop": False}, backends=[backend]) as rt:
        args = build_parser().parse_args(
            [str(task_file(tmp_path)), "--rollouts", "4", "--export", str(parquet)]
        )
        first = await eval_command(args, opener(rt))
        args = build_parser().parse_args(["--from", str(parquet)])
        second = await eval_command(args, opener(rt))
    assert len(backend.requests) == 12  # the second evaluation drew nothing
    assert second.outcomes == first.outcomes
    pools = await read_pools(parquet)
    assert sum(len(p.trajectories) for p in pools) == 12


async def test_a_file_of_another_schema_version_is_refused_naming_where(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    record = {
        "format": "agentrt.trajectories",
        "version": VERSION,
        "group": "g",
        "task": "t",
        "rollout_id": "g-r0",
        "summary": {"rollout_id": "g-r0", "answer": "1"},
    }
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "version": 2}) + "\n")
    with pytest.raises(ConfigError, match=r"old\.jsonl:2.*schema version 2.*reads version 1"):
        await read_pools(path)
    path.write_text(json.dumps({"answer": 1}) + "\n")
    with pytest.raises(ConfigError, match=r"old\.jsonl:1.*not an agentrt trajectory record"):
        await read_pools(path)
    with pytest.raises(ConfigError, match="no such file"):
        await read_pools(tmp_path / "missing.jsonl")


async def test_aggregate_refuses_an_unknown_aggregator_before_reading(tmp_path: Path) -> None:
    args = aggregate_parser().parse_args([str(tmp_path / "x.jsonl"), "--aggregate", "rtv:q=1"])

    opened: list[argparse.Namespace] = []

    @contextlib.asynccontextmanager
    async def never(args: argparse.Namespace) -> AsyncIterator[Runtime]:
        opened.append(args)
        async with Runtime(backends=[ScriptedBackend([])]) as rt:
            yield rt

    with pytest.raises(ConfigError, match=r"--aggregate 'rtv:q=1'"):
        await aggregate_command(args, never)
    assert opened == []


async def test_judged_aggregators_only_call_judges_on_the_pool(tmp_path: Path) -> None:
    # One task whose rollouts answer 1, 1, 9, 1: RTV's judges see only the
    # pool's summaries (the backend still serves only the N rollouts).
    backend = scripted()
    judge = SimulatedJudge("1", 1.0, seed=3)
    tasks = tmp_path / "one.jsonl"
    tasks.write_text(json.dumps({"id": "one", "task": "one?", "answer": "1"}) + "\n")
    async with Runtime({"early_stop": False}, backends=[backend], judge=judge) as rt:
        args = build_parser().parse_args(
            [str(tasks), "--rollouts", "4", "--aggregate", "rtv:v=3", "--subsets", "100"]
        )
        report = await eval_command(args, opener(rt))
        assert len(backend.requests) == 4
        assert report.pool_model_calls == 4
        # Every judge call is counted, and nothing else called a model.
        assert report.aggregation_model_calls == judge.calls > 0
        # A perfect judge picks a right rollout whenever one is in the subset.
        for point in report.aggregators[0].points:
            assert point.accuracy.value == pytest.approx(point.oracle.value)
            assert point.picked == pytest.approx(1.0)

        summaries = [
            TrajectorySummary(rollout_id=f"x-r{i}", answer=a) for i, a in enumerate("1991")
        ]
        result = await rt.aggregate("one?", summaries, scaling=ScalingSpec(aggregate="rtv"))
        assert result.answer == "1"
        assert result.cost.model_calls > 0  # the judges' calls, on the call's own ledger
        with pytest.raises(ConfigError, match="runs new rollouts"):
            await rt.aggregate("one?", summaries, scaling=ScalingSpec(aggregate="pdr"))
        with pytest.raises(ConfigError, match="nonesuch"):
            await rt.aggregate("one?", summaries, scaling=ScalingSpec(aggregate="nonesuch"))
    assert len(backend.requests) == 4
