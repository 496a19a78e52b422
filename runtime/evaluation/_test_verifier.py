"""Verifiers of coding tasks: ``TestVerifierConfig`` (a test command, the
instance's FAIL_TO_PASS and PASS_TO_PASS ids, its ``test_patch``, a timeout
and what its sandbox may read) and ``TestVerifier``, which grades an answer
(a diff) on a fresh checkout of the base, in the sandbox, and returns a
``Verification``.

It grades the answer, never a rollout's live workspace: what the workspace
holds beyond its diff (files hidden from git, changed test files the
instance names) cannot change the verdict.  Must not know about agents,
aggregators or where the command comes from.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Final, final

import anyio
from pydantic import BaseModel, ConfigDict, Field

from agentrt.protocols._trajectory import Verification
from agentrt.runtime.evaluation._task_repo import BASE_REF
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig

__all__ = ["TestVerifier", "TestVerifierConfig", "test_results"]

#: One line of pytest's ``-rA`` short summary: the outcome and the node id.
_RESULT: Final = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+)")
_PASSING: Final = frozenset({"PASSED", "XFAIL"})
#: Where a diff names a file it changes.
_DIFF_FILE: Final = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


class TestVerifierConfig(BaseModel):
    """How a task's tests grade a rollout's answer."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    command: str = Field(min_length=1)
    """A bash command run in the checkout; ``{tests}`` becomes the quoted
    FAIL_TO_PASS and PASS_TO_PASS ids.  With ids, it must print pytest's
    ``-rA`` short summary (each id's outcome is read from it); without,
    exit 0 is a pass."""
    fail_to_pass: tuple[str, ...] = ()
    """Tests the answer must make pass (pytest node ids; a class or a
    parametrized test's base id covers all of its tests)."""
    pass_to_pass: tuple[str, ...] = ()
    """Tests that passed before and must still pass (regressions)."""
    test_patch: str = ""
    """A diff applied after the answer, before the tests (the tests that check the fix)."""
    timeout_s: float = Field(300.0, gt=0, le=3600)
    """Past this the command is killed and the answer fails."""
    read_only_paths: tuple[str, ...] = ()
    """Host directories the tests need (a virtualenv, a toolchain), shown read-only."""
    env: dict[str, str] = {}
    """Variables set for the command (``PYTHONPATH``...)."""
    memory_mb: int = Field(2048, ge=64)
    """Address space per process of the tests, at most (``total_memory_mb``
    divided among ``max_processes`` may give less)."""
    total_memory_mb: int = Field(8192, ge=64)
    """The tests' memory in all, a hard bound (``SandboxConfig.total_memory_mb``)."""
    max_processes: int = Field(32, ge=4, le=4096)
    """Processes and threads of the tests at once."""
    max_output_bytes: int = Field(262_144, ge=256)
    """Output kept (head and tail); the ``-rA`` summary is at its end."""
    workspace_mount: str = "/workspace"
    """Where the checkout appears (the agent's tools see their workspace there too)."""

    def command_line(self) -> str:
        """``command`` with ``{tests}`` filled in."""
        ids = " ".join(shlex.quote(t) for t in (*self.fail_to_pass, *self.pass_to_pass))
        return self.command.replace("{tests}", ids)

    def test_files(self) -> tuple[str, ...]:
        """The test files the instance names: those of its ids and those
        ``test_patch`` changes.  An answer's changes to them are not graded."""
        files = {t.split("::", 1)[0] for t in (*self.fail_to_pass, *self.pass_to_pass)}
        for old, new in _DIFF_FILE.findall(self.test_patch):
            files.update((old, new))
        return tuple(sorted(f for f in files if f and not f.startswith(("/", "-"))))


def test_results(output: str, ids: Iterable[str]) -> dict[str, str]:
    """Each of ``ids``: ``"passed"`` when pytest's ``-rA`` summary in
    ``output`` has results for it (itself, its tests, its parameters) and
    all passed, ``"failed"`` when any failed or errored, ``"not run"`` when
    it has none (no such test, or the run stopped first)."""
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        match = _RESULT.match(line)
        if match is not None:
            outcomes[match.group(2)] = match.group(1)
    results: dict[str, str] = {}
    for test in ids:
        found = [
            outcome
            for node, outcome in outcomes.items()
            if node == test or node.startswith((f"{test}::", f"{test}["))
        ]
        if not found:
            results[test] = "not run"
        else:
            results[test] = "passed" if all(o in _PASSING for o in found) else "failed"
    return results


#: Where the grading script finds the patches, in the checkout's ``.git``.
_ANSWER: Final = "agentrt-answer.patch"
_TEST_PATCH: Final = "agentrt-test.patch"
#: How the grading script says a step before the tests failed: this exit
#: code, and the step after this marker on stderr.
_SETUP_FAILED: Final = 97
_STEP: Final = "agentrt-grading-step:"


