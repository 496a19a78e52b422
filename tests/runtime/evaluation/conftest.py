"""The SWE task set (examples/swe_tasks) and its grading by the official
``swebench`` harness, each made once per session and shared by
test_coding_tasks.py and test_swebench_formats.py.

The tests that use ``harness_grades`` form one ``xdist_group``, so one
worker grades the 10 gold patches (and the 10 empty ones) once for both.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentrt.runtime.evaluation._swebench import load_instances, write_harness_instances

ROOT = Path(__file__).resolve().parents[3]
#: The xdist group of the tests that read ``harness_grades``.
GRADING_GROUP = "swe_harness_grades"


@pytest.fixture(scope="session")
def task_set() -> Path:
    """The task set's cache (built once; PyPI on the first build; .ci/run
    builds it before the suite).  Each xdist worker has this fixture: a file
    lock makes the second wait for the first's build instead of racing it
    (two ``pip download``s and ``git checkout``s in one folder)."""
    path = ROOT / "examples" / "swe_tasks" / "setup_tasks.py"
    spec = importlib.util.spec_from_file_location("agentrt_swe_setup_tasks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cache = Path(os.environ.get("AGENTRT_SWE_TASKS", "/tmp/agentrt-swe-tasks"))
    cache.parent.mkdir(parents=True, exist_ok=True)
    with (cache.parent / f"{cache.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        module.build(cache)
    return cache


@dataclass(frozen=True)
class HarnessGrade:
    """One instance's eval script, run where the harness would run it with
    the gold patch and with none, each graded by swebench's ``get_eval_report``."""

    row: dict[str, Any]
    spec: Any  # swebench's TestSpec
    #: ``True``: the gold patch, ``False``: no patch -> (its report, its log).
    graded: dict[bool, tuple[dict[str, Any], str]]


@dataclass(frozen=True)
class HarnessGrades:
    """The task set as the harness sees it: the instances agentrt wrote for
    it and the gradings of each one's gold patch and of no patch."""

    dataset_file: Path
    by_id: dict[str, HarnessGrade]


@pytest.fixture(scope="session")
def harness_grades(task_set: Path, tmp_path_factory: pytest.TempPathFactory) -> HarnessGrades:
    from swebench.harness.grading import get_eval_report  # type: ignore[import-untyped]
    from swebench.harness.utils import (  # type: ignore[import-untyped]
        load_swebench_dataset,
        make_test_spec,
    )

    where = tmp_path_factory.mktemp("harness")
    rows = {r["instance_id"]: r for r in _rows(task_set)}
    items = load_instances(task_set / "instances.jsonl", repos=task_set / "repos")
    dataset_file = where / "harness-instances.jsonl"
    write_harness_instances(dataset_file, [i for i, _ in items])
    specs = {
        i["instance_id"]: make_test_spec(i)
        for i in load_swebench_dataset(str(dataset_file), "test")
    }

    def grade(instance_id: str, gold: bool) -> tuple[dict[str, Any], str]:
        row, spec = rows[instance_id], specs[instance_id]
        patch = row["patch"] if gold else ""
        log = where / f"{instance_id}-{gold}.log"
        _run_eval_script(task_set, row, spec.eval_script, patch, log)
        prediction = {"instance_id": instance_id, "model_name_or_path": "m", "model_patch": patch}
        report = get_eval_report(spec, prediction, str(log), include_tests_status=True)
        return report[instance_id], log.read_text()

    # One at a time: two in parallel took longer (50 s against 43 s at a
    # load average of 4 on this 2-core machine; each run is mostly CPU).
    graded = {
        (instance_id, gold): grade(instance_id, gold)
        for instance_id in specs
        for gold in (True, False)
    }
    return HarnessGrades(
        dataset_file,
        {
            instance_id: HarnessGrade(
                rows[instance_id], spec, {gold: graded[instance_id, gold] for gold in (True, False)}
            )
            for instance_id, spec in specs.items()
        },
    )


def _rows(task_set: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (task_set / "instances.jsonl").read_text().splitlines()]


def task_python(row: dict[str, Any]) -> Path:
    """The Python of the instance's own environment (its virtualenv of the
    system's Python, with pytest): where its tests run, on the host too.
    (Not this session's interpreter: its virtualenv's pytest plugins took
    most of each grading's seconds.)"""
    return Path(row["environment"]["env"]["VIRTUAL_ENV"], "bin", "python")


def _run_eval_script(
    task_set: Path, row: dict[str, Any], script: str, model_patch: str, log: Path
) -> None:
    """What the harness does in the instance's container, in a clone
    standing in for ``/testbed``: apply the model patch, run the eval script."""
    repo = task_set / "repos" / row["repo"].replace("/", "__")
    with tempfile.TemporaryDirectory() as checkout:
        subprocess.run(["git", "clone", "-q", str(repo), checkout], check=True)
        subprocess.run(["git", "-C", checkout, "checkout", "-q", row["base_commit"]], check=True)
        if model_patch:
            subprocess.run(
                ["git", "-C", checkout, "apply", "-"], input=model_patch, text=True, check=True
            )
        source = Path(checkout, "src") if Path(checkout, "src").is_dir() else Path(checkout)
        done = subprocess.run(
            ["bash", "-c", script.replace("/testbed", checkout)],
            env={
                "PATH": f"{task_python(row).parent}:{os.environ['PATH']}",
                "PYTHONPATH": f"{source}:{task_set / 'pytest'}",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, as the container's log has it
            text=True,
            check=False,
        )
        log.write_text(done.stdout)
