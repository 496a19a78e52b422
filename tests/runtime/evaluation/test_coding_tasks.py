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
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
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
from agentrt.runtime.evaluation._task_repo import (
    TaskRepository,
    TaskRepositoryError,
    apply_patch,
    workspace_diff,
)
from agentrt.runtime.evaluation._test_verifier import TestVerifierConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.testing._scripted import ScriptedBackend, ScriptedToolCall
from agentrt.tools import EditorTool, ToolContext
from agentrt.tools.sandbox._bwrap import SandboxEnvironment
from agentrt.tools.sandbox._workspaces import Workspaces, default_workspace_root
from tests._support.swebench import BARE_INSTANCE

from .conftest import GRADING_GROUP, HarnessGrades, task_python

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.usefixtures("bwrap")]
ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "examples" / "mini_swe_agent.yaml"


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


def _git_repo(path: Path, name: str = "a.py", content: bytes = b"x = 0\n") -> str:
    path.mkdir()
    (path / name).write_bytes(content)
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
    assert not (default_workspace_root() / run.run_id).exists(), "removed after the run"
    assert not (default_workspace_root() / f"{run.run_id}.grading").exists()


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


async def test_a_latin1_file_edited_with_the_editor_comes_back_byte_exact(tmp_path: Path) -> None:
    """The editor keeps bytes that are not UTF-8, and the diff carries such
    a file as a binary patch: applied to a fresh checkout, the same bytes."""
    repo = tmp_path / "repo"
    base = _git_repo(repo, "l1.py", b"# caf\xe9\nx = 1\n")
    source = TaskRepository(repo, base, cache=tmp_path / "cache", task_id="latin1")
    async with Workspaces(seed=source.seed()) as spaces:
        editor = EditorTool(spaces)
        edit = {"command": "str_replace", "path": "l1.py", "old_str": "x = 1", "new_str": "x = 2"}
        await editor.call(edit, ToolContext(run_id="latin1", rollout_id="latin1-0"))
        edited = await spaces.get("latin1", "latin1-0")
        assert (edited.path / "l1.py").read_bytes() == b"# caf\xe9\nx = 2\n"
        diff = await workspace_diff(edited.path)
        assert "\ufffd" not in diff
        fresh = await spaces.get("latin1", "latin1-1")
        await apply_patch(fresh.path, diff)
        assert (fresh.path / "l1.py").read_bytes() == b"# caf\xe9\nx = 2\n"


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
            verification=Verification(
                passed=False,
                command="pytest -q",
                exit_code=1,
                fail_to_pass={"t.py::test_a": "failed"},
                pass_to_pass={"t.py::test_b": "passed", "t.py::test_c": "passed"},
                error="no result for 1 test id(s)",
            ),
        )
    )
    lines = text.splitlines()
    assert "tests (pytest -q): failed (exit 1)" in lines
    assert "FAIL_TO_PASS: 0/1 passed" in lines
    assert "PASS_TO_PASS: 2/2 passed" in lines
    assert "tests error: no result for 1 test id(s)" in lines


# -- the task set end to end ------------------------------------------------------------


