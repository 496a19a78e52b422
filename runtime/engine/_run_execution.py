"""One run as supervised actors: an actor per rollout, then summaries and
the aggregation, all on the run's one ledger.

Owns ``RunExecution``: a ``RunPlan`` (``_run_plan.py``) executed with its
Runtime's ``RunServices``: the run's event stream, the fan-out of its
rollouts through the Runtime's placement (as ``RolloutActor``s under a
supervisor, here or on Ray workers, that restarts a crashed one within its
own restart intensity from its committed steps and records it failed past
that; here, the Runtime's one rollout supervisor holds every run's rollout
actors, each named after its run: ``spawn_rollout_supervisor``), the
per-backend slots (a rollout waiting for one is ``queued``), early stop,
the deadline, the summaries, the aggregation and the ``RunResult``; and
taking up a run an earlier process committed (``RunCheckpoint``).  Must
not know which entry point started the run.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, final

import anyio
import msgspec

from agentrt.agents._recording import EventEmitter, EventSink
from agentrt.aggregators._aggregator import (
    AGGREGATION_MIN_TOKENS,
    AggregationContext,
    AggregationResult,
    Aggregator,
    nothing_left,
)
from agentrt.aggregators._vote import (
    MajorityVote,
    answer_key,
    voted_answer,
)
from agentrt.aggregators._workspace import Workspace
from agentrt.protocols._events import (
    BudgetUpdated,
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutQueued,
    RunFinished,
    RunStarted,
    StepRecorded,
    SummaryWritten,
)
from agentrt.protocols._ids import RolloutId, is_top_level, nth_rollout_id, refine_slot
from agentrt.protocols._messages import SystemMessage, UserMessage
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.protocols._run import RunResult, RunStatus
from agentrt.protocols._trajectory import Step, Trajectory, TrajectoryStatus, TrajectorySummary
from agentrt.protocols._usage import BudgetCut, Cost
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._checkpoint import RolloutCheckpoint
from agentrt.runtime.engine._journal import EventJournal
from agentrt.runtime.engine._model_calls import reporting
from agentrt.runtime.engine._rollout_actor import RunRollout
from agentrt.runtime.engine._run_plan import RunPlan, RunServices
from agentrt.runtime.kernel._actor_spec import RestartIntensity, SupervisorSpec
from agentrt.runtime.kernel._errors import BudgetExceeded
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.placement._placement import PlacedRun, RolloutJob
from agentrt.runtime.placement._placement import RolloutGaveUp as _GaveUp

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

if TYPE_CHECKING:
    pass

log = get_logger(__name__)

_UNSCOPED: Final = nullcontext()
"""Where a scope has nothing to do (no deadline, nothing to stop early)."""

_CAP_NAMED: Final = re.compile(r"max_(?:tokens|usd|model_calls|wall_seconds)")
"""The cap a refusal names (``BudgetExceeded``'s message, a stop reason)."""

_AGGREGATION_CUT: Final = re.compile(r"stopped at the budget cap \((max_\w+)\)")
"""An aggregation's rationale when the cap stopped it (``BudgetStop.why``)."""

_STEPS_ONLY: Final = frozenset({StepRecorded})

_RESUMED: Final = "the run was resumed from its checkpoint"
"""Why a rollout an earlier incarnation left running ended (the entry point
that resumed the run does not matter here)."""


async def spawn_rollout_supervisor(system: ActorSystem, restarts: int) -> SupervisorRef:
    """The supervisor every run's rollout actors live under (the Runtime
    spawns it once, when it opens): each rollout restarted at most
    ``restarts`` times, then recorded failed.  One for all runs
    (docs/design/performance.md, "The engine"); a run's rollout actors are
    stopped with it by the placement (each is named after its run)."""
    return await system.spawn_supervisor(
        SupervisorSpec(
            "rollouts",
            intensity=RestartIntensity(restarts, within=math.inf),
            on_exhausted="stop_child",
        )
    )


OutcomeStatus = Literal["succeeded", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class _Done:
    trajectory: Trajectory
    summary: TrajectorySummary


@dataclass(slots=True)
class _Outcome:
    index: int
    status: OutcomeStatus = "cancelled"
    value: _Done | None = None
    error: BaseException | None = None


class _PastDeadline(Exception):
    """The run's wall-clock cap passed before the rollout answered."""


@final
class _CommitSink:
    """The run's event sink: the caller's, then the top-level rollouts'
    committed steps noted (a sub-agent's are not resumed).  Committed steps
    are seen after the caller's sink took them (the daemon's store): a
    restart never resumes from an uncommitted step."""

    __slots__ = ("_committed", "_outer")

    def __init__(self, outer: EventSink, committed: defaultdict[str, list[Step]]) -> None:
        self._outer = outer
        self._committed = committed

    async def __call__(self, event: Event) -> None:
        await self._outer(event)
        if type(event) is StepRecorded and is_top_level(event.rollout_id):
            self._committed[event.rollout_id].append(event.step)


@final
class _Commits:
    """The run's event sink when the caller has none: it is sent the
    ``StepRecorded`` events alone (``EventEmitter.kinds``) and notes the
    top-level rollouts' steps as committed (see ``_CommitSink``)."""

    __slots__ = ("_committed",)

    def __init__(self, committed: defaultdict[str, list[Step]]) -> None:
        self._committed = committed

    async def __call__(self, event: Event) -> None:
        if type(event) is StepRecorded and "." not in (rollout_id := event.rollout_id):
            self._committed[rollout_id].append(event.step)


@final
class RunExecution:
    """One run of ``Runtime.run``: its ``RunPlan`` executed with its
    Runtime's ``RunServices`` (see the module docstring).  ``execute``
    runs it once."""

    __slots__ = (
        "_ahead",
        "_budget_spent",
        "_committed",
        "_finished",
        "_name",
        "_next",
        "_outcomes",
        "_pending",
        "_placed",
        "_refines",
        "_rule_met",
        "_scopes",
        "_stopped",
        "_tg",
        "deadline",
        "emitter",
        "plan",
        "services",
        "window",
    )

    def __init__(self, plan: RunPlan, services: RunServices, emitter: EventEmitter) -> None:
        self.plan = plan
        self.services = services
        self.emitter = emitter
        n = plan.scaling.rollouts
        self.window = plan.scaling.min_rollouts if plan.scaling.confidence is not None else n
        """How many rollouts run at once (adaptive N: fewer, one more as each ends)."""
        self.deadline = math.inf
        """When the run's wall-clock cap passes (``anyio.current_time``), set as it starts."""
        self._name = f"run{next(services.names)}"
        self._refines = 0
        self._placed: PlacedRun | None = None
        self._committed: defaultdict[str, list[Step]] = defaultdict(list)
        self._ahead: dict[str, BudgetLedger] = {}
        """Resumed rollouts' ledgers, by slot, charged with their committed
        steps before any rollout went on (``_charge_committed``)."""
        self._outcomes = [_Outcome(i) for i in range(n)]
        # A rollout's own scope is for stopping it early, when others end
        # first: a lone rollout has none (nothing ends before it).
        self._scopes: Sequence[anyio.CancelScope] = (
            [anyio.CancelScope() for _ in range(n)] if n > 1 else ()
        )
        self._finished: list[_Outcome] = []
        self._pending = n
        self._stopped = False
        self._rule_met = False
        self._budget_spent = False  # the run was stopped, or kept from starting one, by a cap
        budget = plan.ledger.budget
        # Rollouts this run may stop in flight stream their calls, so that a
        # stopped call is charged what it consumed (``BudgetLedger``).
        plan.ledger.stream_calls = n > 1 and (
            plan.early_vote is not None
            or plan.scaling.confidence is not None
            or plan.wall is not None
            or budget.max_tokens is not None
            or budget.max_usd is not None
            or budget.max_model_calls is not None
        )
        self._next = self.window  # the next rollout to start (adaptive N)
        plan.ledger.expect_children(self.window)  # they share what the budget leaves
        self._tg: TaskGroup | None = None
        outer = emitter.sink
        if outer is None:
            # Nobody reads the run's events but the steps: the agent loop
            # then builds no per-call event (``EventEmitter.wants``).
            emitter.sink = _Commits(self._committed)
            emitter.kinds = _STEPS_ONLY
        else:
            emitter.sink = _CommitSink(outer, self._committed)

    @property
    def run_id(self) -> str:
        return self.plan.run_id

    @property
    def ledger(self) -> BudgetLedger:
        return self.plan.ledger

    # -- the run --------------------------------------------------------------

    async def execute(self) -> RunResult:
        plan = self.plan
        started = time.perf_counter()
        if plan.checkpoint is None and self.emitter.wants(RunStarted):
            await self.emitter.emit(
                RunStarted(
                    run_id=plan.run_id,
                    agent=plan.agent_name,
                    task=plan.task,
                    rollouts=plan.scaling.rollouts,
                )
            )
        # One deadline for the whole run: warm-up, rollouts, aggregation.
        if plan.wall is not None:
            self.deadline = anyio.current_time() + plan.wall
        try:
            outcomes = self._outcomes
            # A lone rollout without a wall-clock cap (nor a warm-up): no
            # scope, and no task (nor task group) for it.
            lone = plan.wall is None and len(outcomes) == 1
            await (self._one(outcomes[0]) if lone else self._fan_out(outcomes))
            summaries = self._summaries(outcomes)
            trajectories = {
                o.value.trajectory.rollout_id: o.value.trajectory for o in outcomes if o.value
            }
            context = AggregationContext.metered(
                self._main_backend(),
                plan.ledger,
                run_id=plan.run_id,
                events=self.emitter,
                trajectories=trajectories,
                rollout=self._refine_rollout,
                after_call=reporting(
                    self.emitter,
                    plan.ledger,
                    run_id=plan.run_id,
                    purpose="aggregation",
                    aggregator=plan.aggregator.name,
                ),
                min_tokens=AGGREGATION_MIN_TOKENS,
            )
            agg = await self._aggregate(plan.aggregator, summaries, context)
        except Exception as exc:
            await self.emitter.emit(
                ErrorRaised(run_id=plan.run_id, where="run", message=repr(exc), fatal=True)
            )
            await self.emitter.emit(RunFinished(run_id=plan.run_id, status="failed"))
            raise
        finally:
            plan.ledger.finish()
        cost = msgspec.structs.replace(
            plan.ledger.spent, wall_seconds=time.perf_counter() - started
        )
        await self._budget_event()
        status: RunStatus = "succeeded" if agg.answer is not None else "failed"
        stopped = self._budget_stop(outcomes, agg)
        # What the vote compared (``42``); the rollout's own text stays on the result.
        answer = voted_answer(agg.answer, plan.normalize) if agg.answer is not None else None
        if self.emitter.wants(RunFinished):
            await self.emitter.emit(
                RunFinished(
                    run_id=plan.run_id,
                    status=status,
                    answer=answer,
                    cost=cost,
                    stopped=stopped,
                )
            )
        return RunResult(
            run_id=plan.run_id,
            status=status,
            answer=answer,
            raw_answer=agg.answer,
            rationale=agg.rationale,
            summaries=summaries,
            aggregation_trace=[msgspec.to_builtins(v) for v in agg.trace],
            cost=cost,
            error=None if agg.answer is not None else _no_answer(agg.rationale, outcomes),
            stopped=stopped,
        )

    def _budget_stop(
        self, outcomes: Sequence[_Outcome], agg: AggregationResult
    ) -> BudgetCut | None:
        """How a cap cut the run short, or ``None`` when none did: a rollout
        ended for want of budget, the spent budget stopped the run (and kept
        the rest from running), or it stopped the aggregation (which says
        so in its rationale: ``BudgetStop.why``)."""
        finished = cut = 0
        limit: str | None = None
        for o in outcomes:
            trajectory = o.value.trajectory if o.value is not None else None
            if trajectory is not None and trajectory.answer is not None:
                finished += 1
            why = (
                trajectory.stop_reason or ""
                if trajectory is not None and trajectory.status == "exhausted"
                else str(o.error)
                if isinstance(o.error, BudgetExceeded)
                else ""
            )
            if why.startswith("budget:") or isinstance(o.error, BudgetExceeded):
                cut += 1
                named = _CAP_NAMED.search(why)
                limit = limit or (named.group(0) if named else None)
            elif o.value is None and o.status == "cancelled" and self._budget_spent:
                cut += 1  # stopped (or never started) once the budget was spent
        aggregation = _AGGREGATION_CUT.search(agg.rationale)
        if not cut and aggregation is None:
            return None
        if aggregation is not None:
            limit = limit or aggregation.group(1)
        if limit is None:
            room = self.plan.ledger.headroom()
            limit = room.shortfall(1, 1) or "max_tokens"
        return BudgetCut(
            limit=limit,
            rollouts=len(outcomes),
            finished=finished,
            cut=cut,
            aggregation=aggregation is not None,
        )

    def _main_backend(self) -> ModelBackend:
        return self.plan.main_backend(self.services.backends)

    # -- the fan-out ------------------------------------------------------------

    async def _aggregate(
        self,
        chosen: Aggregator,
        summaries: list[TrajectorySummary],
        context: AggregationContext,
    ) -> AggregationResult:
        """The aggregation, within the run's deadline; when the deadline cuts
        it, a majority vote over the summaries (no model call) decides."""
        task, wall = self.plan.task, self.plan.wall
        if wall is None:
            return await chosen.aggregate(task, summaries, context)
        with anyio.CancelScope(deadline=self.deadline):
            return await chosen.aggregate(task, summaries, context)
        vote = await MajorityVote().aggregate(task, summaries, context)
        why = f"the wall-clock cap ({wall:g} s) cut {chosen.name}; a majority vote decided"
        return msgspec.structs.replace(vote, rationale=f"{why}: {vote.rationale}")

    async def _fan_out(self, outcomes: list[_Outcome]) -> None:
        """Every rollout in parallel (adaptive N: ``self.window`` at a time,
        another started as each ends), each waiting for its backend's slot;
        stopped early when the vote is decided (or, adaptive, settled) or the
        budget is spent.  A rollout never started has no outcome."""
        n = len(outcomes)
        wall = self.plan.wall
        self._charge_committed(outcomes)
        # No wall-clock cap: no scope to carry its deadline.
        overall = anyio.CancelScope(deadline=self.deadline) if wall is not None else None
        with overall if overall is not None else _UNSCOPED:
            if (
                self.services.config.warm_prefix
                and n > 1
                and self.plan.agent is not None
                and not self._resumed_with_steps()
            ):
                await self._warm()
            if n == 1:
                # One rollout, nothing to start after it: no task (and
                # task group) for it.
                await self._one(outcomes[0])
            else:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    for outcome in outcomes[: self.window]:
                        tg.start_soon(self._one, outcome)
        if overall is not None and overall.cancelled_caught:
            for outcome in outcomes:
                if outcome.status == "cancelled":
                    outcome.status = "failed"
                    outcome.error = _PastDeadline(f"no answer within {wall:g} s")

    def _charge_committed(self, outcomes: Sequence[_Outcome]) -> None:
        """A resumed run's rollouts' committed steps, charged to the run's
        ledger (through each rollout's) before any rollout goes on, as
        ``restore_journal`` charges the calls on record: a rollout charging
        its own steps only as it started let those started first call past
        a cap the later ones' steps had spent (a rollout runs to its first
        call without a pause when its events need no wait)."""
        plan = self.plan
        if plan.checkpoint is None or not plan.entry.resumable:
            return  # a pipeline restarts, charging what it took over (``_take_over``)
        for outcome in outcomes:
            base = RolloutId.nth(plan.run_id, outcome.index)
            _, saved = self._saved(base)
            if saved is not None and saved.steps:
                ledger = plan.ledger.child(base.slot)
                _restore_steps(ledger, saved.steps)
                self._ahead[base.slot] = ledger

    def _stop_all(self) -> None:
        self._stopped = True
        for scope in self._scopes:
            scope.cancel()

    async def _one(self, outcome: _Outcome) -> None:
        i = outcome.index
        scope = self._scopes[i] if self._scopes else None
        if scope is None:
            await self._attempt(outcome)
        else:
            with scope:
                await self._attempt(outcome)
        if scope is not None and scope.cancelled_caught:
            return  # stopped early: no outcome
        self._pending -= 1
        if self._rule_met:
            # Adaptive N: the rollouts that had ended before this one settled
            # the vote, and the rule stops at them; this one is left out as
            # if it had been stopped in time.
            outcome.status, outcome.value = "cancelled", None
            return
        self._finished.append(outcome)
        # The rules are checked as each rollout ends, before anything awaits,
        # so no other rollout's end slips in between (which made adaptive N
        # overshoot its own rule), and a rollout waiting for the slot this
        # one freed is stopped before its call is sent.
        if self._pending > 0:
            decided = self._vote_decided()
            if decided is not None:
                self._rule_met = decided == "settled"
                self._stop_all()
            elif self._should_stop():
                self._stop_all()
        if outcome.status == "failed":
            await self.emitter.emit(
                ErrorRaised(
                    run_id=self.plan.run_id,
                    where=f"rollout {i}",
                    message=repr(outcome.error),
                    rollout_id=nth_rollout_id(self.plan.run_id, i),
                )
            )
        await self._budget_event()
        if self._stopped:
            return
        if nothing_left(self.plan.ledger) is not None:
            self._budget_spent = True
            return  # adaptive N: no rollout starts that could make no call
        if self._next < len(self._outcomes) and self._tg is not None:
            self._next += 1
            self._tg.start_soon(self._one, self._outcomes[self._next - 1])

    async def _attempt(self, outcome: _Outcome) -> None:
        """Run rollout ``outcome.index`` in its backend's slot, noting how it ended."""
        i = outcome.index
        run_id = self.plan.run_id
        backend = self._main_backend().name
        slot = self.services.slot(backend)
        if slot is not None:
            # Taken without waiting when free; see docs/design/performance.md.
            try:
                slot.acquire_nowait()
            except anyio.WouldBlock:
                await self.emitter.emit(
                    RolloutQueued(
                        run_id=run_id,
                        rollout_id=nth_rollout_id(run_id, i),
                        backend=backend,
                        limit=int(slot.total_tokens),
                    )
                )
                await slot.acquire()
        try:
            outcome.value = await self._run_or_resume(RolloutId.nth(run_id, i), self.plan.task, ())
            outcome.status = "succeeded"
        except BudgetExceeded as exc:
            outcome.status, outcome.error = "failed", exc
            self._budget_spent = True
            self._stop_all()
        except Exception as exc:
            log.warning("rollout_failed", index=i, error=repr(exc))
            outcome.status, outcome.error = "failed", exc
        finally:
            if slot is not None:
                slot.release()

    def _should_stop(self) -> bool:
        """Whether the budget is spent (no further call could be admitted)."""
        if nothing_left(self.plan.ledger) is not None:
            self._budget_spent = True
            return True
        return False

    def _vote_decided(self) -> Literal["certain", "settled"] | None:
        """Whether the rollouts ended so far decide the vote: ``certain``
        (early stop: no pending rollout can change the plurality; one that
        ends anyway still counts) or ``settled`` (adaptive N: the leader
        beats the runner-up with probability ``confidence``; the rule's N
        is the rollouts ended so far)."""
        vote, confidence = self.plan.early_vote, self.plan.scaling.confidence
        if vote is None and confidence is None:
            return None
        normalize = vote.normalize if vote is not None else self.plan.normalize
        keys = [
            answer_key(o.value.summary.answer, normalize) if o.value else None
            for o in self._finished
        ]
        if confidence is not None and _settled(keys) >= confidence:
            return "settled"
        if vote is not None and _majority_certain(keys, self._pending):
            return "certain"
        return None

    async def _warm(self) -> None:
        """One request with the prefix every rollout's first request starts
        with (instructions, task, tools), so the server caches it; charged
        to the run's ledger like every call.  A failure is only logged."""
        plan = self.plan
        agent = plan.agent
        assert agent is not None
        model = agent.policy.ladder.tiers[0].model
        request = ModelRequest(
            messages=[
                SystemMessage(content=agent.config.instructions),
                UserMessage(content=plan.task),
            ],
            # A backend's name as the reference: ask for its own default model.
            model=model if agent.served_model(model) == model else None,
            tools=agent.toolbox.specs,
            sampling=SamplingParams(temperature=0.0, max_tokens=1),
            request_id=f"{plan.run_id}-warm",
            affinity_key=plan.run_id,
        )
        metered = MeteredBackend(
            agent.backend_for(model),
            plan.ledger,
            model=model,
            after_call=reporting(self.emitter, plan.ledger, run_id=plan.run_id, purpose="warm-up"),
        )
        try:
            with anyio.fail_after(self.services.config.warm_timeout_s):
                await metered.complete(request)
        except Exception as exc:
            log.warning("warm_prefix_failed", error=repr(exc))
            await self._budget_event()  # a call cut by the timeout was charged

    # -- one rollout ----------------------------------------------------------------

    async def _refine_rollout(self, task: str, workspace: Workspace) -> TrajectorySummary:
        """A fresh rollout seeded with PDR's workspace."""
        self._refines += 1
        slot = refine_slot(workspace.round, self._refines - 1)
        seed = [UserMessage(content=workspace.render())]
        done = await self._run_or_resume(RolloutId(self.plan.run_id, slot), task, seed)
        return done.summary

    async def _run_or_resume(
        self, base: RolloutId, task: str, seed: Sequence[UserMessage]
    ) -> _Done:
        """Run a rollout as an actor, or take up what an earlier incarnation
        of the run committed: an ended rollout is restored; an agent's
        unfinished one replays its steps and goes on, and so does a
        hierarchy's whose entry node is an agent (the sub-agent calls its
        committed steps made are charged as spent; the call in flight runs
        again, under a new id).  A pipeline's restarts as incarnation k
        (``id~k``), the interrupted attempt left in the record: the stages
        that attempt finished are taken up, not run again (``done``), and
        the stage it was in runs again (a stage is not taken up mid-way).
        The rollout runs where the Runtime's placement puts it (an actor
        here, or on a Ray worker); a crashed one goes on from its committed
        steps (``Placement.run_rollout``)."""
        plan = self.plan
        entry = plan.entry
        ahead = self._ahead.pop(base.slot, None)
        ledger = ahead if ahead is not None else plan.ledger.child(base.slot)
        rollout, saved = self._saved(base)
        resume: list[Step] | None = None
        calls_after = 0
        done: dict[str, RolloutFinished] = {}
        if saved is not None:
            ended = saved.finished is not None or bool(
                saved.steps and saved.steps[-1].reply is None
            )
            if ended or saved.summary is not None:
                # Its sub-agents (a hierarchy's) spent too.
                await self._take_over(rollout, ledger, with_itself=False)
                return await self._restored(str(rollout), saved, ledger, charged=ahead is not None)
            if entry.resumable:
                # Its sub-agents' rollouts are taken over even when it has no
                # step of its own yet: its first call may have been in flight.
                calls_after = await self._take_over(rollout, ledger, with_itself=False)
                resume = list(saved.steps) or None
            else:
                assert plan.checkpoint is not None
                calls_after = await self._take_over(rollout, ledger, with_itself=True)
                done = self._finished_below(rollout)
                rollout = base.restarted(plan.checkpoint.incarnation)
        rollout_id = str(rollout)
        if resume is not None:
            self._committed[rollout_id] = list(resume)
        message = RunRollout(
            task=task,
            run_id=plan.run_id,
            rollout_id=rollout_id,
            seed=tuple(seed),
            resume=resume,
            restored=resume is not None,
            charged=resume is not None and ahead is not None,
            options=plan.options,
            calls_after=calls_after,
            done=done,
        )
        name = f"{self._name}-{base.slot}"
        job = RolloutJob(message, name, ledger, self._committed[rollout_id])
        services = self.services
        try:
            placed = self._placed or self._place()
            result = await services.placement.run_rollout(placed, job)
        finally:
            # An ended rollout no longer shares in what the run has left.
            ledger.finish()
            if services.rollout_finished is not None:
                with anyio.CancelScope(shield=True):  # its own MCP connections close with it
                    await services.rollout_finished(plan.run_id, rollout_id)
        return await self._summarize(result.trajectory)

    def _place(self) -> PlacedRun:
        """This run as its placement sees it (made once, ``_placed``)."""
        plan, services = self.plan, self.services
        self._placed = PlacedRun(
            run_id=plan.run_id,
            runner=plan.entry,
            agent=plan.placed_as,
            system=services.system,
            supervisor=services.supervisor,
            emit=self.emitter.emit,
            restarts=services.config.rollout_restarts,
            journal=journal if isinstance(journal := plan.ledger.journal, EventJournal) else None,
            events=self.emitter.kinds,
        )
        return self._placed

    def _resumed_with_steps(self) -> bool:
        """An earlier incarnation of this run committed steps (its prompt
        prefix was warmed then, and the warm-up is not repeated)."""
        checkpoint = self.plan.checkpoint
        return checkpoint is not None and any(saved.steps for saved in checkpoint.rollouts.values())

    def _saved(self, base: RolloutId) -> tuple[RolloutId, RolloutCheckpoint | None]:
        """The latest committed incarnation of a rollout: the one restarted
        by incarnation k (``id~k``) before the first; (``base``, None) if none."""
        checkpoint = self.plan.checkpoint
        if checkpoint is None:
            return base, None
        saved = checkpoint.rollouts
        for k in range(checkpoint.incarnation - 1, -1, -1):
            candidate = base.restarted(k)
            if candidate in saved:
                return candidate, saved[candidate]
        return base, None

    def _finished_below(self, rollout: RolloutId) -> dict[str, RolloutFinished]:
        """The rollouts under ``rollout`` its earlier incarnation finished
        (a pipeline's stages), by their path below it: the pipeline takes
        them up rather than run them again (``RolloutContext.done``)."""
        checkpoint = self.plan.checkpoint
        assert checkpoint is not None
        return {
            sub.below: saved.finished
            for sub, saved in checkpoint.rollouts.items()
            if sub.path
            and sub.top == rollout
            and saved.finished is not None
            and saved.finished.status == "finished"
        }

    async def _take_over(
        self, rollout: RolloutId, ledger: BudgetLedger, *, with_itself: bool
    ) -> int:
        """Before a hierarchy's rollout goes on, is restored (or, with
        ``with_itself``, restarts): charge ``ledger`` with what an earlier
        incarnation's sub-agent rollouts under it committed (nested ones
        too; and the rollout's own steps, ``with_itself``), so the run keeps
        to its budget; end the ones left unfinished as ``cancelled``
        (interrupted).  The highest sub-agent call number they used: later
        calls are numbered past it."""
        checkpoint = self.plan.checkpoint
        assert checkpoint is not None
        highest = 0
        for sub, saved in checkpoint.rollouts.items():
            if sub.top != rollout or (sub == rollout and not with_itself):
                continue
            highest = max([highest, *sub.call_numbers()])
            cost = _restore_steps(ledger, saved.steps)
            if saved.finished is None:
                await self.emitter.emit(
                    RolloutFinished(
                        run_id=self.plan.run_id,
                        rollout_id=str(sub),
                        status="cancelled",
                        cost=cost,
                        stop_reason=f"interrupted: {_RESUMED}",
                    )
                )
        return highest

    async def _restored(
        self, rollout_id: str, saved: RolloutCheckpoint, ledger: BudgetLedger, *, charged: bool
    ) -> _Done:
        """A rollout an earlier incarnation ended (or a hierarchy's, which
        cannot resume mid-way and is taken as it stood): its steps are
        charged as spent (unless ``charged`` already), its trajectory
        rebuilt; summarized if it was not."""
        cost = _restore_steps(ledger, saved.steps, charged=charged)
        end = saved.finished
        last = saved.steps[-1] if saved.steps else None
        trajectory = Trajectory(
            run_id=self.plan.run_id,
            rollout_id=rollout_id,
            agent=self.plan.agent_name,
            task=self.plan.task,
            steps=list(saved.steps),
            answer=end.answer if end is not None else None,
            status=_trajectory_status(end.status if end is not None else "failed"),
            cost=end.cost if end is not None else cost,
            stop_reason=(
                end.stop_reason or "restored"
                if end is not None
                else f"interrupted: {last.error if last and last.error else _RESUMED}"
            ),
        )
        if saved.summary is not None:
            return _Done(trajectory, saved.summary)
        return await self._summarize(trajectory)

    async def _summarize(self, trajectory: Trajectory) -> _Done:
        summary = await self.plan.summarizer.summarize(trajectory)
        if self.emitter.wants(SummaryWritten):  # not built when nobody reads it
            await self.emitter.emit(SummaryWritten(run_id=self.plan.run_id, summary=summary))
        return _Done(trajectory, summary)

    async def _budget_event(self) -> None:
        if self.emitter.wants(BudgetUpdated):  # no snapshot when nobody reads it
            await self.emitter.emit(self.plan.ledger.snapshot().to_event(self.plan.run_id))

    def _summaries(self, outcomes: Sequence[_Outcome]) -> list[TrajectorySummary]:
        """A summary per rollout, in rollout order; a crashed one has no
        answer and names its error (the aggregators leave it out)."""
        out: list[TrajectorySummary] = []
        for o in outcomes:
            if o.value is not None:
                out.append(o.value.summary)
            elif o.status == "failed":
                known = isinstance(o.error, _GaveUp | _PastDeadline)
                why = str(o.error) if known else f"crashed: {o.error!r}"
                out.append(
                    TrajectorySummary(
                        rollout_id=nth_rollout_id(self.plan.run_id, o.index), failure_modes=[why]
                    )
                )
        return out


def _no_answer(rationale: str | None, outcomes: Sequence[_Outcome]) -> str:
    """A run's error when it has no answer: the aggregator's reason, then why
    the rollouts ended without one (each reason once, with how many), so a
    backend nobody can reach is named in the run's own error."""
    reasons: dict[str, int] = {}
    for o in outcomes:
        if o.value is not None:
            trajectory = o.value.trajectory
            if trajectory.answer is not None or not trajectory.stop_reason:
                continue
            reason = trajectory.stop_reason
        elif o.status == "failed":
            known = isinstance(o.error, _GaveUp | _PastDeadline)
            reason = str(o.error) if known else f"crashed: {o.error!r}"
        else:
            continue
        reasons[reason] = reasons.get(reason, 0) + 1
    head = rationale or "no rollout answered"
    if not reasons:
        return head
    listed = [f"{why} ({n} rollouts)" if n > 1 else why for why, n in list(reasons.items())[:3]]
    more = f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    return f"{head}: {'; '.join(listed)}{more}"


def _restore_steps(ledger: BudgetLedger, steps: Sequence[Step], *, charged: bool = False) -> Cost:
    """What ``steps`` cost, charged to ``ledger`` as spent (unless ``charged``)."""
    cost = Cost()
    for step in steps:
        if step.reply is not None:
            model = step.routing.model if step.routing is not None else step.reply.model
            usage = step.reply.usage
            cost += ledger.cost_of(model, usage) if charged else ledger.restore(model, usage)
    return cost


def _majority_certain(keys: Sequence[str | None], pending: int) -> bool:
    """True when a plurality vote over ``keys`` (``None``: no answer) can no
    longer change: the leader's count exceeds the runner-up's plus every
    pending rollout (each of which could still vote for the runner-up)."""
    counts: dict[str, int] = {}
    for key in keys:
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return False
    ranked = sorted(counts.values(), reverse=True)
    runner_up = ranked[1] if len(ranked) > 1 else 0
    return ranked[0] > runner_up + pending


def _settled(keys: Sequence[str | None]) -> float:
    """How settled the leading answer among ``keys`` is: the probability
    that its share exceeds the runner-up's, from their counts a and b with
    a uniform prior (P(Beta(a + 1, b + 1) > 1/2) = P(Binomial(a + b + 1,
    1/2) <= a)); 0 with no answer."""
    counts = sorted(Counter(k for k in keys if k is not None).values(), reverse=True)
    if not counts:
        return 0.0
    a, b = counts[0], counts[1] if len(counts) > 1 else 0
    trials = a + b + 1
    return sum(math.comb(trials, k) for k in range(a + 1)) / (1 << trials)


def _trajectory_status(status: str) -> TrajectoryStatus:
    known: Mapping[str, TrajectoryStatus] = {
        "running": "running",
        "finished": "finished",
        "failed": "failed",
        "cancelled": "cancelled",
        "exhausted": "exhausted",
    }
    return known.get(status, "failed")


__all__ = ["RunExecution", "spawn_rollout_supervisor"]
