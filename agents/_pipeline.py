"""Pipelines: units run in fixed order, each on the outputs of the earlier
(``PipelineNode``, the ``kind: pipeline`` unit of a hierarchy).

May import the runtime floor and the rest of ``agentrt.agents``; never
aggregators or the roof.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import final

import anyio
import msgspec

from agentrt.agents._control import RolloutContext, RolloutResult
from agentrt.agents._delegation import Node, sliced_ledger
from agentrt.agents._recording import EventEmitter
from agentrt.agents._spec import PipelineLimits, PipelineSpec, StageSpec
from agentrt.protocols._events import RolloutFinished, RolloutStarted
from agentrt.protocols._ids import stage_path, sub_rollout_id
from agentrt.protocols._trajectory import Trajectory, TrajectoryStatus
from agentrt.protocols._usage import Cost
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable

#: How long the final event of a cancelled pipeline may take.
FINAL_EVENT_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Stage:
    """A stage bound to the node that runs it."""

    spec: StageSpec
    node: Node


class StageOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One stage run: which stage, in which round, on what task, and how."""

    stage: str
    round: int
    task: str
    result: RolloutResult
    cost: Cost


class PipelineResult(msgspec.Struct, frozen=True, kw_only=True):
    """A pipeline run: its own result plus every stage run, in order."""

    result: RolloutResult
    stages: list[StageOutcome]


