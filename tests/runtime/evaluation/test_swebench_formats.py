"""SWE-bench's file formats: instances from the datasets' Parquet files,
instances and predictions the official ``swebench`` harness accepts (its own
loaders, ``make_test_spec``, its eval script graded by its own log parser),
and trajectories in mini-SWE-agent's ``*.traj.json`` format.

The task set is examples/swe_tasks (test_coding_tasks.py builds and
exercises it); no Docker: the harness's eval script runs in a local clone
standing in for ``/testbed``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TrajectorySummary,
    UserMessage,
    Verification,
)
from agentrt.protocols._model import Choice, ModelReply
from agentrt.protocols._tools import ToolResult
from agentrt.protocols._trajectory import Step, Trajectory
from agentrt.protocols._usage import Cost, Usage
from agentrt.runtime.evaluation._swe_trajectories import MINI_SWE_FORMAT, write_traj_files
from agentrt.runtime.evaluation._swebench import (
    Prediction,
    harness_instance,
    load_instances,
    write_predictions,
)
from agentrt.runtime.evaluation._trajectory_data import Pool
from agentrt.runtime.kernel._errors import ConfigError
from tests._support.swebench import BARE_INSTANCE

from .conftest import GRADING_GROUP, HarnessGrades

pytestmark = pytest.mark.process  # git and pytest subprocesses
#: The datasets' columns (SWE-bench, Verified, Lite), in their order.
OFFICIAL_COLUMNS = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
)


def _rows(task_set: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (task_set / "instances.jsonl").read_text().splitlines()]


def test_parquet_instances_with_the_official_columns_load_as_their_jsonl(
    task_set: Path, tmp_path: Path
) -> None:
    """The task set written as a dataset's Parquet file (the official
    columns only, FAIL_TO_PASS/PASS_TO_PASS as JSON strings, a null
    hints_text) loads to the same instances and tasks as the JSONL, given
    the test command on the command line; a file that is not Parquet is an
    error naming it."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _rows(task_set)
    columns = {name: [r.get(name) for r in rows] for name in OFFICIAL_COLUMNS}
    columns["hints_text"] = [None] * len(rows)
    assert all(isinstance(v, str) for v in columns["FAIL_TO_PASS"])
    parquet = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.table(columns), parquet)
    plain = tmp_path / "plain.jsonl"  # the same instances, agentrt's extensions dropped
    plain.write_text("".join(json.dumps({k: r[k] for k in OFFICIAL_COLUMNS}) + "\n" for r in rows))
    command = rows[0]["test_command"]
    repos = task_set / "repos"
    from_parquet = load_instances(parquet, repos=repos, test_command=command)
    from_jsonl = load_instances(plain, repos=repos, test_command=command)
    assert len(from_parquet) == len(rows) == 10
    assert from_parquet == from_jsonl
    for (instance, task), row in zip(from_parquet, rows, strict=True):
        assert instance.FAIL_TO_PASS == json.loads(row["FAIL_TO_PASS"]) != []
        assert instance.PASS_TO_PASS == json.loads(row["PASS_TO_PASS"]) != []
        assert instance.version == row["version"]
        assert instance.hints_text == ""
        assert task.tests is not None
        assert task.tests.fail_to_pass == tuple(instance.FAIL_TO_PASS)
        assert Path(task.repo).is_dir()
    not_parquet = tmp_path / "broken.parquet"
    not_parquet.write_text("not parquet")
    with pytest.raises(ConfigError, match=r"broken.parquet.*cannot read Parquet"):
        load_instances(not_parquet, repos=repos)
    bad_row = tmp_path / "bad.parquet"
    pq.write_table(pa.table({**columns, "FAIL_TO_PASS": ["oops"] * len(rows)}), bad_row)
    with pytest.raises(ConfigError, match=r"bad.parquet: row 1.*FAIL_TO_PASS"):
        load_instances(bad_row, repos=repos)


