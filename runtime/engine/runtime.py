"""The embedding facade: ``agentrt.Runtime`` and the synchronous ``agentrt.run``.

Owns ``RuntimeConfig`` (the user's configuration: models, agents by name,
scaling defaults, concurrency per backend) and ``Runtime``, the async
context manager an application keeps open::

    async with agentrt.Runtime(config) as rt:
        result = await rt.run(task, agent="solver", scaling=ScalingSpec(rollouts=4))
        async for event in rt.stream(task):
            ...

A run is a budget ledger (the run's ``Budget`` caps), a memory-bank scope
(``run``, when memory is on), N rollouts of the agent through the
``RolloutScheduler`` (the prompt prefix warmed with one request first), a
summary per rollout (rule-based by default) and the aggregator named by the
``ScalingSpec`` (or passed as an object); it returns a ``RunResult`` and emits
``RunStarted``, the agents' own events, ``SummaryWritten``, ``VoteCast``,
``BudgetUpdated`` and ``RunFinished``.  Agents, tools and aggregators are
accepted as Python objects as well as by name.

The roof: may import every layer.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, final

import anyio
import msgspec

from agentrt.agents import Agent, AgentConfig, EventEmitter, EventSink, stream_sink
from agentrt.agents.delegation import AgentNode, skip_call_numbers
from agentrt.agents.hierarchy import Hierarchy, build_hierarchy
from agentrt.agents.spec_loader import load_spec
from agentrt.agents.summary import ModelSummarizer, RuleBasedSummarizer, Summarizer
from agentrt.aggregators import Aggregator, Judge, Workspace, build_aggregator
from agentrt.protocols import (
    Budget,
    Cost,
    ErrorRaised,
    Event,
    ModelRequest,
    RolloutFinished,
    RunFinished,
    RunResult,
    RunStarted,
    RunStatus,
    SamplingParams,
    ScalingSpec,
    Step,
    SummaryWritten,
    SystemMessage,
    Trajectory,
    TrajectoryStatus,
    TrajectorySummary,
    UserMessage,
)
from agentrt.runtime.budget import BudgetLedger
from agentrt.runtime.engine.scheduler import FanOut, Outcome, RolloutScheduler, majority_certain
from agentrt.runtime.engine.settings import RuntimeConfig
from agentrt.runtime.errors import ConfigError, UserError
from agentrt.runtime.memory import MemoryBank, MemoryView
from agentrt.runtime.models.base import ModelBackend
from agentrt.runtime.models.registry import ModelRegistry
from agentrt.runtime.pricing import PriceTable
from agentrt.tools.base import Tool

AgentRef = str | AgentConfig | Agent | Hierarchy | None
"""An agent by name (``RuntimeConfig.agents``), a configuration, or built."""


@dataclass(frozen=True, slots=True)
class RolloutCheckpoint:
    """One rollout as an earlier incarnation of its run committed it: its
    steps in order, its end (if it got there) and its summary (if written)."""

    steps: Sequence[Step] = ()
    finished: RolloutFinished | None = None
    summary: TrajectorySummary | None = None


@dataclass(frozen=True, slots=True)
class RunCheckpoint:
    """What an earlier incarnation of a run committed before it stopped
    (the daemon's run store after a crash or a shutdown).  ``Runtime.run``
    given one goes on from it: a rollout with a summary is not run again; a
    finished one is only summarized; an unfinished one replays its steps
    into the context, charges them to the budget as spent, and runs from its
    next step; aggregation runs again.  Event numbers go on at ``next_seq``
    and no second ``RunStarted`` is emitted."""

    next_seq: int
    rollouts: Mapping[str, RolloutCheckpoint]
    incarnation: int = 1
    """This resumption's number (1 for the first restart): names the
    rollouts it has to restart from scratch (``<rollout_id>~<incarnation>``:
    a pipeline's, which cannot be taken up mid-stage)."""


@dataclass(frozen=True, slots=True)
class _Done:
    trajectory: Trajectory
    summary: TrajectorySummary


_State = Literal["unopened", "open", "closed"]


@final
class Runtime:
    """Runs tasks with inference-time scaling; see the module docstring.

    ``backends``: model backends as objects (owned by the caller, not
    opened or closed here), in addition to ``config.models`` (created and
    opened on entry; when neither is given, the embedded model);
    ``tools``: tool objects agents pick from; ``judge``: the judge RTV and
    best-of-N use (default: a ``ModelJudge`` on the agent's backend);
    ``prices``: for ``Budget.max_usd``; ``registry``: a validated models
    section to create backends from, instead of ``config.models``."""

    def __init__(
        self,
        config: RuntimeConfig | Mapping[str, Any] | None = None,
        *,
        backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
        tools: Sequence[Tool] = (),
        judge: Judge | None = None,
        prices: PriceTable | None = None,
        registry: ModelRegistry | None = None,
    ) -> None:
        if config is None or isinstance(config, RuntimeConfig):
            self.config = config or RuntimeConfig()
        else:
            self.config = RuntimeConfig.model_validate(dict(config))
        given = (
            backends.items() if isinstance(backends, Mapping) else ((b.name, b) for b in backends)
        )
        self._given: dict[str, ModelBackend] = dict(given)
        self.tools = list(tools)
        self.judge = judge
        self.prices = prices
        self._registry = registry
        self.backends: dict[str, ModelBackend] = {}
        self.scheduler = RolloutScheduler(
            self.config.concurrency, default_limit=self.config.default_concurrency
        )
        self._stack = AsyncExitStack()
        self._state: _State = "unopened"
        self._bank: MemoryBank | None = None

    async def __aenter__(self) -> Self:
        if self._state != "unopened":
            raise RuntimeError("Cannot reopen a Runtime once it has been opened or closed.")
        self._state = "open"
        try:
            if self._registry is not None or self.config.models.backends or not self._given:
                registry = self._registry or ModelRegistry(self.config.models)
                for name in registry.backend_names():
                    backend = registry.create(name)
                    self.backends[name] = await self._stack.enter_async_context(backend)
            self.backends.update(self._given)
            if self.config.memory:
                bank = MemoryBank(self.config.memory_path)
                self._bank = await self._stack.enter_async_context(bank)
        except BaseException:
            await self._stack.aclose()
            self._state = "closed"
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state = "closed"
        await self._stack.aclose()

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"the Runtime is {self._state}; use `async with Runtime(...)`")

    async def run(
        self,
        task: str,
        *,
        agent: AgentRef = None,
        scaling: ScalingSpec | None = None,
        budget: Budget | None = None,
        aggregator: Aggregator | None = None,
        events: EventSink | None = None,
        run_id: str | None = None,
        checkpoint: RunCheckpoint | None = None,
    ) -> RunResult:
        """Run ``task``: N rollouts of ``agent``, summarized and aggregated.
        ``events`` receives every event of the run (awaited: backpressure).
        ``checkpoint``: resume the run ``run_id`` from what an earlier
        incarnation committed (see ``RunCheckpoint``)."""
        self._check_open()
        emitter = EventEmitter(events, first_seq=checkpoint.next_seq if checkpoint else 1)
        run = _Run(self, task, emitter, run_id or f"run-{uuid.uuid4().hex[:12]}", checkpoint)
        return await run.execute(agent, scaling or self._default_scaling(), budget, aggregator)

    def _default_scaling(self) -> ScalingSpec:
        c = self.config
        return ScalingSpec(
            rollouts=c.rollouts, aggregate=c.aggregate, options=dict(c.aggregate_options)
        )

    async def stream(
        self,
        task: str,
        *,
        agent: AgentRef = None,
        scaling: ScalingSpec | None = None,
        budget: Budget | None = None,
        aggregator: Aggregator | None = None,
        buffer: int = 64,
    ) -> AsyncIterator[Event]:
        """The events of a run of ``task`` as they happen, ``RunFinished``
        last.  The run waits while ``buffer`` events are unread.  Breaking
        out early cancels the run; wrap in ``contextlib.aclosing`` then."""
        send, receive = anyio.create_memory_object_stream[Event](buffer)
        async with anyio.create_task_group() as tg:

            async def produce() -> None:
                async with send:
                    await self.run(
                        task,
                        agent=agent,
                        scaling=scaling,
                        budget=budget,
                        aggregator=aggregator,
                        events=stream_sink(send),
                    )

            tg.start_soon(produce)
            try:
                async with receive:
                    async for event in receive:
                        yield event
            finally:
                tg.cancel_scope.cancel()


@final
class _Run:
    """One run's wiring: ledger, agent, scheduler, summaries, aggregator."""

    def __init__(
        self,
        rt: Runtime,
        task: str,
        emitter: EventEmitter,
        run_id: str,
        checkpoint: RunCheckpoint | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.rt = rt
        self.task = task
        self.emitter = emitter
        self.run_id = run_id
        self._ids = itertools.count()

    def _runner(self, agent: AgentRef, memory: MemoryView | None) -> Agent | Hierarchy:
        if isinstance(agent, Agent | Hierarchy):
            return agent
        if agent is None or isinstance(agent, str):
            name = agent or self.rt.config.default_agent
            if name in self.rt.config.agents:
                config = self.rt.config.agents[name]
            elif agent is None:
                config = AgentConfig(name=name)
            else:
                known = ", ".join(sorted(self.rt.config.agents)) or "none"
                raise ConfigError(f"unknown agent {name!r}; configured: {known}", where="agents")
        else:
            config = agent
        if isinstance(config, str):  # a YAML agent spec (a hierarchy)
            return build_hierarchy(
                load_spec(config),
                backends=self.rt.backends,
                events=self.emitter,
                default_model=self.rt.config.models.default,
                prices=self.rt.prices,
            )
        return Agent(
            config,
            backends=self.rt.backends,
            tools=self.rt.tools,
            ledger=self.ledger,
            events=self.emitter,
            prices=self.rt.prices,
            memory=memory,
        )

    async def execute(
        self,
        agent_ref: AgentRef,
        scaling: ScalingSpec,
        budget: Budget | None,
        aggregator: Aggregator | None,
    ) -> RunResult:
        self.ledger = BudgetLedger(self.run_id, budget, self.rt.prices)
        memory = None
        if self.rt._bank is not None:
            memory = MemoryView(self.rt._bank, run_id=self.run_id)
        self.runner = self._runner(agent_ref, memory)
        self.agent: Agent | None
        if isinstance(self.runner, Hierarchy):
            root = self.runner.root
            self.agent = root.agent if isinstance(root, AgentNode) else None
            name = root.name
        else:
            self.agent, name = self.runner, self.runner.name
        self.agent_name = name
        self.summarizer: Summarizer = (
            ModelSummarizer(self._main_backend())
            if self.rt.config.summarizer == "model"
            else RuleBasedSummarizer()
        )
        chosen = aggregator or self._build_aggregator(scaling)
        if self.checkpoint is None:
            await self.emitter.emit(
                RunStarted(
                    run_id=self.run_id,
                    agent=name,
                    task=self.task,
                    rollouts=scaling.rollouts,
                )
            )
        try:
            fan = await self.rt.scheduler.fan_out(
                scaling.rollouts,
                self._rollout,
                backend=self._main_backend().name,
                warm_prefix=self._warm if self._warms(scaling) else None,
                should_stop=self._stop_rule(scaling, aggregator),
                on_outcome=self._on_outcome,
                timeout_s=budget.max_wall_seconds if budget is not None else None,
            )
            summaries = self._summaries(fan)
            trajectories = {d.trajectory.rollout_id: d.trajectory for d in fan.values}
            agg = await chosen.aggregate(
                self.task,
                summaries,
                trajectories=trajectories,
                events=self.emitter,
                run_id=self.run_id,
            )
        except Exception as exc:
            await self.emitter.emit(
                ErrorRaised(run_id=self.run_id, where="run", message=repr(exc), fatal=True)
            )
            await self.emitter.emit(RunFinished(run_id=self.run_id, status="failed"))
            raise
        finally:
            self.ledger.finish()
        cost = self.ledger.spent + agg.cost
        await self._budget_event()
        status: RunStatus = "succeeded" if agg.answer is not None else "failed"
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
            error=None if agg.answer is not None else agg.rationale or "no rollout answered",
        )

    def _main_backend(self) -> ModelBackend:
        """The backend of the agent's first tier (a pipeline's: the first backend)."""
        if self.agent is None:
            return next(iter(self.rt.backends.values()))
        return self.agent.backend_for(self.agent.policy.ladder.tiers[0].model)

    def _warms(self, scaling: ScalingSpec) -> bool:
        return self.rt.config.warm_prefix and scaling.rollouts > 1 and self.agent is not None

    def _build_aggregator(self, scaling: ScalingSpec) -> Aggregator:
        return build_aggregator(
            {"name": scaling.aggregate, **scaling.options},
            judge=self.rt.judge,
            backend=self._main_backend(),
            rollout=self._refine_rollout,
            where="scaling.aggregate",
        )

    def _stop_rule(
        self, scaling: ScalingSpec, aggregator: Aggregator | None
    ) -> Callable[[Sequence[Outcome[_Done]], int], bool]:
        vote = aggregator is None and scaling.aggregate == "majority" and self.rt.config.early_stop

        def stop(finished: Sequence[Outcome[_Done]], pending: int) -> bool:
            left = self.ledger.headroom().tokens
            if left is not None and left <= 0:
                return True
            if not vote:
                return False
            keys = [_key(o.value.summary.answer) if o.value else None for o in finished]
            return majority_certain(keys, pending)

        return stop

    async def _warm(self) -> None:
        """One request with the prefix every rollout's first request starts
        with (instructions, task, tools), so the server caches it."""
        agent = self.agent
        assert agent is not None  # _warms checked it
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
        estimate = (len(agent.config.instructions) + len(self.task)) // 3 + 16
        async with self.ledger.reserve(model, estimate, 1) as reservation:
            with anyio.fail_after(self.rt.config.warm_timeout_s):
                reply = await agent.backend_for(model).complete(request)
            reservation.charge(reply.usage)

    async def _rollout(self, i: int) -> _Done:
        return await self._run_or_resume(f"{self.run_id}-r{i}", self.task, f"r{i}", ())

    def _saved(self, rollout_id: str) -> tuple[str, RolloutCheckpoint | None]:
        """The latest committed incarnation of a rollout: ``id~k`` (a rollout
        restarted by incarnation k) before ``id``; (``id``, None) if none."""
        if self.checkpoint is None:
            return rollout_id, None
        saved = self.checkpoint.rollouts
        for k in range(self.checkpoint.incarnation - 1, 0, -1):
            if f"{rollout_id}~{k}" in saved:
                return f"{rollout_id}~{k}", saved[f"{rollout_id}~{k}"]
        return rollout_id, saved.get(rollout_id)

    async def _run_or_resume(
        self, base_id: str, task: str, slice_name: str, seed: Sequence[UserMessage]
    ) -> _Done:
        """Run a rollout, or take up what an earlier incarnation committed:
        an ended rollout is restored; an agent's unfinished one replays its
        steps and goes on, and so does a hierarchy's whose entry node is an
        agent (the sub-agent calls its committed steps made are charged as
        spent; the call in flight runs again, under a new id).  A
        pipeline's (its stages cannot be taken up mid-way) restarts as
        ``id~k``, the interrupted attempt left in the record."""
        ledger = self.ledger.child(slice_name)
        rollout_id, saved = self._saved(base_id)
        resume: Sequence[Step] | None = None
        if saved is not None:
            ended = saved.finished is not None or bool(
                saved.steps and saved.steps[-1].reply is None
            )
            if ended or saved.summary is not None:
                if isinstance(self.runner, Hierarchy):  # its sub-agents spent too
                    await self._take_over(rollout_id, ledger, with_itself=False)
                return await self._restored(rollout_id, saved, ledger)
            if isinstance(self.runner, Agent):
                resume = saved.steps or None
            elif self.runner.resumable:
                # Its sub-agents' rollouts are taken over even when it has no
                # step of its own yet: its first call may have been in flight.
                await self._take_over(rollout_id, ledger, with_itself=False)
                resume = saved.steps or None
            else:
                assert self.checkpoint is not None
                await self._take_over(rollout_id, ledger, with_itself=True)
                rollout_id = f"{base_id}~{self.checkpoint.incarnation}"
        if resume is not None:
            result = await self.runner.run(
                task,
                run_id=self.run_id,
                rollout_id=rollout_id,
                ledger=ledger,
                seed=seed,
                resume=resume,
                restored=True,
            )
        else:
            result = await self.runner.run(
                task, run_id=self.run_id, rollout_id=rollout_id, ledger=ledger, seed=seed
            )
        return await self._summarize(result.trajectory)

    async def _take_over(self, rollout_id: str, ledger: BudgetLedger, *, with_itself: bool) -> None:
        """Before a hierarchy's rollout goes on, is restored (or, with
        ``with_itself``, restarts): charge ``ledger`` with what an earlier incarnation's
        sub-agent rollouts under it committed (``<rollout_id>.<name>-<n>``,
        nested ones too; and the rollout's own steps, ``with_itself``), so
        the run keeps to its budget; end the ones left unfinished as
        ``cancelled`` (interrupted); keep later sub-agent calls from reusing
        their numbers."""
        assert self.checkpoint is not None
        prefix = f"{rollout_id}."
        highest = 0
        for sub_id, sub in self.checkpoint.rollouts.items():
            if not (sub_id.startswith(prefix) or (with_itself and sub_id == rollout_id)):
                continue
            for part in sub_id[len(prefix) :].split(".") if sub_id != rollout_id else ():
                number = part.rsplit("-", 1)[-1]
                if number.isdigit():
                    highest = max(highest, int(number))
            cost = Cost()
            for step in sub.steps:
                if step.reply is not None:
                    model = step.routing.model if step.routing is not None else step.reply.model
                    cost += ledger.restore(model, step.reply.usage)
            if sub.finished is None:
                await self.emitter.emit(
                    RolloutFinished(
                        run_id=self.run_id,
                        rollout_id=sub_id,
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
        cost = Cost()
        for step in saved.steps:
            if step.reply is not None:
                model = step.routing.model if step.routing is not None else step.reply.model
                cost += ledger.restore(model, step.reply.usage)
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

    async def _refine_rollout(self, task: str, workspace: Workspace) -> TrajectorySummary:
        """A fresh rollout seeded with PDR's workspace."""
        n = next(self._ids)
        name = f"refine{workspace.round}-{n}"
        seed = [UserMessage(content=workspace.render())]
        return (await self._run_or_resume(f"{self.run_id}-{name}", task, name, seed)).summary

    async def _summarize(self, trajectory: Trajectory) -> _Done:
        summary = await self.summarizer.summarize(trajectory)
        await self.emitter.emit(SummaryWritten(run_id=self.run_id, summary=summary))
        return _Done(trajectory, summary)

    async def _on_outcome(self, outcome: Outcome[_Done]) -> None:
        if outcome.status == "failed":
            rollout_id = f"{self.run_id}-r{outcome.index}"
            await self.emitter.emit(
                ErrorRaised(
                    run_id=self.run_id,
                    where=f"rollout {outcome.index}",
                    message=repr(outcome.error),
                    rollout_id=rollout_id,
                )
            )
        await self._budget_event()

    async def _budget_event(self) -> None:
        await self.emitter.emit(self.ledger.snapshot().to_event(self.run_id))

    def _summaries(self, fan: FanOut[_Done]) -> list[TrajectorySummary]:
        """A summary per rollout, in rollout order; a crashed one has no
        answer and names its error (the aggregators leave it out)."""
        out: list[TrajectorySummary] = []
        for o in fan.outcomes:
            rollout_id = f"{self.run_id}-r{o.index}"
            if o.value is not None:
                out.append(o.value.summary)
            elif o.status == "failed":
                why = f"crashed: {o.error!r}"
                out.append(TrajectorySummary(rollout_id=rollout_id, failure_modes=[why]))
        return out


def _trajectory_status(status: str) -> TrajectoryStatus:
    known: tuple[TrajectoryStatus, ...] = (
        "running",
        "finished",
        "failed",
        "cancelled",
        "exhausted",
    )
    for candidate in known:
        if status == candidate:
            return candidate
    return "failed"


def _key(answer: str | None) -> str | None:
    if answer is None or not answer.strip():
        return None
    return " ".join(answer.split()).casefold()


def run(
    task: str,
    *,
    config: RuntimeConfig | Mapping[str, Any] | None = None,
    backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
    tools: Sequence[Tool] = (),
    agent: AgentRef = None,
    scaling: ScalingSpec | None = None,
    budget: Budget | None = None,
    aggregator: Aggregator | None = None,
    judge: Judge | None = None,
) -> RunResult:
    """Run one task synchronously (scripts, notebooks): opens a ``Runtime``,
    runs, closes it.  Inside a running event loop, use ``Runtime`` instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UserError(
            "agentrt.run() cannot be called from a running event loop (a notebook cell or "
            "async code); use `async with agentrt.Runtime(config) as rt: await rt.run(task)`"
        )

    async def main() -> RunResult:
        async with Runtime(config, backends=backends, tools=tools, judge=judge) as rt:
            return await rt.run(
                task, agent=agent, scaling=scaling, budget=budget, aggregator=aggregator
            )

    return anyio.run(main)


__all__ = ["RolloutCheckpoint", "RunCheckpoint", "Runtime", "RuntimeConfig", "run"]
