"""What a run will do, decided and checked before it starts, and what it uses.

Owns ``RunPlan`` (the run's entry node, summarizer, aggregator, scaling,
wall-clock cap, ledger and options: everything ``RunExecution`` executes),
``plan_run`` (the one function that builds a plan and validates it: an
unknown agent, options the agent cannot take, a model without a price
under a USD cap, bad aggregator options are each a ``ConfigError`` here,
before any model call) and ``RunServices`` (the few things of its
``Runtime`` a run uses: placement, actor system, backends, slots).  Must
not know which entry point started the run.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

import anyio

from agentrt.agents._agent import Agent
from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._delegation import AgentNode
from agentrt.agents._hierarchy import Hierarchy
from agentrt.agents._recording import EventEmitter
from agentrt.agents._run_options import check_run_options
from agentrt.agents._summary import (
    SUMMARY_MIN_TOKENS,
    ModelSummarizer,
    RuleBasedSummarizer,
    Summarizer,
)
from agentrt.aggregators._aggregator import Aggregator
from agentrt.aggregators._compose import build_aggregator
from agentrt.aggregators._rtv import RecursiveTournament
from agentrt.aggregators._vote import MajorityVote, Normalizer, WeightedVote, default_normalizer
from agentrt.protocols._run import Budget, RunOptions, ScalingSpec
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.config._runtime_config import RuntimeConfig
from agentrt.runtime.engine._checkpoint import RunCheckpoint
from agentrt.runtime.engine._journal import EventJournal, restore_journal
from agentrt.runtime.engine._model_calls import reporting
from agentrt.runtime.engine._rollout_actor import EntryNode
from agentrt.runtime.kernel._errors import ConfigError, UnknownModelError
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.memory._admission import ScoredAdmission
from agentrt.runtime.memory._view import MemoryView
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.runtime.placement._placement import Placement

if TYPE_CHECKING:
    from agentrt.runtime.engine._runtime import AgentRef, Runtime

_AS_CONFIGURED: Final = RunOptions()
"""A run's options when it is given none (frozen: shared by every run)."""

_RULES: Final = RuleBasedSummarizer()
"""The rule-based summarizer (stateless: shared by every run)."""


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RunServices:
    """What a run uses of the ``Runtime`` that holds it open: the
    configuration (read as the run goes: early stop, the prefix warm-up,
    rollout restarts), the backends, the placement, the actor system and
    the supervisor of every run's rollout actors, each backend's slot
    limiter, and what closes a rollout's own MCP connections when it ends
    (``None``: no server keeps connections per rollout)."""

    config: RuntimeConfig
    backends: Mapping[str, ModelBackend]
    placement: Placement
    system: ActorSystem
    supervisor: SupervisorRef
    slot: Callable[[str], anyio.CapacityLimiter | None]
    rollout_finished: Callable[[str, str], Awaitable[None]] | None = None
    names: itertools.count[int] = field(default_factory=itertools.count)
    """Numbers for the names of runs' rollout actors (unique in the system)."""


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RunPlan:
    """One run, decided: ``entry`` (an ``Agent`` or a ``Hierarchy``) runs
    ``scaling.rollouts`` times on ``task``, each rollout summarized by
    ``summarizer`` and all aggregated by ``aggregator``, every call charged
    to ``ledger``, within ``wall`` seconds (``None``: no cap).

    ``agent``: the entry agent (a hierarchy's entry agent; ``None`` when the
    entry node is a pipeline), ``agent_name`` its name; ``placed_as``: how
    the run named its agent (a name or a configuration, what a remote worker
    rebuilds it from; ``None`` when it was given as an object).
    ``early_vote``: the vote whose outcome stops the run early once it
    cannot change (``None``: no early stop); ``normalize``: how answers are
    grouped for adaptive N.  ``checkpoint``: what an earlier incarnation of
    the run committed, to go on from."""

    run_id: str
    task: str
    entry: EntryNode
    agent: Agent | None
    agent_name: str
    placed_as: str | AgentConfig | None
    summarizer: Summarizer
    aggregator: Aggregator
    scaling: ScalingSpec
    ledger: BudgetLedger
    options: RunOptions
    wall: float | None
    early_vote: MajorityVote | None
    normalize: Normalizer
    checkpoint: RunCheckpoint | None

    def main_backend(self, backends: Mapping[str, ModelBackend]) -> ModelBackend:
        """The backend of the agent's first tier (a pipeline's: the first of
        ``backends``)."""
        return _main_backend(self.agent, backends)


