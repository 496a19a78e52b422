"""``agentrt run --aggregate`` (through the engine) and ``agentrt eval``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentrt.protocols import RunResult, decode
from agentrt.runtime.cli._main import main


def test_run_with_rtv_records_the_whole_bracket(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "Capital of France?", "--rollouts", "4", "--aggregate", "rtv"]
    argv += ["--aggregate-option", "g=2", "--aggregate-option", "v=1", "--json"]
    assert main([*argv, "--config", config]) in {0, 1}
    result = decode(capsys.readouterr().out, RunResult)
    assert len(result.summaries) == 4
    assert all(s.answer for s in result.summaries)  # every rollout summarized
    assert len(result.aggregation_trace) == 3  # N - 1 comparisons for G = 2
    assert {v["aggregator"] for v in result.aggregation_trace} == {"rtv"}
    # 4 rollouts of one step (no prefix warm-up by default), and a judge call
    # for each comparison whose answers differ (agreeing ones need none),
    # asked twice: a reply of the script ("Paris") is no verdict, so the
    # judge asks again once, then the seeded coin decides.
    judged = [v for v in result.aggregation_trace if v["votes"]]
    assert 1 <= len(judged) <= 2
    assert result.cost.model_calls == 4 + 2 * len(judged)
    assert result.cost.usage.prompt_tokens > 0


def test_run_with_majority_prints_each_rollout_and_the_answer(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "Capital?", "--rollouts", "3", "--aggregate", "majority", "--config", config]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len([line for line in lines if line.startswith("[r")]) == 3
    assert "answer: Paris" in lines


def test_a_bad_aggregator_option_or_name_exits_2(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "q", "--aggregate-option", "g", "--config", config]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert main(["run", "q", "--aggregate", "nonesuch", "--config", config]) == 2
    assert "scaling.aggregate" in capsys.readouterr().err


def test_eval_prints_the_table_and_writes_the_plot(
    tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "fr", "task": "Capital of France?", "answer": "paris"}\n')
    plot = tmp_path / "curve.svg"
    argv = ["eval", str(tasks), "--rollouts", "3", "--aggregate", "majority"]
    assert main([*argv, "--plot", str(plot), "--config", config]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("pool: 1 tasks x 3 rollouts, drawn once (3 model calls)")
    assert out[2].split() == ["k", "pass@k", "pass^k", "tokens/task", "usd/task"]
    assert [line.split()[0] for line in out[4:6]] == ["1", "2"]
    assert any(line.startswith("compare majority@3 - pass@1:") for line in out)
    assert ET.parse(plot).getroot().tag.endswith("svg")


def test_eval_and_aggregate_name_a_bad_aggregator(
    tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "fr", "task": "Capital of France?", "answer": "paris"}\n')
    assert main(["eval", str(tasks), "--aggregate", "rtv:v=0", "--config", config]) == 2
    assert "--aggregate 'rtv:v=0'" in capsys.readouterr().err
    assert main(["aggregate", str(tasks), "--aggregate", "nonesuch", "--config", config]) == 2
    assert "--aggregate 'nonesuch'" in capsys.readouterr().err
    assert main(["aggregate", str(tasks), "--config", config]) == 2
    assert "tasks.jsonl:1: not an agentrt trajectory record" in capsys.readouterr().err


def test_run_exports_its_trajectories_for_aggregate(
    tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.jsonl"
    argv = ["run", "Capital of France?", "--rollouts", "3", "--export", str(out)]
    assert main([*argv, "--config", config]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["answer"] for r in records) == ["Lyon", "Paris", "Paris"]
    assert all(r["trajectory"]["steps"] and r["version"] == 1 for r in records)
    assert main(["aggregate", str(out), "--config", config]) == 0
    printed = capsys.readouterr().out
    assert ": Paris (3/3 rollouts answered" in printed
    assert "model calls: 0 (no rollout was run)" in printed


def test_run_with_confidence_stops_once_the_answer_is_settled(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every rollout answers "Paris": adaptive N stops well before the cap.
    path = Path(config)
    path.write_text(path.read_text().replace('["Paris", "Paris", "Lyon", "Paris"]', '["Paris"]'))
    argv = ["run", "Capital of France?", "--rollouts", "16", "--confidence", "0.95"]
    argv += ["--min-rollouts", "2", "--json", "--config", str(path)]
    assert main(argv) == 0
    result = decode(capsys.readouterr().out, RunResult)
    assert result.answer == "Paris"
    assert 2 <= len(result.summaries) < 16
    assert result.cost.model_calls < 16


@pytest.mark.parametrize("value", ["0.5", "1", "x"])
def test_a_bad_confidence_exits_2(
    config: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "q", "--confidence", value, "--config", config]) == 2
    assert "--confidence" in capsys.readouterr().err
