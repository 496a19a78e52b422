"""One run as supervised actors: an actor per rollout, then summaries and
the aggregation, all on the run's one ledger.

Owns ``RunExecution``: the run's ledger and event stream, the fan-out of its
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

import itertools
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, final

import anyio
import msgspec

from agentrt.agents._agent import Agent
from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._delegation import AgentNode, skip_call_numbers
from agentrt.agents._hierarchy import Hierarchy
from agentrt.agents._recording import EventEmitter, EventSink
from agentrt.agents._run_options import check_run_options
from agentrt.agents._summary import ModelSummarizer, RuleBasedSummarizer, Summarizer
from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    Aggregator,
    nothing_left,
)
from agentrt.aggregators._compose import build_aggregator
from agentrt.aggregators._rtv import RecursiveTournament
from agentrt.aggregators._vote import (
    MajorityVote,
    Normalizer,
    WeightedVote,
    answer_key,
    default_normalizer,
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
from agentrt.protocols._ids import RolloutId, is_top_level
from agentrt.protocols._messages import SystemMessage, UserMessage
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.protocols._run import Budget, RunOptions, RunResult, RunStatus, ScalingSpec
from agentrt.protocols._trajectory import Step, Trajectory, TrajectoryStatus, TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._checkpoint import RolloutCheckpoint, RunCheckpoint
from agentrt.runtime.engine._journal import EventJournal, restore_journal
from agentrt.runtime.engine._rollout_actor import Runner, RunRollout
from agentrt.runtime.kernel._actor_spec import RestartIntensity, SupervisorSpec
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError, UnknownModelError
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.memory._admission import ScoredAdmission
from agentrt.runtime.memory._view import MemoryView
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.placement._placement import PlacedRun, RolloutJob
from agentrt.runtime.placement._placement import RolloutGaveUp as _GaveUp

if TYPE_CHECKING:
    from agentrt.runtime.engine._runtime import AgentRef, Runtime

log = get_logger(__name__)

_names = itertools.count()


_UNSCOPED: Final = nullcontext()
"""Where a scope has nothing to do (no deadline, nothing to stop early):
one shared no-op context, not a scope (or a fresh object) per rollout."""

_AS_CONFIGURED: Final = RunOptions()
"""A run's options when it is given none (frozen: shared by every run)."""

_STEPS_ONLY: Final = frozenset({StepRecorded})

_RULES: Final = RuleBasedSummarizer()
"""The rule-based summarizer (stateless: shared by every run)."""