def _main_backend(agent: Agent | None, backends: Mapping[str, ModelBackend]) -> ModelBackend:
    if agent is None:
        return next(iter(backends.values()))
    return agent.backend_for(agent.policy.ladder.tiers[0].model)


def plan_run(
    rt: Runtime,
    task: str,
    emitter: EventEmitter,
    *,
    run_id: str,
    agent: AgentRef,
    scaling: ScalingSpec,
    budget: Budget | None,
    aggregator: Aggregator | None,
    checkpoint: RunCheckpoint | None,
    options: RunOptions | None,
    journal: bool,
) -> RunPlan:
    """The plan of one run of ``rt`` (see ``Runtime.run`` for the
    arguments), checked: a ``ConfigError`` names what is wrong before any
    model call.  ``journal``: the run's ledger journals its calls to
    ``emitter`` (and takes up the calls ``checkpoint`` left in flight)."""
    options = options or _AS_CONFIGURED
    ledger = BudgetLedger(
        run_id,
        budget,
        rt.prices,
        journal=EventJournal(emitter.emit, run_id) if journal else None,
    )
    if checkpoint is not None and checkpoint.calls is not None:
        replays = restore_journal(ledger, checkpoint)
        if isinstance(ledger.journal, EventJournal):
            ledger.journal.replays = replays
    admission = rt.config.memory_admission
    memory = (
        MemoryView(
            rt.bank,
            run_id=run_id,
            admission=ScoredAdmission(admission),
            corroborate=admission.corroborate,
            verifiers=admission.verifiers,
            recheck=admission.recheck,
        )
        if rt.bank is not None
        else None
    )
    entry = rt.runner(agent, emitter, ledger, memory)
    entry_agent: Agent | None
    if isinstance(entry, Hierarchy):
        root = entry.root
        entry_agent = root.agent if isinstance(root, AgentNode) else None
        agent_name = root.name
    else:
        entry_agent, agent_name = entry, entry.name
    _check_agent(entry_agent, agent_name, options, ledger)
    summarizer: Summarizer = (
        ModelSummarizer(
            MeteredBackend(
                _main_backend(entry_agent, rt.backends),
                ledger,
                after_call=reporting(emitter, ledger, run_id=run_id, purpose="summary"),
                # As the judges: wait for the calls in flight, or run lowered.
                min_tokens=SUMMARY_MIN_TOKENS,
            )
        )
        if rt.config.summarizer == "model"
        else _RULES
    )
    chosen = aggregator or build_aggregator(
        rt.aggregator_config(scaling), judge=rt.judge, where="scaling.aggregate"
    )
    return RunPlan(
        run_id=run_id,
        task=task,
        entry=entry,
        agent=entry_agent,
        agent_name=agent_name,
        placed_as=agent if isinstance(agent, str | AgentConfig) else None,
        summarizer=summarizer,
        aggregator=chosen,
        scaling=scaling,
        ledger=ledger,
        options=options,
        wall=budget.max_wall_seconds if budget is not None else None,
        # Early stop groups answers exactly as the vote will.
        early_vote=chosen if isinstance(chosen, MajorityVote) and rt.config.early_stop else None,
        # Adaptive N: answers are grouped by the aggregator's own normalizer.
        normalize=chosen_normalizer(chosen),
        checkpoint=checkpoint,
    )


def _check_agent(agent: Agent | None, name: str, options: RunOptions, ledger: BudgetLedger) -> None:
    """The run's options suit the agent, and under a USD cap each of its
    models has a price (it would fail mid-run otherwise): before any call."""
    check_run_options(
        options, agent.toolbox.specs if agent is not None else None, where=f"agent {name!r}"
    )
    if agent is None or ledger.budget.max_usd is None:
        return
    for tier in agent.policy.ladder.tiers:
        try:
            ledger.prices.rates(tier.model)
        except UnknownModelError as error:
            raise ConfigError(str(error), where="budget.max_usd") from None


def chosen_normalizer(chosen: Aggregator) -> Normalizer:
    """The normalizer ``chosen`` groups answers by (the default for an
    aggregator that has none of its own)."""
    if isinstance(chosen, MajorityVote | WeightedVote | RecursiveTournament):
        return chosen.normalize
    return default_normalizer


__all__ = ["RunPlan", "RunServices", "chosen_normalizer", "plan_run"]