@pytest.mark.slow
@pytest.mark.timeout(600)  # 20 clones and test runs: about 2 minutes on 2 loaded cores
@pytest.mark.xdist_group(GRADING_GROUP)
def test_harness_instances_and_predictions_load_in_swebench_and_grade_there(
    task_set: Path, harness_grades: HarnessGrades, tmp_path: Path
) -> None:
    """The instances agentrt writes for the harness load with swebench's
    ``load_swebench_dataset`` and make a ``TestSpec`` with
    ``make_test_spec`` (the classic instances alone fail it: ``KeyError:
    'image'``); the predictions load with its ``get_predictions_from_file``
    and match the dataset in ``get_dataset_from_preds``; the eval script,
    run where the harness would run it, is graded by swebench's own
    ``get_eval_report``: every gold patch resolves its instance and no
    patch resolves none (the task set's ids are the node ids pytest reports,
    as the harness matches them).  The gradings are the session's
    (``harness_grades``, conftest.py), shared with test_coding_tasks.py."""
    from swebench.harness.run_evaluation import (  # type: ignore[import-untyped]
        get_dataset_from_preds,
    )
    from swebench.harness.utils import (  # type: ignore[import-untyped]
        get_predictions_from_file,
        load_swebench_dataset,
        make_test_spec,
    )

    rows = _rows(task_set)
    with pytest.raises(KeyError, match="image"):
        make_test_spec(rows[0])
    dataset_file = harness_grades.dataset_file
    predictions_file = tmp_path / "preds.jsonl"
    write_predictions(
        predictions_file,
        [
            Prediction(instance_id=r["instance_id"], model_name_or_path="m", model_patch=r["patch"])
            for r in rows
        ],
    )
    dataset = load_swebench_dataset(str(dataset_file), "test")
    predictions = get_predictions_from_file(str(predictions_file), str(dataset_file), "test")
    matched = get_dataset_from_preds(
        str(dataset_file),
        "test",
        [],
        {p["instance_id"]: p for p in predictions},
        "agentrt-formats",
        rewrite_reports=False,
        exclude_completed=False,
    )
    assert len(dataset) == len(matched) == len(rows) == len(harness_grades.by_id) == 10
    by_id = {r["instance_id"]: r for r in rows}
    for instance, prediction in zip(dataset, predictions, strict=True):
        row = by_id[instance["instance_id"]]
        assert prediction["model_patch"] == row["patch"]
        spec = make_test_spec(instance)
        assert json.loads(row["FAIL_TO_PASS"]) == spec.FAIL_TO_PASS
        assert json.loads(row["PASS_TO_PASS"]) == spec.PASS_TO_PASS
        assert spec.image == f"sweb.eval.x86_64.{row['instance_id']}:latest"
        assert spec.log_parser == "parse_log_pytest"
        assert spec.eval_type == "pass_and_fail"
        assert spec.eval_script == harness_grades.by_id[row["instance_id"]].spec.eval_script
        for resolved, (graded, log) in harness_grades.by_id[row["instance_id"]].graded.items():
            assert graded["resolved"] is resolved, (row["instance_id"], log[-2000:])
            status = graded["tests_status"]
            assert status["PASS_TO_PASS"]["success"] == spec.PASS_TO_PASS  # regressions graded
            if not resolved:
                assert status["FAIL_TO_PASS"]["failure"] == spec.FAIL_TO_PASS


def test_an_instance_without_eval_script_or_test_command_names_itself(tmp_path: Path) -> None:
    line = {
        **BARE_INSTANCE,
        "image": "ghcr.io/x/y:1",
        "eval_script": "#!/bin/bash\nset -uxo pipefail\ntrue\n",
    }
    path = tmp_path / "i.jsonl"
    path.write_text(json.dumps(line) + "\n")
    ((given, _),) = load_instances(path, repos=tmp_path)
    made = harness_instance(given)  # the dataset's own fields are kept
    assert (made["image"], made["eval_script"]) == (line["image"], line["eval_script"])
    assert made["FAIL_TO_PASS"] == line["FAIL_TO_PASS"]
    bare = msgspec.structs.replace(given, image=None, eval_script=None)
    with pytest.raises(ConfigError, match=r"o__r-1.*no eval_script and no test command"):
        harness_instance(bare)
    script = harness_instance(bare, test_command="pytest -rA {tests}")["eval_script"]
    assert "git checkout abc -- t.py" in script
    assert "pytest -rA t.py::test_a" in script