def _grading_script(files: Iterable[str]) -> str:
    """Apply the answer, put ``files`` back as the base has them (deleted
    if the base has none), apply the test patch, then run the command (the
    script's ``$1``)."""

    def step(what: str) -> str:
        return f"{{ echo {shlex.quote(f'{_STEP} {what}')} >&2; exit {_SETUP_FAILED}; }}"

    test_patch_failed = step("the task's test_patch: the patch does not apply")

    apply = "$G apply --whitespace=nowarn"
    lines = [
        "G='git -c core.hooksPath=/dev/null -c core.fsmonitor=false'",
        f"if [ -s .git/{_ANSWER} ]; then {apply} .git/{_ANSWER} || "
        f"{step('the answer: the patch does not apply')}; fi",
    ]
    for name in files:
        quoted = shlex.quote(name)
        lines.append(
            f"if $G cat-file -e {BASE_REF}:{quoted} 2>/dev/null; "
            f"then $G checkout -q {BASE_REF} -- {quoted} || {step('resetting the test files')}; "
            f"else rm -rf -- {quoted}; fi"
        )
    lines += [
        f"if [ -s .git/{_TEST_PATCH} ]; then {apply} .git/{_TEST_PATCH} || {test_patch_failed}; fi",
        f"rm -f .git/{_ANSWER} .git/{_TEST_PATCH}",
        'exec bash -c "$1"',
    ]
    return "\n".join(lines)


@final
class TestVerifier:
    """Grades an answer on a fresh checkout of the task's base::

        verification = await TestVerifier(config).grade(diff, checkout)

    ``checkout`` is a new copy of the base snapshot (``TaskRepository``)
    that nothing else uses; ``grade`` applies the diff, resets the test
    files the instance names, applies ``test_patch`` and runs the tests
    there, all in the sandbox.  Never raises for an answer that does not
    apply, a failing, hanging or unrunnable command: the result says what
    happened (``error`` when it could not run, or an id had no result)."""

    __test__ = False
    __slots__ = ("_sandbox", "config")

    def __init__(self, config: TestVerifierConfig) -> None:
        self.config = config
        self._sandbox = Sandbox(
            SandboxConfig(
                timeout_s=config.timeout_s,
                memory_mb=config.memory_mb,
                max_output_bytes=config.max_output_bytes,
                read_only_paths=config.read_only_paths,
                env=config.env,
                workspace_mount=config.workspace_mount,
                max_processes=config.max_processes,
                total_memory_mb=config.total_memory_mb,
            )
        )

    async def grade(self, diff: str | None, checkout: Path) -> Verification:
        c = self.config
        command = c.command_line()

        def failed(why: str) -> Verification:
            return Verification(passed=False, command=command, error=why)

        if not await anyio.Path(checkout).is_dir():
            return failed(f"no checkout at {str(checkout)!r}")
        # the patches go in as files of the fresh checkout's .git (nothing has
        # run there yet), so that one sandbox applies them and runs the tests
        for name, patch in ((_ANSWER, diff or ""), (_TEST_PATCH, c.test_patch)):
            text = patch if not patch or patch.endswith("\n") else patch + "\n"
            await anyio.Path(checkout, ".git", name).write_text(text, encoding="utf-8")
        script = _grading_script(c.test_files())
        try:
            result = await self._sandbox.run(
                ["bash", "-c", script, "grade", command], workspace=checkout
            )
        except ToolError as exc:  # no sandbox here: say so, never run unsandboxed
            return failed(str(exc))
        if result.exit_code == _SETUP_FAILED and _STEP in result.stderr:
            why, _, step = result.stderr.rpartition(_STEP)
            return failed(f"{step.strip()}: {why.strip() or 'failed'}")
        output = result.stdout
        if result.stderr:
            output += ("\n" if output else "") + result.stderr
        passed = result.ok
        error = f"timed out after {c.timeout_s:g} s" if result.timed_out else ""
        f2p = test_results(result.stdout, c.fail_to_pass)
        p2p = test_results(result.stdout, c.pass_to_pass)
        if f2p or p2p:  # the named tests decide, not the exit code
            passed = not result.timed_out and all(
                r == "passed" for r in (*f2p.values(), *p2p.values())
            )
            missing = [t for t, r in (*f2p.items(), *p2p.items()) if r == "not run"]
            if missing and not error:
                error = (
                    f"no result for {len(missing)} test id(s) in the output: "
                    f"{', '.join(missing[:5])} (no such test, or the run stopped first; "
                    "the command must print pytest's -rA summary)"
                )
        return Verification(
            passed=passed,
            command=command,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            output=_tail(output, c.max_output_bytes),
            error=error,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
        )


def _tail(text: str, limit: int) -> str:
    """What a record keeps of the output: its end (the summary) within ``limit``."""
    return text if len(text) <= limit // 8 else "[...]\n" + text[-(limit // 8) :]
