"""One coding task's rollouts: ``CodingTask`` (a problem statement, its
repository at a base commit, an optional test command) and
``run_coding_task``, which gives each of N rollouts its own copy of the
repository, runs them, reads each workspace's diff back as that rollout's
answer, grades that diff on a fresh checkout of the base (``VerifierRan``
events; the result on the summary) and cleans the workspaces up.

A broken task (its repository or base commit missing) fails its rollouts
with the reason, never the caller.  Must not know about aggregators, the
SWE-bench file format or the command line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, Protocol, final

import anyio
import msgspec

from agentrt.aggregators._aggregator import AggregationContext, AggregationResult, Aggregator
from agentrt.aggregators._compose import build_aggregator
from agentrt.aggregators._workspace import Workspace
from agentrt.protocols._events import ErrorRaised, Event, VerifierRan
from agentrt.protocols._ids import new_run_id, nth_rollout_id
from agentrt.protocols._run import RunResult, ScalingSpec
from agentrt.protocols._trajectory import TrajectorySummary, Verification
from agentrt.runtime.evaluation._task_repo import (
    TaskRepository,
    TaskRepositoryError,
    workspace_diff,
)
from agentrt.runtime.evaluation._test_verifier import TestVerifier, TestVerifierConfig
from agentrt.runtime.kernel._errors import RuntimeFailure
from agentrt.runtime.observe._log import get_logger
from agentrt.tools.sandbox._bwrap import SandboxEnvironment
from agentrt.tools.sandbox._workspaces import (
    Workspaces,
    default_workspace_root,
    keep_run,
    release_run,
    run_seed,
)

__all__ = ["CodingRun", "CodingRunner", "CodingTask", "run_coding_task"]

_log = get_logger(__name__)
#: Workspaces seeded, diffs read and verifiers run at once per task.
_PARALLEL: Final = 4

EventSink = Callable[[Event], Awaitable[None]]


class CodingRunner(Protocol):
    """What runs the rollouts (``agentrt.Runtime`` is one)."""

    async def run(
        self,
        task: str,
        *,
        scaling: ScalingSpec | None = None,
        events: EventSink | None = None,
        run_id: str | None = None,
        aggregator: Aggregator | None = None,
    ) -> RunResult: ...


class CodingTask(msgspec.Struct, frozen=True, kw_only=True):
    """A coding task: fix ``problem`` in the repository at ``repo`` (a local
    clone) as of ``base_commit``; ``tests`` (optional) verify a result."""

    id: str
    problem: str
    repo: str
    base_commit: str
    tests: TestVerifierConfig | None = None
    environment: SandboxEnvironment | None = None
    """What the repository's commands need (its virtualenv), read-only, for
    the agent's tools; the tests have theirs in ``tests``."""


class CodingRun(msgspec.Struct, frozen=True, kw_only=True):
    """What ``run_coding_task`` made of a task: one summary per rollout
    (``answer``: its diff, ``None`` when it changed nothing; ``verification``:
    its tests), the run's id and cost, and ``error`` when the task could not
    run at all (then every summary carries it)."""

    task_id: str
    run_id: str
    summaries: list[TrajectorySummary]
    model_calls: int = 0
    error: str | None = None
    duration_s: float = 0.0
    verify_s: float = 0.0
    """Wall time spent reading the diffs and running the tests, in all."""
    refined: list[TrajectorySummary] = []
    """Rollouts the run's aggregator started (PDR's refinements), read back and tested."""
    answer: str | None = None
    """The diff the run's ``aggregator`` chose (``None``: none given, or none chosen)."""
    rationale: str = ""


def task_prompt(task: CodingTask) -> str:
    """What the agent is asked: the problem, and where the code is."""
    return (
        f"{task.problem.strip()}\n\n"
        "The repository is checked out in the workspace (the shell's working directory). "
        "Change its files so that the problem is fixed; your changes to the workspace are "
        "your answer."
    )