@final
class PipelineNode:
    """A pipeline as a node of a hierarchy (``agents.spec.PipelineSpec``).

    Variables start as ``task`` and ``previous`` (the task, until a stage
    answers).  Each stage renders its ``task`` template from them and runs
    its node once, as a child rollout charged to a child ledger capped at
    the node's slice of what the pipeline has left; the answer goes to its
    ``output`` variable and to ``previous``.  A stage matching ``stop_if``
    ends the pipeline, one that does not finish ends it with its status;
    after the last stage, while rounds remain, the run continues at
    ``repeat_from``.  The answer is the ``answer`` variable.  The
    pipeline's rollout records no model steps; its cost is its stages'.
    Cancelling it cancels the running stage."""

    def __init__(
        self,
        name: str,
        spec: PipelineSpec,
        stages: Sequence[Stage],
        *,
        emitter: EventEmitter,
        prices: PriceTable | None = None,
        description: str | None = None,
    ) -> None:
        if [s.spec for s in stages] != list(spec.stages):
            raise ValueError("stages must bind the spec's stages, in order")
        self._name = name
        self.spec = spec
        self.stages = list(stages)
        self._emitter = emitter
        self._prices = prices or PriceTable.free()
        self._description = (
            description
            or spec.description
            or (
                f"Runs the {name} pipeline: "
                + " -> ".join(s.spec.stage_name for s in stages)
                + "; answers with its result."
            )
        )
        self._restart = next(
            (i for i, s in enumerate(stages) if s.spec.stage_name == spec.repeat_from), 0
        )
        self._stop = {
            s.spec.stage_name: re.compile(s.spec.stop_if, re.IGNORECASE)
            for s in stages
            if s.spec.stop_if is not None
        }

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def limits(self) -> PipelineLimits:
        return self.spec.limits

    async def run(self, task: str, ctx: RolloutContext | None = None) -> RolloutResult:
        outcome = await self.run_stages(task, ctx)
        return outcome.result

    def _schedule(self) -> Iterator[tuple[int, Stage]]:
        """(round, stage) in the order they run, if none stops the run."""
        for stage in self.stages:
            yield 1, stage
        for round_ in range(2, self.spec.max_rounds + 1):
            for stage in self.stages[self._restart :]:
                yield round_, stage

    async def run_stages(self, task: str, ctx: RolloutContext | None = None) -> PipelineResult:
        """Run the pipeline; the result and every stage run.  ``ctx.seed``
        messages go to the first stage.  A pipeline takes no ``resume``
        (its stages cannot be taken up mid-way) and no ``options``."""
        if ctx is None:
            ctx = RolloutContext.new()
        if ctx.resume is not None:
            raise ValueError(f"pipeline {self.name!r} cannot resume from steps")
        run_id, rollout_id, parent_rollout_id = ctx.run_id, ctx.rollout_id, ctx.parent_rollout_id
        ledger = ctx.ledger or BudgetLedger(rollout_id, prices=self._prices)
        started = time.perf_counter()
        await self._emitter.emit(
            RolloutStarted(
                run_id=run_id,
                rollout_id=rollout_id,
                parent_rollout_id=parent_rollout_id,
                agent=self.name,
                task=task if parent_rollout_id is not None else None,
            )
        )
        values = {"task": task, "previous": task}
        outcomes: list[StageOutcome] = []
        status: TrajectoryStatus = "finished"
        reason = f"all stages ran ({self.spec.max_rounds} round{'s' * (self.spec.max_rounds > 1)})"

        def total() -> Cost:
            spent = sum((o.cost for o in outcomes), Cost())
            return msgspec.structs.replace(spent, wall_seconds=time.perf_counter() - started)

        try:
            with (
                anyio.CancelScope() as scope,
                ctx.control.attach(rollout_id, scope) if ctx.control else nullcontext(),
            ):
                for round_, stage in self._schedule():
                    stage_task = stage.spec.task.format_map(values)
                    outcome = await self._stage(
                        stage, round_, stage_task, ctx=ctx, ledger=ledger, first=not outcomes
                    )
                    outcomes.append(outcome)
                    name, result = outcome.stage, outcome.result
                    if result.status != "finished":
                        status = result.status
                        reason = f"stage {name} (round {round_}) {result.status}: "
                        reason += result.trajectory.stop_reason or "no reason given"
                        break
                    output = (result.answer or "").strip()
                    values[stage.spec.variable] = values["previous"] = output
                    pattern = self._stop.get(name)
                    if pattern is not None and pattern.search(output):
                        reason = f"stage {name} (round {round_}) matched stop_if"
                        break
            if scope.cancelled_caught:
                status, reason = "cancelled", "cancelled"
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(FINAL_EVENT_TIMEOUT_S, shield=True):
                await self._finish(run_id, rollout_id, "cancelled", None, total())
            raise
        answer: str | None = None
        if status == "finished":
            answer = values.get(self.spec.answer_variable, values["previous"])
        cost = total()
        await self._finish(run_id, rollout_id, status, answer, cost)
        trajectory = Trajectory(
            run_id=run_id,
            rollout_id=rollout_id,
            agent=self._name,
            task=task,
            answer=answer,
            status=status,
            cost=cost,
            parent_rollout_id=parent_rollout_id,
            stop_reason=reason,
        )
        return PipelineResult(result=RolloutResult(trajectory=trajectory), stages=outcomes)

    async def _stage(
        self,
        stage: Stage,
        round_: int,
        task: str,
        *,
        ctx: RolloutContext,
        ledger: BudgetLedger,
        first: bool,
    ) -> StageOutcome:
        """Run ``stage`` in round ``round_`` on ``task``, as a child rollout
        on its slice of ``ledger`` (the pipeline's seed goes to the first
        stage); or take it up as an earlier incarnation of the run finished
        it (``ctx.done``: its answer, its cost already on the run's ledger)."""
        name = stage.spec.stage_name
        path = stage_path(name, round_)
        done = ctx.done.get(path)
        if done is not None and done.status == "finished":
            trajectory = Trajectory(
                run_id=ctx.run_id,
                rollout_id=done.rollout_id,
                agent=stage.node.name,
                task=task,
                answer=done.answer,
                status="finished",
                cost=done.cost,
                parent_rollout_id=ctx.rollout_id,
                stop_reason=done.stop_reason,
            )
            result = RolloutResult(trajectory=trajectory)
            return StageOutcome(stage=name, round=round_, task=task, result=result, cost=done.cost)
        _, stage_ledger = sliced_ledger(
            ledger, name, stage.node.limits, share=stage.spec.budget_share
        )
        stage_id = sub_rollout_id(sub_rollout_id(ctx.rollout_id, name), str(round_))
        seed = ctx.seed if first else ()
        try:
            result = await stage.node.run(
                task, ctx.call(stage_id, stage_ledger, seed=seed, path=path)
            )
        finally:
            stage_ledger.finish()
        return StageOutcome(
            stage=name, round=round_, task=task, result=result, cost=stage_ledger.spent
        )

    async def _finish(
        self,
        run_id: str,
        rollout_id: str,
        status: TrajectoryStatus,
        answer: str | None,
        cost: Cost,
    ) -> None:
        await self._emitter.emit(
            RolloutFinished(
                run_id=run_id, rollout_id=rollout_id, status=status, answer=answer, cost=cost
            )
        )


__all__ = ["FINAL_EVENT_TIMEOUT_S", "PipelineNode", "PipelineResult", "Stage", "StageOutcome"]
