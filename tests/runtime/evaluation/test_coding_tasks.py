"""Coding tasks end to end: per-rollout workspaces from the task's repository,
diffs as answers, verifiers, the verified aggregator, SWE-bench in and out,
and bad input (a missing repository or commit, a hanging test, a patch that
does not apply, a write outside the workspace) recorded while the run goes on.

The task set is examples/swe_tasks (real PyPI sdists with known bugs); a
scripted backend replays the known fixes through the mini-SWE-agent spec's
``shell`` tool.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from agentrt import Runtime
from agentrt.agents._spec_loader import load_spec
from agentrt.aggregators import (
    MajorityVote,
    ParallelDistillRefine,
    SimulatedJudge,
    VerifiedFirst,
    render_summary,
)
from agentrt.aggregators._aggregator import AggregationContext
from agentrt.protocols import (
    ModelRequest,
    ToolMessage,
    TrajectorySummary,
    UserMessage,
    Verification,
    VerifierRan,
)
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.evaluation._coding_task import CodingTask, run_coding_task
from agentrt.runtime.evaluation._eval import build_parser, eval_command
from agentrt.runtime.evaluation._swe_eval import SweEvalReport
from agentrt.runtime.evaluation._swe_eval import check_swe_arguments as _checked
from agentrt.runtime.evaluation._swebench import load_instances
from agentrt.runtime.evaluation._task_repo import TaskRepositoryError, apply_patch
from agentrt.runtime.evaluation._test_verifier import TestVerifierConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.testing._scripted import ScriptedBackend, ScriptedToolCall
from agentrt.tools.sandbox._workspaces import default_workspace_root

pytestmark = [pytest.mark.anyio, pytest.mark.process]
ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "examples" / "mini_swe_agent.yaml"


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"use_uvloop": False})


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("AGENTRT_REQUIRE_BWRAP") == "1":
            pytest.fail("AGENTRT_REQUIRE_BWRAP=1 but bubblewrap (bwrap) is not installed")
        pytest.skip("needs bubblewrap (apt-get install -y bubblewrap)")


def _setup_module() -> ModuleType:
    path = ROOT / "examples" / "swe_tasks" / "setup_tasks.py"
    spec = importlib.util.spec_from_file_location("agentrt_swe_setup_tasks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def task_set() -> Path:
    """The task set's cache (built once; PyPI on the first build; .ci/run
    builds it before the suite).  Each xdist worker has this fixture: a file
    lock makes the second wait for the first's build instead of racing it
    (two ``pip download``s and ``git checkout``s in one folder)."""
    cache = Path(os.environ.get("AGENTRT_SWE_TASKS", "/tmp/agentrt-swe-tasks"))
    cache.parent.mkdir(parents=True, exist_ok=True)
    with (cache.parent / f"{cache.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _setup_module().build(cache)
    return cache


def _first_user(request: ModelRequest) -> str:
    content = next(m.content for m in request.messages if isinstance(m, UserMessage))
    assert isinstance(content, str)
    return content


def _answered(request: ModelRequest) -> bool:
    return any(isinstance(m, ToolMessage) for m in request.messages)


def _runtime(backend: ScriptedBackend) -> Runtime:
    return Runtime(
        {"early_stop": False, "default_agent": "swe"},
        backends=[backend],
        agents={"swe": load_spec(SPEC)},
    )


def _opener(rt: Runtime) -> Callable[[argparse.Namespace], Any]:
    @asynccontextmanager
    async def open_runner(_: argparse.Namespace) -> AsyncIterator[Runtime]:
        yield rt

    return open_runner


def _git_repo(path: Path) -> str:
    path.mkdir()
    (path / "a.py").write_text("x = 0\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=path, check=True
        )
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True
    ).stdout.strip()


# -- workspaces ----------------------------------------------------------------


async def test_eight_parallel_rollouts_each_diff_holds_only_its_own_edits(
    tmp_path: Path,
) -> None:
    base = _git_repo(tmp_path / "repo")
    counter = iter(range(100))

    def script(request: ModelRequest) -> Any:
        if _answered(request):
            return "done"
        n = next(counter) + 1  # 0 would leave a.py as it was
        # each rollout edits the shared file and adds one of its own, after a pause
        # that lets the others' edits land first if the workspaces were shared
        return ScriptedToolCall(
            "shell", {"command": f"echo 'x = {n}' > a.py && sleep 0.3 && echo {n} > r{n}.txt"}
        )

    task = CodingTask(id="iso", problem="edit", repo=str(tmp_path / "repo"), base_commit=base)
    async with _runtime(ScriptedBackend(script)) as rt:
        run = await run_coding_task(rt, task, rollouts=8, cache=tmp_path / "cache")
    diffs = [s.answer for s in run.summaries]
    assert all(d is not None for d in diffs)
    assert len(set(diffs)) == 8
    for diff in diffs:
        assert diff is not None
        (own,) = {line[len("+x = ") :] for line in diff.splitlines() if line.startswith("+x = ")}
        files = [line for line in diff.splitlines() if line.startswith("+++ b/r")]
        assert files == [f"+++ b/r{own}.txt"], diff
        assert "-x = 0" in diff
    assert not list((default_workspace_root() / run.run_id).glob("*")), "removed after the run"


async def test_keep_leaves_the_workspaces_and_a_missing_repository_is_recorded(
    tmp_path: Path,
) -> None:
    base = _git_repo(tmp_path / "repo")
    backend = ScriptedBackend(lambda r: "done" if _answered(r) else ScriptedToolCall(
        "shell", {"command": "echo 1 > new.txt"}
    ))  # fmt: skip
    async with _runtime(backend) as rt:
        kept = await run_coding_task(
            rt,
            CodingTask(id="keep", problem="p", repo=str(tmp_path / "repo"), base_commit=base),
            rollouts=2,
            cache=tmp_path / "cache",
            keep=True,
        )
        missing = await run_coding_task(
            rt,
            CodingTask(id="gone", problem="p", repo=str(tmp_path / "nope"), base_commit=base),
            rollouts=2,
            cache=tmp_path / "cache",
        )
        no_commit = await run_coding_task(
            rt,
            CodingTask(id="old", problem="p", repo=str(tmp_path / "repo"), base_commit="deadbeef"),
            rollouts=1,
            cache=tmp_path / "cache",
        )
    left = default_workspace_root() / kept.run_id
    assert sorted(p.name for p in left.iterdir()) == ["r0", "r1"]
    assert (left / "r0" / "new.txt").is_file()
    shutil.rmtree(left)
    assert all(s.answer and "+++ b/new.txt" in s.answer for s in kept.summaries)
    assert missing.error is not None
    assert "does not exist" in missing.error
    assert all(missing.error in s.failure_modes for s in missing.summaries)
    assert no_commit.error is not None
    assert "has no commit 'deadbeef'" in no_commit.error


async def test_a_patch_that_does_not_apply_is_an_error_naming_why(tmp_path: Path) -> None:
    _git_repo(tmp_path / "repo")
    bad = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-y = 9\n+y = 10\n"
    with pytest.raises(TaskRepositoryError, match="does not apply"):
        await apply_patch(tmp_path / "repo", bad)


# -- the verified aggregator ----------------------------------------------------------


def _summary(rid: str, answer: str, passed: bool | None) -> TrajectorySummary:
    verification = None if passed is None else Verification(passed=passed, command="t")
    return TrajectorySummary(rollout_id=rid, answer=answer, verification=verification)


async def test_verified_first_prefers_passing_candidates() -> None:
    ledger = BudgetLedger("agg", None)
    context = AggregationContext.metered(ScriptedBackend([]), ledger, run_id="agg")
    majority_wrong = [
        _summary("a", "wrong", False),
        _summary("b", "wrong", False),
        _summary("c", "right", True),
    ]
    result = await VerifiedFirst(MajorityVote()).aggregate("t", majority_wrong, context)
    assert (result.answer, result.winner) == ("right", "c")
    assert (await MajorityVote().aggregate("t", majority_wrong, context)).answer == "wrong"
    none_pass = [_summary("a", "x", False), _summary("b", "x", False), _summary("c", "y", None)]
    fallback = await VerifiedFirst(MajorityVote()).aggregate("t", none_pass, context)
    assert fallback.answer == "x"
    assert "none of 3" in fallback.rationale
    strict = await VerifiedFirst(MajorityVote(), require=True).aggregate("t", none_pass, context)
    assert strict.answer is None


def test_judges_read_a_candidates_test_verdict() -> None:
    text = render_summary(
        TrajectorySummary(
            rollout_id="a",
            answer="diff",
            verification=Verification(passed=False, command="pytest -q", exit_code=1),
        )
    )
    assert "tests (pytest -q): failed (exit 1)" in text.splitlines()


# -- the task set end to end ------------------------------------------------------------


def _instances(task_set: Path) -> list[dict[str, Any]]:
    lines = (task_set / "instances.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _replay(instances: list[dict[str, Any]], fixed: set[str]) -> Callable[[ModelRequest], Any]:
    """Rollout 0 of a task in ``fixed`` applies the known fix; every other
    rollout makes an edit that fixes nothing."""
    by_problem = {i["problem_statement"]: i for i in instances}
    seen: dict[str, int] = {}

    def script(request: ModelRequest) -> Any:
        if _answered(request):
            return "I changed the code."
        text = _first_user(request)
        instance = next(v for k, v in by_problem.items() if k in text)
        n = seen.get(instance["instance_id"], 0)
        seen[instance["instance_id"]] = n + 1
        if n == 0 and instance["instance_id"] in fixed:
            command = f"git apply <<'AGENTRT_PATCH'\n{instance['patch']}AGENTRT_PATCH"
        else:
            command = f"echo '# looked at it ({n})' >> NOTES.txt"
        return ScriptedToolCall("shell", {"command": command})

    return script


async def test_task_set_replayed_fixes_verify_and_predictions_load_in_swebench(
    task_set: Path, tmp_path: Path
) -> None:
    instances = _instances(task_set)
    assert len(instances) >= 9
    fixed = {i["instance_id"] for i in instances[::2]}
    backend = ScriptedBackend(_replay(instances, fixed))
    predictions = tmp_path / "preds.jsonl"
    report_file = tmp_path / "report.json"
    args = build_parser().parse_args(
        [
            str(task_set / "instances.jsonl"),
            *("--swe", "--repos", str(task_set / "repos"), "--rollouts", "2"),
            *("--aggregate", "verified", "--aggregate", "majority"),
            *("--test-path", str(task_set / "pytest"), "--test-timeout", "60"),
            *("--predictions", str(predictions), "--json", str(report_file)),
            *("--repo-cache", str(tmp_path / "cache"), "--model-name", "scripted-replay"),
            *("--export", str(tmp_path / "pool.jsonl")),
        ]
    )
    async with _runtime(backend) as rt:
        report = await eval_command(args, _opener(rt))
    whole = json.loads(report_file.read_text())
    outcomes = {t["instance_id"]: t for t in whole["tasks"]}
    for instance in instances:
        o = outcomes[instance["instance_id"]]
        assert o["error"] is None
        # the verifier passes exactly for the rollout that applied the fix
        assert o["passed"] == (1 if instance["instance_id"] in fixed else 0), o
        assert o["prediction_passed"] is (instance["instance_id"] in fixed), o
    verified = report.aggregators[0]
    assert verified.aggregate == "verified"
    (at_n,) = [p for p in verified.points if p.k == 2]
    assert at_n.picked == 1.0  # whenever a passing candidate exists, verified picks it
    assert report.curve[0].pass_at.value == pytest.approx(len(fixed) / len(instances) / 2)

    from swebench.harness.run_evaluation import (  # type: ignore[import-untyped]
        get_dataset_from_preds,
    )
    from swebench.harness.utils import (  # type: ignore[import-untyped]
        get_predictions_from_file,
    )

    loaded = get_predictions_from_file(str(predictions), str(task_set / "instances.jsonl"), "test")
    assert {p["instance_id"] for p in loaded} == {i["instance_id"] for i in instances}
    assert all(p["model_name_or_path"] == "scripted-replay" for p in loaded)
    dataset = get_dataset_from_preds(
        str(task_set / "instances.jsonl"),
        "test",
        [],
        {p["instance_id"]: p for p in loaded},
        "agentrt-test",
        rewrite_reports=False,
        exclude_completed=False,
    )
    assert len(dataset) == len(instances)
    gold = {i["instance_id"]: i["patch"] for i in instances}
    for p in loaded:
        if p["instance_id"] in fixed:
            assert p["model_patch"].strip() == gold[p["instance_id"]].strip()
    # the pool's export carries each rollout's diff and verification
    records = [json.loads(x) for x in (tmp_path / "pool.jsonl").read_text().splitlines()]
    assert all("verification" in r["summary"] for r in records)


async def test_bad_input_is_recorded_and_the_run_goes_on(task_set: Path, tmp_path: Path) -> None:
    instances = _instances(task_set)
    good = dict(instances[0])
    hangs = dict(instances[1], instance_id="hangs", test_command="sleep 600")
    no_repo = dict(instances[2], instance_id="no-repo", repo="pypi/not-cloned")
    no_commit = dict(instances[3], instance_id="no-commit", base_commit="0" * 40)
    outside = dict(instances[4], instance_id="outside")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps(i) + "\n" for i in (good, hangs, no_repo, no_commit, outside))
    )

    def script(request: ModelRequest) -> Any:
        if _answered(request):
            return "done"
        text = _first_user(request)
        if outside["problem_statement"] in text:
            return ScriptedToolCall("shell", {"command": "echo pwned > /usr/agentrt-escape"})
        if good["problem_statement"] in text:
            return ScriptedToolCall("shell", {"command": f"git apply <<'P'\n{good['patch']}P"})
        return ScriptedToolCall("shell", {"command": "git apply <<'P'\nnot a patch\nP"})

    args = build_parser().parse_args(
        [
            str(tasks),
            *("--swe", "--repos", str(task_set / "repos"), "--rollouts", "1"),
            *("--aggregate", "verified", "--test-path", str(task_set / "pytest")),
            *("--test-timeout", "2", "--repo-cache", str(tmp_path / "cache")),
            *("--json", str(tmp_path / "r.json"), "--concurrency", "5"),
            *("--export", str(tmp_path / "pool.jsonl")),
        ]
    )
    async with _runtime(ScriptedBackend(script)) as rt:
        await eval_command(args, _opener(rt))
    outcomes = {t["instance_id"]: t for t in json.loads((tmp_path / "r.json").read_text())["tasks"]}
    assert outcomes[good["instance_id"]]["prediction_passed"] is True
    assert "has no commit" in outcomes["no-commit"]["error"]
    assert "does not exist" in outcomes["no-repo"]["error"]
    assert outcomes["hangs"]["passed"] == 0
    assert outcomes["hangs"]["error"] is None
    assert outcomes["outside"]["passed"] == 0
    assert not await anyio.Path("/usr/agentrt-escape").exists()
    # the rollouts' records say what went wrong, in the tool results the model read
    records = {
        r["group"]: r for r in map(json.loads, (tmp_path / "pool.jsonl").read_text().splitlines())
    }

    def tool_texts(group: str) -> list[tuple[bool, str]]:
        steps = records[group]["trajectory"]["steps"]
        return [
            (res["is_error"], json.dumps(res["content"]))
            for step in steps
            for res in step["tool_results"]
        ]

    assert any(err and "Read-only file system" in t for err, t in tool_texts("outside"))
    assert any(err and "No valid patches" in t for err, t in tool_texts("hangs"))
    assert "has no commit" in records["no-commit"]["summary"]["failure_modes"][0]
    hung = records["hangs"]["summary"]["verification"]
    assert hung["timed_out"] is True
    assert hung["passed"] is False
    assert SweEvalReport.__struct_fields__ == ("report", "tasks", "predictions")


async def test_a_hanging_test_command_times_out_with_its_reason(
    task_set: Path, tmp_path: Path
) -> None:
    instance = _instances(task_set)[0]
    repo = task_set / "repos" / instance["repo"].replace("/", "__")
    backend = ScriptedBackend(lambda r: "done")
    seen: list[VerifierRan] = []

    async def sink(event: Any) -> None:
        if isinstance(event, VerifierRan):
            seen.append(event)

    task = CodingTask(
        id="hang",
        problem="p",
        repo=str(repo),
        base_commit=instance["base_commit"],
        tests=TestVerifierConfig(command="sleep 600", timeout_s=1),
    )
    async with _runtime(backend) as rt:
        run = await run_coding_task(rt, task, rollouts=1, cache=tmp_path / "c", events=sink)
    (summary,) = run.summaries
    assert summary.verification is not None
    assert summary.verification.timed_out
    assert not summary.verification.passed
    assert "timed out after 1 s" in summary.verification.error
    assert [e.verification for e in seen] == [summary.verification]
    assert summary.answer is None  # no change


@pytest.mark.slow
@pytest.mark.embedded
async def test_the_whole_path_on_the_embedded_model(task_set: Path, tmp_path: Path) -> None:
    """With the embedded model (score irrelevant): one task, two short rollouts,
    verified aggregation, predictions written and loadable."""
    instance = _instances(task_set)[0]
    tasks = tmp_path / "one.jsonl"
    tasks.write_text(json.dumps(instance) + "\n")
    spec = tmp_path / "swe.yaml"
    spec.write_text(
        SPEC.read_text()
        .replace("max_steps: 40", "max_steps: 2")
        .replace("max_tokens_per_step: 2048", "max_tokens_per_step: 48")
    )
    predictions = tmp_path / "preds.jsonl"
    args = build_parser().parse_args(
        [
            str(tasks),
            *("--swe", "--repos", str(task_set / "repos"), "--rollouts", "2"),
            *("--aggregate", "verified", "--test-path", str(task_set / "pytest")),
            *("--predictions", str(predictions), "--repo-cache", str(tmp_path / "cache")),
            *("--agent", str(spec)),
        ]
    )
    from agentrt.runtime.cli._run_command import eval_runner

    report = await eval_command(args, eval_runner)
    assert report.tasks == 1
    assert report.pool_model_calls >= 2
    (line,) = predictions.read_text().splitlines()
    assert json.loads(line)["instance_id"] == instance["instance_id"]


async def test_pdr_refinement_rollouts_work_on_the_repository_and_are_tested(
    task_set: Path, tmp_path: Path
) -> None:
    """In a run aggregated by PDR, the first round's diffs are read back and
    tested before PDR distils them, its refinement rollouts get their own
    copies of the repository (seeded on first use) and are tested too, and
    the verified final step picks the refinement that fixed the bug."""
    instance = _instances(task_set)[0]
    repo = task_set / "repos" / instance["repo"].replace("/", "__")

    def script(request: ModelRequest) -> Any:
        if _answered(request):
            return "done"
        refining = any(
            isinstance(m, UserMessage) and "Earlier attempts" in str(m.content)
            for m in request.messages
        )
        if refining:
            return ScriptedToolCall("shell", {"command": f"git apply <<'P'\n{instance['patch']}P"})
        return ScriptedToolCall("shell", {"command": "echo '# no fix' >> NOTES.txt"})

    pdr = ParallelDistillRefine(
        SimulatedJudge(instance["patch"], 1.0),
        rounds=2,
        m=2,
        k=1,
        final=VerifiedFirst(MajorityVote()),
        stop_on_agreement=False,
    )
    task = CodingTask(
        id="pdr",
        problem=instance["problem_statement"],
        repo=str(repo),
        base_commit=instance["base_commit"],
        tests=TestVerifierConfig(
            command=instance["test_command"].replace(
                "{tests}", " ".join(json.loads(instance["FAIL_TO_PASS"]))
            ),
            read_only_paths=(str(task_set / "pytest"),),
            timeout_s=60,
        ),
    )
    async with _runtime(ScriptedBackend(script)) as rt:
        run = await run_coding_task(rt, task, rollouts=2, cache=tmp_path / "cache", aggregator=pdr)
    assert run.answer is not None
    assert run.answer.strip() == instance["patch"].strip()
    by_slot = [s.rollout_id for s in (*run.summaries, *run.refined)]
    first = run.summaries
    refined = run.refined
    assert all("refine" in s.rollout_id for s in refined)
    assert len(first) == 2, sorted(by_slot)
    assert len(refined) == 2, sorted(by_slot)
    assert all(s.verification is not None and not s.verification.passed for s in first)
    assert all(s.verification is not None and s.verification.passed for s in refined)
    assert not list((default_workspace_root() / run.run_id).glob("*")), "all removed"


async def test_eval_run_aggregate_pdr_predicts_the_refinement_that_passes(
    task_set: Path, tmp_path: Path
) -> None:
    instance = _instances(task_set)[1]
    tasks = tmp_path / "one.jsonl"
    tasks.write_text(json.dumps(instance) + "\n")

    def script(request: ModelRequest) -> Any:
        if _answered(request):
            return "done"
        if any("Earlier attempts" in str(m.content) for m in request.messages):
            return ScriptedToolCall("shell", {"command": f"git apply <<'P'\n{instance['patch']}P"})
        return ScriptedToolCall("shell", {"command": "echo '# no fix' >> NOTES.txt"})

    predictions = tmp_path / "preds.jsonl"
    args = build_parser().parse_args(
        [
            str(tasks),
            *("--swe", "--repos", str(task_set / "repos"), "--rollouts", "2"),
            *("--run-aggregate", "pdr:rounds=2,m=2,k=1,stop_on_agreement=false"),
            *("--test-path", str(task_set / "pytest"), "--repo-cache", str(tmp_path / "c")),
            *("--predictions", str(predictions), "--json", str(tmp_path / "r.json")),
        ]
    )
    runtime = Runtime(
        {"early_stop": False, "default_agent": "swe"},
        backends=[ScriptedBackend(script)],
        agents={"swe": load_spec(SPEC)},
        judge=SimulatedJudge(instance["patch"], 1.0),
    )
    async with runtime as rt:
        await eval_command(args, _opener(rt))
    (outcome,) = json.loads((tmp_path / "r.json").read_text())["tasks"]
    assert outcome["passed"] == 0  # the first round fixed nothing
    assert outcome["refined"] == 2
    assert outcome["prediction_passed"] is True
    (line,) = predictions.read_text().splitlines()
    assert json.loads(line)["model_patch"].strip() == instance["patch"].strip()
    with pytest.raises(ConfigError, match="--run-aggregate"):
        _checked(
            build_parser().parse_args(
                ["t.jsonl", "--swe", "--repos", str(tmp_path), "--run-aggregate", "nope"]
            )
        )


# -- the SWE-bench file format ------------------------------------------------------


def test_instances_load_with_their_tests_and_bad_lines_name_themselves(tmp_path: Path) -> None:
    line = {
        "instance_id": "o__r-1",
        "repo": "o/r",
        "base_commit": "abc",
        "problem_statement": "p",
        "FAIL_TO_PASS": '["t.py::test_a"]',
        "PASS_TO_PASS": ["t.py::test b"],
        "extra": 1,
    }
    good = tmp_path / "i.jsonl"
    good.write_text(json.dumps(line) + "\n")
    (tmp_path / "repos" / "o__r").mkdir(parents=True)
    ((instance, task),) = load_instances(
        good, repos=tmp_path / "repos", test_command="pytest {tests}", test_settings={}
    )
    assert instance.FAIL_TO_PASS == ["t.py::test_a"]
    assert task.repo == str(tmp_path / "repos" / "o__r")
    assert task.tests is not None
    assert task.tests.command == "pytest t.py::test_a 't.py::test b'"
    (no_tests,) = load_instances(good, repos=tmp_path / "repos")
    assert no_tests[1].tests is None
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ConfigError, match=r"twice.jsonl:2.*appears twice"):
        load_instances(twice, repos=tmp_path)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({**line, "FAIL_TO_PASS": "not json"}) + "\n")
    with pytest.raises(ConfigError, match=r"broken.jsonl:1.*FAIL_TO_PASS"):
        load_instances(broken, repos=tmp_path)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"instance_id": "x"}) + "\n")
    with pytest.raises(ConfigError, match=r"missing.jsonl:1.*not a SWE-bench instance"):
        load_instances(missing, repos=tmp_path)


def test_coding_options_are_checked_before_any_run(tmp_path: Path) -> None:
    parser = build_parser()
    for argv, message in (
        (["t.jsonl", "--repos", str(tmp_path)], "need --swe"),
        (["t.jsonl", "--swe"], "--swe needs --repos"),
        (["t.jsonl", "--swe", "--repos", str(tmp_path / "none")], "is not a directory"),
    ):
        with pytest.raises(ConfigError, match=message):
            _checked(parser.parse_args(argv))