async def run_coding_task(
    runner: CodingRunner,
    task: CodingTask,
    *,
    rollouts: int,
    cache: Path,
    workspace_root: Path | None = None,
    keep: bool = False,
    events: EventSink | None = None,
    aggregator: Aggregator | ScalingSpec | None = None,
) -> CodingRun:
    """Run ``rollouts`` rollouts of the runner's agent on ``task``.

    Each rollout's workspace is a copy of the task's repository snapshot
    (made under ``cache``), created before the run under ``workspace_root``,
    which must be the root the agent's ``shell``/``editor`` tools use (spec
    tools use ``default_workspace_root()``, the default here), so that the
    rollout's first tool call finds it.  ``keep``: leave the workspaces for
    debugging (``workspace_root/<run id>/r<i>``).
    ``events`` receives the run's events plus ``VerifierRan`` per rollout
    and an ``ErrorRaised`` when the task cannot run.  ``aggregator``: chooses
    in the run itself (``answer``), among the rollouts' diffs with their
    tests' verdicts; PDR's refinement rollouts get the repository too and
    are read back and tested before it compares them (``refined``); given
    as a ``ScalingSpec``, its ``aggregate`` and ``options`` name it (with
    the runner's judge)."""
    if isinstance(aggregator, ScalingSpec):
        aggregator = build_aggregator(
            {"name": aggregator.aggregate, **aggregator.options},
            judge=getattr(runner, "judge", None),
            where="aggregate",
        )
    started = time.monotonic()
    run_id = new_run_id(task.id)
    repo = TaskRepository(Path(task.repo), task.base_commit, cache=cache, task_id=task.id)

    async def emit(event: Event) -> None:
        if events is not None:
            await events(event)

    def failed(why: str) -> CodingRun:
        return _failed(task.id, run_id, why, rollouts, time.monotonic() - started)

    why = await _unavailable(task, repo)
    if why:
        _log.warning("coding.task_unavailable", task=task.id, error=why)
        await emit(ErrorRaised(run_id=run_id, where="task repository", message=why, fatal=True))
        return failed(why)
    root = workspace_root or default_workspace_root()
    async with Workspaces(root, seed=repo.seed(), keep=keep) as spaces:
        limiter = anyio.CapacityLimiter(_PARALLEL)

        problem = await _create_workspaces(spaces, run_id, rollouts, limiter)
        if problem is not None:
            why = f"could not create the workspaces: {problem}"
            await emit(ErrorRaised(run_id=run_id, where="workspaces", message=why, fatal=True))
            return failed(why)
        grade = _grader(task, spaces, run_id)
        done: dict[str, TrajectorySummary] = {}
        verify_s: list[float] = []

        async def read(summary: TrajectorySummary) -> TrajectorySummary:
            """The rollout's diff and its grade, once per rollout."""
            if summary.rollout_id in done:
                return done[summary.rollout_id]
            async with limiter:
                t0 = time.monotonic()
                path = spaces.path_of(run_id, summary.rollout_id)
                read_back = await _read_back(summary, path, grade)
                verify_s.append(time.monotonic() - t0)
            done[summary.rollout_id] = read_back
            if read_back.verification is not None:
                await emit(
                    VerifierRan(
                        run_id=run_id,
                        rollout_id=summary.rollout_id,
                        verification=read_back.verification,
                    )
                )
            return read_back

        with run_seed(
            run_id, repo.seed(), task.environment
        ):  # rollouts started later (PDR) get the repo too
            result = await runner.run(
                task_prompt(task),
                scaling=ScalingSpec(rollouts=rollouts, aggregate="majority"),
                events=events,
                run_id=run_id,
                aggregator=None if aggregator is None else _ReadBack(aggregator, read),
            )
            summaries = list(result.summaries)

            async def finish(i: int, summary: TrajectorySummary) -> None:
                summaries[i] = await read(summary)

            async with anyio.create_task_group() as tg:
                for i, summary in enumerate(summaries):
                    tg.start_soon(finish, i, summary)
        listed = {s.rollout_id for s in summaries}
        refined = [s for rid, s in done.items() if rid not in listed]  # PDR's rollouts
        for rid in done:  # the tools created the refinement rollouts' workspaces
            await spaces.release(run_id, rid)
    for run in (run_id, f"{run_id}.grading"):
        if keep:
            keep_run(run, root)
        else:
            await release_run(run, root, owned=True)
    return CodingRun(
        task_id=task.id,
        run_id=run_id,
        summaries=summaries,
        model_calls=result.cost.model_calls,
        duration_s=time.monotonic() - started,
        verify_s=sum(verify_s),
        refined=refined,
        answer=(result.raw_answer or result.answer) if aggregator is not None else None,
        rationale=result.rationale or "" if aggregator is not None else "",
    )