async def spawn_rollout_supervisor(system: ActorSystem, restarts: int) -> SupervisorRef:
    """The supervisor every run's rollout actors live under (the Runtime
    spawns it once, when it opens): each rollout restarted at most
    ``restarts`` times, then recorded failed.  One for all runs, not one per
    run: a per-run supervisor's task, task group, spawn and stop cost every
    run, and a run's rollout actors are stopped with it anyway (by the
    placement; each is named after its run)."""
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
    restart never resumes from an uncommitted step.  (An object, not a
    closure over the run: no reference cycle keeps a finished run's objects
    alive until the next garbage collection.)"""

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
        # ``is_top_level``, inlined: this runs once a step.
        if type(event) is StepRecorded and "." not in (rollout_id := event.rollout_id):
            self._committed[rollout_id].append(event.step)


@final
class RunExecution:
    """One run of ``Runtime.run`` (see the module docstring)."""

    # Slots: no attribute dict per run (one object fewer alive per running run).
    __slots__ = (
        "_committed",
        "_finished",
        "_name",
        "_next",
        "_outcomes",
        "_pending",
        "_placed",
        "_refines",
        "_scopes",
        "_stopped",
        "_supervisor",
        "_tg",
        "agent",
        "agent_name",
        "agent_ref",
        "checkpoint",
        "confidence",
        "deadline",
        "emitter",
        "journal",
        "ledger",
        "normalize",
        "options",
        "rt",
        "run_id",
        "runner",
        "summarizer",
        "task",
        "vote",
        "wall",
        "window",
    )

    def __init__(
        self,
        rt: Runtime,
        task: str,
        emitter: EventEmitter,
        run_id: str,
        checkpoint: RunCheckpoint | None,
        *,
        journal: bool = False,
    ) -> None:
        self.rt = rt
        self.journal = journal
        self.task = task
        self.run_id = run_id
        self.checkpoint = checkpoint
        self.emitter = emitter
        self.options = _AS_CONFIGURED
        """The run's ``RunOptions``, for every rollout of the run's agent."""
        self._refines = 0
        self._placed: PlacedRun | None = None
        self._committed: defaultdict[str, list[Step]] = defaultdict(list)
        outer = emitter.sink
        if outer is None:
            # Nobody reads the run's events but the steps: the agent loop
            # then builds no per-call event (``EventEmitter.wants``).
            emitter.sink = _Commits(self._committed)
            emitter.kinds = _STEPS_ONLY
        else:
            emitter.sink = _CommitSink(outer, self._committed)

    # -- the run --------------------------------------------------------------

    def _check_agent(self) -> None:
        """The run's options suit the agent, and under a USD cap each of its
        models has a price (it would fail mid-run otherwise): before any call."""
        check_run_options(
            self.options,
            self.agent.toolbox.specs if self.agent is not None else None,
            where=f"agent {self.agent_name!r}",
        )
        if self.agent is None or self.ledger.budget.max_usd is None:
            return
        for tier in self.agent.policy.ladder.tiers:
            try:
                self.ledger.prices.rates(tier.model)
            except UnknownModelError as error:
                raise ConfigError(str(error), where="budget.max_usd") from None

    async def execute(
        self,
        agent_ref: AgentRef,
        scaling: ScalingSpec,
        budget: Budget | None,
        aggregator: Aggregator | None,
    ) -> RunResult:
        rt = self.rt
        started = time.perf_counter()
        self.ledger = BudgetLedger(
            self.run_id,
            budget,
            rt.prices,
            journal=EventJournal(self.emitter.emit, self.run_id) if self.journal else None,
        )
        if self.checkpoint is not None and self.checkpoint.calls is not None:
            replays = restore_journal(self.ledger, self.checkpoint)
            if isinstance(self.ledger.journal, EventJournal):
                self.ledger.journal.replays = replays
        memory = (
            MemoryView(
                rt.bank,
                run_id=self.run_id,
                admission=ScoredAdmission(rt.config.memory_admission),
            )
            if rt.bank is not None
            else None
        )
        self.agent_ref = agent_ref
        self.runner: Runner = rt.runner(agent_ref, self.emitter, self.ledger, memory)
        if isinstance(self.runner, Hierarchy):
            root = self.runner.root
            self.agent: Agent | None = root.agent if isinstance(root, AgentNode) else None
            self.agent_name = root.name
        else:
            self.agent, self.agent_name = self.runner, self.runner.name
        self._check_agent()
        self.summarizer: Summarizer = (
            ModelSummarizer(MeteredBackend(self._main_backend(), self.ledger))
            if rt.config.summarizer == "model"
            else _RULES
        )
        chosen = aggregator or build_aggregator(
            rt.aggregator_config(scaling), judge=rt.judge, where="scaling.aggregate"
        )
        # Early stop groups answers exactly as the vote will.
        self.vote: MajorityVote | None = (
            chosen if isinstance(chosen, MajorityVote) and rt.config.early_stop else None
        )
        # Adaptive N: answers are grouped by the aggregator's own normalizer.
        self.confidence = scaling.confidence
        self.window = scaling.min_rollouts if scaling.confidence is not None else scaling.rollouts
        self.normalize = _normalizer(chosen)
        if self.checkpoint is None and self.emitter.wants(RunStarted):
            await self.emitter.emit(
                RunStarted(
                    run_id=self.run_id,
                    agent=self.agent_name,
                    task=self.task,
                    rollouts=scaling.rollouts,
                )
            )
        wall = budget.max_wall_seconds if budget is not None else None
        # One deadline for the whole run: warm-up, rollouts, aggregation.
        self.deadline = math.inf if wall is None else anyio.current_time() + wall
        self.wall = wall
        self._name = f"run{next(_names)}"
        self._supervisor = rt.rollout_supervisor
        try:
            outcomes = self._plan(scaling.rollouts)
            # A lone rollout without a wall-clock cap (nor a warm-up): no
            # scope, and no task (nor task group) for it.
            lone = self.wall is None and scaling.rollouts == 1
            await (self._one(outcomes[0]) if lone else self._fan_out(outcomes))
            summaries = self._summaries(outcomes)
            trajectories = {
                o.value.trajectory.rollout_id: o.value.trajectory for o in outcomes if o.value
            }
            context = AggregationContext.metered(
                self._main_backend(),
                self.ledger,
                run_id=self.run_id,
                events=self.emitter,
                trajectories=trajectories,
                rollout=self._refine_rollout,
            )
            agg = await self._aggregate(chosen, summaries, context)
        except Exception as exc:
            await self.emitter.emit(
                ErrorRaised(run_id=self.run_id, where="run", message=repr(exc), fatal=True)
            )
            await self.emitter.emit(RunFinished(run_id=self.run_id, status="failed"))
            raise
        finally:
            self.ledger.finish()
        cost = msgspec.structs.replace(
            self.ledger.spent, wall_seconds=time.perf_counter() - started
        )
        await self._budget_event()
        status: RunStatus = "succeeded" if agg.answer is not None else "failed"
        if self.emitter.wants(RunFinished):
            await self.emitter.emit(
                RunFinished(run_id=self.run_id, status=status, answer=agg.answer, cost=cost)
            )
        return RunResult(
            run_id=self.run_id,
            status=status,
            answer=agg.answer,
            rationale=agg.rationale,
            summaries=summaries,
            aggregation_trace=[msgspec.to_builtins(v) for v in agg.trace],
            cost=cost,
            error=None if agg.answer is not None else _no_answer(agg.rationale, outcomes),
        )

    def _main_backend(self) -> ModelBackend:
        """The backend of the agent's first tier (a pipeline's: the first backend)."""
        if self.agent is None:
            return next(iter(self.rt.backends.values()))
        return self.agent.backend_for(self.agent.policy.ladder.tiers[0].model)

    # -- the fan-out ------------------------------------------------------------

    async def _aggregate(
        self,
        chosen: Aggregator,
        summaries: list[TrajectorySummary],
        context: AggregationContext,
    ) -> AggregationResult:
        """The aggregation, within the run's deadline; when the deadline cuts
        it, a majority vote over the summaries (no model call) decides."""
        if self.wall is None:
            return await chosen.aggregate(self.task, summaries, context)
        with anyio.CancelScope(deadline=self.deadline):
            return await chosen.aggregate(self.task, summaries, context)
        vote = await MajorityVote().aggregate(self.task, summaries, context)
        why = f"the wall-clock cap ({self.wall:g} s) cut {chosen.name}; a majority vote decided"
        return msgspec.structs.replace(vote, rationale=f"{why}: {vote.rationale}")

    def _plan(self, n: int) -> list[_Outcome]:
        """The outcomes of ``n`` rollouts to run, none run yet."""
        outcomes = [_Outcome(i) for i in range(n)]
        # A rollout's own scope is for stopping it early, when others end
        # first: a lone rollout has none (nothing ends before it).
        self._scopes: Sequence[anyio.CancelScope] = (
            [anyio.CancelScope() for _ in range(n)] if n > 1 else ()
        )
        self._finished: list[_Outcome] = []
        self._pending = n
        self._stopped = False
        self._outcomes = outcomes
        self._next = self.window  # the next rollout to start (adaptive N)
        return outcomes

    async def _fan_out(self, outcomes: list[_Outcome]) -> None:
        """Every rollout in parallel (adaptive N: ``self.window`` at a time,
        another started as each ends), each waiting for its backend's slot;
        stopped early when the vote is decided (or, adaptive, settled) or the
        budget is spent.  A rollout never started has no outcome."""
        n = len(outcomes)
        # No wall-clock cap: no scope to carry its deadline.
        overall = anyio.CancelScope(deadline=self.deadline) if self.wall is not None else None
        with overall if overall is not None else _UNSCOPED:
            if (
                self.rt.config.warm_prefix
                and n > 1
                and self.agent is not None
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
                    outcome.error = _PastDeadline(f"no answer within {self.wall:g} s")

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
        self._finished.append(outcome)
        if outcome.status == "failed":
            await self.emitter.emit(
                ErrorRaised(
                    run_id=self.run_id,
                    where=f"rollout {i}",
                    message=repr(outcome.error),
                    rollout_id=self._rollout_id(i),
                )
            )
        await self._budget_event()
        if self._pending > 0 and self._should_stop():
            self._stop_all()
        if self._stopped or nothing_left(self.ledger) is not None:
            return  # adaptive N: no rollout starts that could make no call
        if self._next < len(self._outcomes):
            self._next += 1
            self._tg.start_soon(self._one, self._outcomes[self._next - 1])

    async def _attempt(self, outcome: _Outcome) -> None:
        """Run rollout ``outcome.index`` in its backend's slot, noting how it ended."""
        i = outcome.index
        backend = self._main_backend().name
        slot = self.rt.slot(backend)
        if slot is not None:
            # Not ``async with``: its bound exit would stay alive for the
            # whole rollout, in every running rollout's frame.  A free slot
            # is taken at once: ``acquire`` would add a shielded checkpoint
            # (a cancel scope and a loop iteration) per rollout, and the
            # rollout reaches its first await soon after anyway.
            try:
                slot.acquire_nowait()
            except anyio.WouldBlock:
                await self.emitter.emit(
                    RolloutQueued(
                        run_id=self.run_id,
                        rollout_id=self._rollout_id(i),
                        backend=backend,
                        limit=int(slot.total_tokens),
                    )
                )
                await slot.acquire()
        try:
            outcome.value = await self._run_or_resume(
                RolloutId(self.run_id, f"r{i}"), self.task, ()
            )
            outcome.status = "succeeded"
        except BudgetExceeded as exc:
            outcome.status, outcome.error = "failed", exc
            self._stop_all()
        except Exception as exc:
            log.warning("rollout_failed", index=i, error=repr(exc))
            outcome.status, outcome.error = "failed", exc
        finally:
            if slot is not None:
                slot.release()

    def _should_stop(self) -> bool:
        left = self.ledger.headroom().tokens
        if left is not None and left <= 0:
            return True
        if self.vote is None and self.confidence is None:
            return False
        normalize = self.vote.normalize if self.vote is not None else self.normalize
        keys = [
            answer_key(o.value.summary.answer, normalize) if o.value else None
            for o in self._finished
        ]
        if self.vote is not None and _majority_certain(keys, self._pending):
            return True
        return self.confidence is not None and _settled(keys) >= self.confidence

    async def _warm(self) -> None:
        """One request with the prefix every rollout's first request starts
        with (instructions, task, tools), so the server caches it; charged
        to the run's ledger like every call.  A failure is only logged."""
        agent = self.agent
        assert agent is not None
        model = agent.policy.ladder.tiers[0].model
        request = ModelRequest(
            messages=[
                SystemMessage(content=agent.config.instructions),
                UserMessage(content=self.task),
            ],
            model=model,
            tools=agent.toolbox.specs,
            sampling=SamplingParams(temperature=0.0, max_tokens=1),
            request_id=f"{self.run_id}-warm",
            affinity_key=self.run_id,
        )
        metered = MeteredBackend(agent.backend_for(model), self.ledger)
        try:
            with anyio.fail_after(self.rt.config.warm_timeout_s):
                await metered.complete(request)
        except Exception as exc:
            log.warning("warm_prefix_failed", error=repr(exc))
        await self._budget_event()

    # -- one rollout ----------------------------------------------------------------

    def _rollout_id(self, i: int) -> str:
        return str(RolloutId(self.run_id, f"r{i}"))

    async def _refine_rollout(self, task: str, workspace: Workspace) -> TrajectorySummary:
        """A fresh rollout seeded with PDR's workspace."""
        self._refines += 1
        slot = f"refine{workspace.round}-{self._refines - 1}"
        seed = [UserMessage(content=workspace.render())]
        done = await self._run_or_resume(RolloutId(self.run_id, slot), task, seed)
        return done.summary

    async def _run_or_resume(
        self, base: RolloutId, task: str, seed: Sequence[UserMessage]
    ) -> _Done:
        """Run a rollout as an actor, or take up what an earlier incarnation
        of the run committed: an ended rollout is restored; an agent's
        unfinished one replays its steps and goes on, and so does a
        hierarchy's whose entry node is an agent (the sub-agent calls its
        committed steps made are charged as spent; the call in flight runs
        again, under a new id).  A pipeline's (its stages cannot be taken up
        mid-way) restarts as incarnation k (``id~k``), the interrupted
        attempt left in the record.  The rollout runs where the Runtime's
        placement puts it (an actor here, or on a Ray worker); a crashed one
        goes on from its committed steps (``Placement.run_rollout``)."""
        ledger = self.ledger.child(base.slot)
        rollout, saved = self._saved(base)
        resume: list[Step] | None = None
        if saved is not None:
            ended = saved.finished is not None or bool(
                saved.steps and saved.steps[-1].reply is None
            )
            if ended or saved.summary is not None:
                if isinstance(self.runner, Hierarchy):  # its sub-agents spent too
                    await self._take_over(rollout, ledger, with_itself=False)
                return await self._restored(str(rollout), saved, ledger)
            if isinstance(self.runner, Agent):
                resume = list(saved.steps) or None
            elif self.runner.resumable:
                # Its sub-agents' rollouts are taken over even when it has no
                # step of its own yet: its first call may have been in flight.
                await self._take_over(rollout, ledger, with_itself=False)
                resume = list(saved.steps) or None
            else:
                assert self.checkpoint is not None
                await self._take_over(rollout, ledger, with_itself=True)
                rollout = base.restarted(self.checkpoint.incarnation)
        rollout_id = str(rollout)
        if resume is not None:
            self._committed[rollout_id] = list(resume)
        message = RunRollout(
            task=task,
            run_id=self.run_id,
            rollout_id=rollout_id,
            seed=tuple(seed),
            resume=resume,
            restored=resume is not None,
            options=self.options,
        )
        name = f"{self._name}-{base.slot}"
        job = RolloutJob(message, name, ledger, self._committed[rollout_id])
        try:
            placed = self._placed or self._place()
            result = await self.rt.placement.run_rollout(placed, job)
        finally:
            if (mcp := self.rt._mcp) is not None and mcp.per_rollout:
                with anyio.CancelScope(shield=True):  # its own MCP connections close with it
                    await mcp.rollout_finished(self.run_id, rollout_id)
        return await self._summarize(result.trajectory)

    def _place(self) -> PlacedRun:
        """This run as its placement sees it (made once, ``_placed``)."""
        agent = self.agent_ref
        budget = self.ledger.budget
        self._placed = PlacedRun(
            run_id=self.run_id,
            runner=self.runner,
            agent=agent if isinstance(agent, str | AgentConfig) else None,
            system=self.rt.system,
            supervisor=self._supervisor,
            emit=self.emitter.emit,
            restarts=self.rt.config.rollout_restarts,
            capped=budget.max_tokens is not None
            or budget.max_usd is not None
            or budget.max_model_calls is not None,
            journal=journal if isinstance(journal := self.ledger.journal, EventJournal) else None,
        )
        return self._placed

    def _resumed_with_steps(self) -> bool:
        """An earlier incarnation of this run committed steps (its prompt
        prefix was warmed then, and the warm-up is not repeated)."""
        return self.checkpoint is not None and any(
            saved.steps for saved in self.checkpoint.rollouts.values()
        )

    def _saved(self, base: RolloutId) -> tuple[RolloutId, RolloutCheckpoint | None]:
        """The latest committed incarnation of a rollout: the one restarted
        by incarnation k (``id~k``) before the first; (``base``, None) if none."""
        if self.checkpoint is None:
            return base, None
        saved = self.checkpoint.rollouts
        for k in range(self.checkpoint.incarnation - 1, -1, -1):
            candidate = base.restarted(k)
            if candidate in saved:
                return candidate, saved[candidate]
        return base, None

    async def _take_over(
        self, rollout: RolloutId, ledger: BudgetLedger, *, with_itself: bool
    ) -> None:
        """Before a hierarchy's rollout goes on, is restored (or, with
        ``with_itself``, restarts): charge ``ledger`` with what an earlier
        incarnation's sub-agent rollouts under it committed (nested ones
        too; and the rollout's own steps, ``with_itself``), so the run keeps
        to its budget; end the ones left unfinished as ``cancelled``
        (interrupted); keep later sub-agent calls from reusing their numbers."""
        assert self.checkpoint is not None
        highest = 0
        for sub, saved in self.checkpoint.rollouts.items():
            if sub.top != rollout or (sub == rollout and not with_itself):
                continue
            highest = max([highest, *sub.call_numbers()])
            cost = _restore_steps(ledger, saved.steps)
            if saved.finished is None:
                await self.emitter.emit(
                    RolloutFinished(
                        run_id=self.run_id,
                        rollout_id=str(sub),
                        status="cancelled",
                        cost=cost,
                        stop_reason="interrupted: daemon restart",
                    )
                )
        skip_call_numbers(highest)

    async def _restored(
        self, rollout_id: str, saved: RolloutCheckpoint, ledger: BudgetLedger
    ) -> _Done:
        """A rollout an earlier incarnation ended (or a hierarchy's, which
        cannot resume mid-way and is taken as it stood): its steps are
        charged as spent, its trajectory rebuilt; summarized if it was not."""
        cost = _restore_steps(ledger, saved.steps)
        end = saved.finished
        last = saved.steps[-1] if saved.steps else None
        trajectory = Trajectory(
            run_id=self.run_id,
            rollout_id=rollout_id,
            agent=self.agent_name,
            task=self.task,
            steps=list(saved.steps),
            answer=end.answer if end is not None else None,
            status=_trajectory_status(end.status if end is not None else "failed"),
            cost=end.cost if end is not None else cost,
            stop_reason=(
                end.stop_reason or "restored"
                if end is not None
                else f"interrupted: {last.error if last and last.error else 'daemon restart'}"
            ),
        )
        if saved.summary is not None:
            return _Done(trajectory, saved.summary)
        return await self._summarize(trajectory)

    async def _summarize(self, trajectory: Trajectory) -> _Done:
        summary = await self.summarizer.summarize(trajectory)
        if self.emitter.wants(SummaryWritten):  # not built when nobody reads it
            await self.emitter.emit(SummaryWritten(run_id=self.run_id, summary=summary))
        return _Done(trajectory, summary)

    async def _budget_event(self) -> None:
        if self.emitter.wants(BudgetUpdated):  # no snapshot when nobody reads it
            await self.emitter.emit(self.ledger.snapshot().to_event(self.run_id))

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
                    TrajectorySummary(rollout_id=self._rollout_id(o.index), failure_modes=[why])
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


def _restore_steps(ledger: BudgetLedger, steps: Sequence[Step]) -> Cost:
    cost = Cost()
    for step in steps:
        if step.reply is not None:
            model = step.routing.model if step.routing is not None else step.reply.model
            cost += ledger.restore(model, step.reply.usage)
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


def _normalizer(chosen: Aggregator) -> Normalizer:
    """The normalizer ``chosen`` groups answers by (the default for an
    aggregator that has none of its own)."""
    if isinstance(chosen, MajorityVote | WeightedVote | RecursiveTournament):
        return chosen.normalize
    return default_normalizer


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