def _instances(task_set: Path) -> list[dict[str, Any]]:
    lines = (task_set / "instances.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _replay(instances: list[dict[str, Any]]) -> Callable[[ModelRequest], Any]:
    """Rollout 0 of every task applies the known fix; rollout 1 of every
    other task hides that fix from the diff (``git update-index
    --skip-worktree``) and changes a README line, and of the rest makes an
    edit that fixes nothing."""
    by_problem = {i["problem_statement"]: i for i in instances}
    seen: dict[str, int] = {}

    def script(request: ModelRequest) -> Any:
        if _answered(request):
            return "I changed the code."
        text = _first_user(request)
        instance = next(v for k, v in by_problem.items() if k in text)
        n = seen.get(instance["instance_id"], 0)
        seen[instance["instance_id"]] = n + 1
        if n == 0:
            command = _apply(instance["patch"])
        elif instances.index(instance) % 2:
            command = _hidden_fix(instance["patch"])
        else:
            command = f"echo '# looked at it ({n})' >> NOTES.txt"
        return ScriptedToolCall("shell", {"command": command})

    return script


def _apply(patch: str) -> str:
    return f"git apply <<'AGENTRT_PATCH'\n{patch}AGENTRT_PATCH"


def _hidden_fix(patch: str) -> str:
    """Fix the bug in the workspace, hide the fix from ``git add``/``git
    diff`` and change a README line: the diff is the README line only."""
    files = sorted(set(re.findall(r"^\+\+\+ b/(\S+)$", patch, re.MULTILINE)))
    return (
        f"{_apply(patch)}\ngit update-index --skip-worktree {' '.join(files)} && "
        "for f in README*; do echo 'See the docs.' >> \"$f\"; break; done"
    )


def _graded_independently(task_set: Path, instance: dict[str, Any], diff: str | None) -> bool:
    """A grading that shares no code with agentrt's: a fresh clone at the
    base commit, ``git apply`` the answer, the instance's test files put
    back, ``git apply`` its test_patch, pytest on the host."""
    repo = task_set / "repos" / instance["repo"].replace("/", "__")
    ids = [*json.loads(instance["FAIL_TO_PASS"]), *json.loads(instance["PASS_TO_PASS"])]
    tests = {t.split("::")[0] for t in ids}
    tests |= set(re.findall(r"^\+\+\+ b/(\S+)$", instance["test_patch"], re.MULTILINE))
    with tempfile.TemporaryDirectory() as checkout:

        def git(*args: str, stdin: str | None = None) -> None:
            subprocess.run(["git", "-C", checkout, *args], input=stdin, text=True, check=True)

        subprocess.run(["git", "clone", "-q", str(repo), checkout], check=True)
        git("checkout", "-q", instance["base_commit"])
        if diff:
            git("apply", "-", stdin=diff)
        git("checkout", instance["base_commit"], "--", *sorted(tests))
        if instance["test_patch"]:
            git("apply", "-", stdin=instance["test_patch"])
        source = Path(checkout, "src") if Path(checkout, "src").is_dir() else Path(checkout)
        done = subprocess.run(
            [task_python(instance), "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids],
            cwd=checkout,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": f"{source}:{task_set / 'pytest'}"},
            capture_output=True,
            check=False,
        )
        return done.returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(600)  # 20 rollouts, 20 gradings and 5 regradings on 2 loaded cores
@pytest.mark.xdist_group(GRADING_GROUP)
async def test_task_set_gold_patches_pass_and_an_independent_grading_agrees(
    task_set: Path, harness_grades: HarnessGrades, tmp_path: Path
) -> None:
    """Every task's gold patch passes (FAIL_TO_PASS and PASS_TO_PASS); no
    change and a fix hidden from the diff fail FAIL_TO_PASS and keep
    PASS_TO_PASS; independent gradings agree: swebench's harness on every
    prediction (the session's ``harness_grades``, conftest.py) and plain
    git and pytest on every hidden fix; ``verified`` picks the passing
    ones; the predictions load in ``swebench``.  The tests run in each
    task's own environment."""
    instances = _instances(task_set)
    assert len(instances) == 10
    backend = ScriptedBackend(_replay(instances))
    predictions = tmp_path / "preds.jsonl"
    report_file = tmp_path / "report.json"
    args = build_parser().parse_args(
        [
            str(task_set / "instances.jsonl"),
            *("--swe", "--repos", str(task_set / "repos"), "--rollouts", "2"),
            *("--aggregate", "verified", "--aggregate", "majority"),
            *("--test-timeout", "60", "--concurrency", "2"),
            *("--predictions", str(predictions), "--json", str(report_file)),
            *("--repo-cache", str(tmp_path / "cache"), "--model-name", "scripted-replay"),
            *("--export", str(tmp_path / "pool.jsonl")),
            *("--harness-instances", str(tmp_path / "harness.jsonl")),
            *("--traj-dir", str(tmp_path / "trajs")),
        ]
    )
    async with _runtime(backend) as rt:
        report = await eval_command(args, _opener(rt))
    whole = json.loads(report_file.read_text())
    trajs = sorted((tmp_path / "trajs").rglob("*.traj.json"))
    assert len(trajs) == 20
    for path in trajs:
        traj = json.loads(path.read_text())
        assert traj["trajectory_format"] == "mini-swe-agent-1.1"
        assert traj["instance_id"] == path.parent.name
        assert any(m.get("extra", {}).get("actions") for m in traj["messages"])
    outcomes = {t["instance_id"]: t for t in whole["tasks"]}
    for instance in instances:
        o = outcomes[instance["instance_id"]]
        assert o["error"] is None
        assert o["passed"] == 1, o  # the gold patch, not the hidden fix or the note
        assert o["prediction_passed"] is True, o
    verified = report.aggregators[0]
    assert verified.aggregate == "verified"
    (at_n,) = [p for p in verified.points if p.k == 2]
    assert at_n.picked == 1.0  # whenever a passing candidate exists, verified picks it
    assert report.curve[0].pass_at.value == pytest.approx(0.5)

    # each rollout's grade names each test's result, and plain git + pytest agree
    by_id = {i["instance_id"]: i for i in instances}
    records = [json.loads(x) for x in (tmp_path / "pool.jsonl").read_text().splitlines()]
    assert len(records) == 20
    graded: list[tuple[dict[str, Any], str | None, bool]] = []
    for record in records:
        instance = by_id[record["group"]]
        summary = record["summary"]
        v = summary["verification"]
        gold = (summary["answer"] or "").strip() == instance["patch"].strip()
        assert v["passed"] is gold, (record["group"], v)
        assert set(v["fail_to_pass"].values()) == {"passed" if gold else "failed"}, v
        assert set(v["pass_to_pass"].values()) == {"passed"}, v
        assert len(v["pass_to_pass"]) == len(json.loads(instance["PASS_TO_PASS"])) >= 1
        if not gold and by_id[record["group"]] in instances[1::2]:
            assert "README" in summary["answer"]
            assert instance["patch"].splitlines()[0] not in summary["answer"]
        graded.append((instance, summary["answer"], v["passed"]))
    limiter = anyio.CapacityLimiter(2)

    async def regrade(instance: dict[str, Any], diff: str | None, passed: bool) -> None:
        again = await anyio.to_thread.run_sync(
            _graded_independently, task_set, instance, diff, limiter=limiter
        )
        assert again is passed, instance["instance_id"]

    async with anyio.create_task_group() as tg:
        for instance, diff, passed in graded:
            if diff is not None and "+++ b/NOTES.txt" in diff:
                continue  # a new notes file only: nothing two gradings could differ on
            if passed:  # the gold patch: the harness graded it (and resolved it)
                harness, log = harness_grades.by_id[instance["instance_id"]].graded[True]
                assert diff is not None
                assert diff.strip() == instance["patch"].strip()
                assert harness["resolved"] is True, (instance["instance_id"], log[-2000:])
                continue
            tg.start_soon(regrade, instance, diff, passed)

    from swebench.harness.run_evaluation import (  # type: ignore[import-untyped]
        get_dataset_from_preds,
    )
    from swebench.harness.utils import (  # type: ignore[import-untyped]
        get_predictions_from_file,
    )

    loaded = get_predictions_from_file(str(predictions), str(task_set / "instances.jsonl"), "test")
    assert {p["instance_id"] for p in loaded} == set(by_id)
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
    from swebench.harness.utils import (
        load_swebench_dataset,
        make_test_spec,
    )

    harness = load_swebench_dataset(str(tmp_path / "harness.jsonl"), "test")
    specs = {i["instance_id"]: make_test_spec(i) for i in harness}
    assert set(specs) == set(by_id)
    assert all(json.loads(by_id[k]["FAIL_TO_PASS"]) == s.FAIL_TO_PASS for k, s in specs.items())
    for p in loaded:
        assert p["model_patch"].strip() == by_id[p["instance_id"]]["patch"].strip()


async def test_tampering_rollouts_are_graded_failing(task_set: Path, tmp_path: Path) -> None:
    """A rollout that makes the failing tests' asserts vacuous (and fixes
    nothing) and one that hides its fix from the diff both pass the tests
    in their own workspaces, yet their answers fail; ``verified`` picks
    the honest fix, and plain git + pytest agree on all three."""
    instance = next(
        i for i in _instances(task_set) if i["instance_id"] == "inflection-ordinal-teens"
    )
    repo = task_set / "repos" / instance["repo"].replace("/", "__")
    vacuous = (
        "sed -i 's/^    assert ordinalized == /    assert True or ordinalized == /' "
        "test_inflection.py"
    )
    commands = iter([vacuous, _hidden_fix(instance["patch"]), _apply(instance["patch"])])
    check = "python -m pytest -q -rf -p no:cacheprovider test_inflection.py::test_ordinal"
    in_workspace: list[str] = []

    def script(request: ModelRequest) -> Any:
        answered = [m for m in request.messages if isinstance(m, ToolMessage)]
        if len(answered) == 1:
            return ScriptedToolCall("shell", {"command": next(commands)})
        if len(answered) == 3:
            in_workspace.extend(str(answered[i].content) for i in (0, 2))
            return "fixed"
        # the rollout runs the repository's tests in its sandbox, before and after
        return ScriptedToolCall("shell", {"command": check})

    environment = instance["environment"]
    task = CodingTask(
        id="tamper",
        problem=instance["problem_statement"],
        repo=str(repo),
        base_commit=instance["base_commit"],
        environment=SandboxEnvironment(
            read_only_paths=tuple(environment["read_only_paths"]), env=environment["env"]
        ),
        tests=TestVerifierConfig(
            command=instance["test_command"],
            fail_to_pass=tuple(json.loads(instance["FAIL_TO_PASS"])),
            pass_to_pass=tuple(json.loads(instance["PASS_TO_PASS"])),
            read_only_paths=tuple(environment["read_only_paths"]),
            env=environment["env"],
            timeout_s=60,
        ),
    )
    async with _runtime(ScriptedBackend(script)) as rt:
        run = await run_coding_task(
            rt,
            task,
            rollouts=3,
            cache=tmp_path / "cache",
            aggregator=VerifiedFirst(MajorityVote()),
        )
    before, after = in_workspace[0::2], in_workspace[1::2]
    assert len(before) == len(after) == 3
    assert all("FAILED test_inflection.py::test_ordinal[" in text for text in before), before
    # each looked fixed to itself
    assert all("61 passed" in text and "failed" not in text for text in after), after
    by_kind: dict[str, TrajectorySummary] = {}
    for s in run.summaries:
        assert s.answer is not None
        kind = (
            "vacuous"
            if "test_inflection.py" in s.answer
            else "hidden"
            if "README" in s.answer
            else "gold"
        )
        by_kind[kind] = s
    assert sorted(by_kind) == ["gold", "hidden", "vacuous"]
    for kind, summary in by_kind.items():
        v = summary.verification
        assert v is not None
        assert v.passed is (kind == "gold"), (kind, v)
        expected = "passed" if kind == "gold" else "failed"
        assert set(v.fail_to_pass.values()) == {expected}, (kind, v.fail_to_pass)
        assert set(v.pass_to_pass.values()) == {"passed"}, (kind, v.pass_to_pass)
        assert _graded_independently(task_set, instance, summary.answer) is v.passed, kind
    assert run.answer == by_kind["gold"].answer


async def test_bad_input_is_recorded_and_the_run_goes_on(task_set: Path, tmp_path: Path) -> None:
    instances = _instances(task_set)
    good = dict(instances[0])
    hangs = dict(instances[1], instance_id="hangs", test_command="sleep 600")
    no_repo = dict(instances[2], instance_id="no-repo", repo="pypi/not-cloned")
    no_commit = dict(instances[3], instance_id="no-commit", base_commit="0" * 40)
    outside = dict(instances[4], instance_id="outside")
    missing_venv = {"read_only_paths": [str(tmp_path / "no-venv")], "env": {}}
    no_env = dict(instances[5], instance_id="no-env", environment=missing_venv)
    no_test = json.dumps(["toolz/tests/test_itertoolz.py::test_no_such_test"])
    bad_id = dict(instances[5], instance_id="bad-id", PASS_TO_PASS=no_test)
    bad_patch = dict(instances[6], instance_id="bad-test-patch", test_patch="not a diff\n")
    tasks = tmp_path / "tasks.jsonl"
    every = (good, hangs, no_repo, no_commit, outside, no_env, bad_id, bad_patch)
    tasks.write_text("".join(json.dumps(i) + "\n" for i in every))

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
            *("--test-timeout", "10", "--repo-cache", str(tmp_path / "cache")),
            *("--json", str(tmp_path / "r.json"), "--concurrency", "4"),
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
    assert "its environment: read_only_paths" in outcomes["no-env"]["error"]
    assert "does not exist" in outcomes["no-env"]["error"]
    unknown = records["bad-id"]["summary"]["verification"]
    # pytest runs nothing when an id does not exist: every id is "not run"
    assert unknown["error"].startswith("no result for 2 test id(s) in the output: ")
    assert "toolz/tests/test_itertoolz.py::test_no_such_test" in unknown["error"]
    assert "ERROR: not found" in unknown["output"]
    assert unknown["pass_to_pass"] == {
        "toolz/tests/test_itertoolz.py::test_no_such_test": "not run"
    }
    unapplied = records["bad-test-patch"]["summary"]["verification"]
    assert unapplied["error"].startswith("the task's test_patch: the patch does not apply")
    assert outcomes["bad-test-patch"]["passed"] == 0
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
            command=instance["test_command"],
            fail_to_pass=tuple(json.loads(instance["FAIL_TO_PASS"])),
            read_only_paths=tuple(instance["environment"]["read_only_paths"]),
            env=instance["environment"]["env"],
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
    assert not (default_workspace_root() / run.run_id).exists(), "all removed"


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
            *("--repo-cache", str(tmp_path / "c")),
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
        **BARE_INSTANCE,
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
    assert task.tests.command_line() == "pytest t.py::test_a 't.py::test b'"
    assert task.tests.test_files() == ("t.py",)
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
        (["t.jsonl", "--harness-instances", "h.jsonl", "--traj-dir", "d"], "need --swe"),
        (["t.jsonl", "--swe"], "--swe needs --repos"),
        (["t.jsonl", "--swe", "--repos", str(tmp_path / "none")], "is not a directory"),
    ):
        with pytest.raises(ConfigError, match=message):
            _checked(parser.parse_args(argv))