async def _unavailable(task: CodingTask, repo: TaskRepository) -> str:
    """Why ``task`` cannot run (its repository, its base commit, its
    environment); empty when it can."""
    try:
        await repo.prepare()
    except (TaskRepositoryError, OSError) as exc:
        return str(exc)
    problem = task.environment.problem() if task.environment is not None else ""
    return f"task {task.id!r}: its environment: {problem}" if problem else ""


Grade = Callable[[str, str | None], Awaitable[Verification | None]]


def _grader(task: CodingTask, spaces: Workspaces, run_id: str) -> Grade:
    """Grades a rollout's diff on a fresh checkout of the base (a workspace
    of its own, deleted after), never on the rollout's workspace."""
    verifier = TestVerifier(task.tests) if task.tests is not None else None
    grading = f"{run_id}.grading"

    async def grade(rollout_id: str, diff: str | None) -> Verification | None:
        if verifier is None:
            return None
        checkout = await spaces.get(grading, rollout_id)
        try:
            return await verifier.grade(diff, checkout.path)
        finally:
            await spaces.release(grading, rollout_id)

    return grade


async def _read_back(
    summary: TrajectorySummary,
    path: Path,
    grade: Grade,
) -> TrajectorySummary:
    """``summary`` with its workspace's diff as the answer (the model's last
    message kept as a conclusion) and that diff's grade."""
    failures = list(summary.failure_modes)
    conclusions = list(summary.conclusions)
    if summary.answer:
        conclusions.append(f"the rollout's last message: {summary.answer[:2000]}")
    diff: str | None = None
    if await anyio.Path(path).is_dir():
        try:
            diff = await workspace_diff(path)
        except TaskRepositoryError as exc:
            failures.append(str(exc))
    else:
        failures.append(f"no workspace at {str(path)!r} to read the diff from")
    verification = await grade(summary.rollout_id, diff)
    return msgspec.structs.replace(
        summary,
        answer=diff or None,
        conclusions=conclusions,
        failure_modes=failures,
        verification=verification,
    )


@final
class _ReadBack:
    """``inner`` over the rollouts' diffs and test verdicts: each summary
    (and each new rollout PDR runs) is read back with ``read`` first."""

    __slots__ = ("_read", "inner")

    def __init__(
        self,
        inner: Aggregator,
        read: Callable[[TrajectorySummary], Awaitable[TrajectorySummary]],
    ) -> None:
        self.inner = inner
        self._read = read

    @property
    def name(self) -> str:
        return self.inner.name

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        read = list(summaries)

        async def one(i: int) -> None:
            read[i] = await self._read(read[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(read)):
                tg.start_soon(one, i)
        fresh = context.rollout
        if fresh is not None:

            async def rollout(rollout_task: str, workspace: Workspace) -> TrajectorySummary:
                return await self._read(await fresh(rollout_task, workspace))

            context = dataclasses.replace(context, rollout=rollout)
        return await self.inner.aggregate(task, read, context)


def _failed(task_id: str, run_id: str, why: str, rollouts: int, duration_s: float) -> CodingRun:
    """A task that could not run: every rollout fails with ``why``."""
    return CodingRun(
        task_id=task_id,
        run_id=run_id,
        error=why,
        duration_s=duration_s,
        summaries=[
            TrajectorySummary(rollout_id=nth_rollout_id(run_id, i), failure_modes=[why])
            for i in range(rollouts)
        ],
    )


async def _create_workspaces(
    spaces: Workspaces, run_id: str, rollouts: int, limiter: anyio.CapacityLimiter
) -> BaseException | None:
    """Seed the ``rollouts`` workspaces of ``run_id``; the first failure, if any."""

    async def create(i: int) -> None:
        async with limiter:
            await spaces.get(run_id, nth_rollout_id(run_id, i))

    problem: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            for i in range(rollouts):
                tg.start_soon(create, i)
    except* (RuntimeFailure, OSError) as group:
        problem = group.exceptions[0]
    return problem