def _reply(message: AssistantMessage) -> ModelReply:
    return ModelReply(
        model="m",
        choices=[Choice(index=0, message=message, finish_reason="stop")],
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        latency_s=0.1,
    )


def test_trajectories_export_in_mini_swe_agent_format(tmp_path: Path) -> None:
    """Each rollout becomes ``DIR/<instance>/<rollout>.traj.json`` with
    mini-SWE-agent's keys (``trajectory_format`` mini-swe-agent-1.1,
    ``instance_id``, ``messages`` ending with the last reply and tool
    result, ``info.exit_status``/``submission``/``model_stats``), the
    commands of a reply under ``extra.actions`` as its inspector reads them."""
    call = ToolCall(id="c1", function=FunctionCall(name="shell", arguments='{"command": "ls -la"}'))
    first: tuple[ChatMessage, ...] = (SystemMessage(content="sys"), UserMessage(content="fix it"))
    asked = AssistantMessage(content="looking", tool_calls=[call])
    second = (*first, asked, ToolMessage(content="a.py", tool_call_id="c1"))
    diff = "diff --git a/a.py b/a.py\n"
    steps = [
        Step(
            index=0,
            messages=first,
            reply=_reply(asked),
            tool_results=(ToolResult(call_id="c1", name="shell", content="a.py"),),
        ),
        Step(index=1, messages=second, reply=_reply(AssistantMessage(content="done"))),
    ]
    done = Trajectory(
        run_id="i1",
        rollout_id="i1-r0",
        agent="mini",
        task="fix it",
        steps=steps,
        answer=diff,
        status="finished",
        cost=Cost(usd=0.25, model_calls=2, usage=Usage(prompt_tokens=20, completion_tokens=10)),
    )
    cut = Trajectory(
        run_id="i1",
        rollout_id="i1-r1",
        agent="mini",
        task="fix it",
        steps=steps[:1],
        status="exhausted",
        stop_reason="max steps (1)",
    )
    verified = Verification(passed=True, command="pytest")
    pool = Pool(
        group="i1",
        task="fix it",
        summaries=[TrajectorySummary(rollout_id="i1-r0", answer=diff, verification=verified)],
        trajectories={"i1-r0": done, "i1-r1": cut},
        task_id="inst__1",
    )
    assert write_traj_files(tmp_path, [pool]) == 2
    files = sorted(tmp_path.rglob("*.traj.json"))
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "inst__1/i1-r0.traj.json",
        "inst__1/i1-r1.traj.json",
    ]
    data = json.loads(files[0].read_text())
    assert data["trajectory_format"] == MINI_SWE_FORMAT == "mini-swe-agent-1.1"
    assert data["instance_id"] == "inst__1"
    assert [m["role"] for m in data["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert data["messages"][2]["extra"]["actions"] == [
        {"command": "ls -la", "tool": "shell", "tool_call_id": "c1"}
    ]
    assert data["messages"][-1]["content"] == "done"
    info = data["info"]
    assert (info["exit_status"], info["submission"]) == ("Submitted", diff)
    assert info["model_stats"] == {"instance_cost": 0.25, "api_calls": 2}
    assert info["agentrt"]["tests_passed"] is True
    assert info["agentrt"]["tokens"] == 30
    cut_data = json.loads(files[1].read_text())
    assert cut_data["info"]["exit_status"] == "max steps (1)"
    assert cut_data["info"]["submission"] == ""
    assert [m["role"] for m in cut_data["messages"]] == ["system", "user", "assistant", "tool"]
    assert cut_data["info"]["agentrt"]["tests_passed"] is None
