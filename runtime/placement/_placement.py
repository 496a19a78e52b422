"""What a placement is given and returns: ``Placement`` (the protocol
``RunExecution`` dispatches its rollouts through), ``PlacedRun`` (what a
placement needs of the run), ``RolloutJob`` (one rollout to run) and the
errors a placement raises.  Must not know where rollouts run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._control import RolloutResult
from agentrt.protocols._events import Event
from agentrt.protocols._trajectory import Step
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._journal import EventJournal
from agentrt.runtime.engine._rollout_actor import EntryNode, RunRollout
from agentrt.runtime.kernel._errors import RuntimeFailure
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import ActorSystem

Emit = Callable[[Event], Awaitable[object]]


class RolloutGaveUp(RuntimeFailure):
    """A rollout crashed more often than its restart intensity allows."""


class PlacementLost(RuntimeFailure):
    """Every rollout worker of a placement is gone: a rollout cannot run."""


@dataclass(frozen=True, slots=True)
class PlacedRun:
    """The run a rollout belongs to, as a placement sees it.

    ``runner``: the run's entry node, built here; ``agent``: how the run
    named it (a name or a configuration: what a remote worker rebuilds it
    from; ``None`` when it was given as an object); ``supervisor``: the
    supervisor of the run's rollout actors in ``system`` (the Runtime's
    one, shared by every run); ``emit``: the run's event stream;
    ``restarts``: how often a crashed rollout is restarted; ``journal``:
    the run's journal of model calls, when it is journaled (a remote
    rollout journals its calls through the run's events, and takes up the
    replies an earlier incarnation left);
    ``events``: the kinds of event the run's stream takes (``None``: all;
    a remote worker builds and sends no other)."""

    run_id: str
    runner: EntryNode
    agent: str | AgentConfig | None
    system: ActorSystem
    supervisor: SupervisorRef
    emit: Emit
    restarts: int
    journal: EventJournal | None = None
    events: frozenset[type[Event]] | None = None

    @property
    def resumable(self) -> bool:
        """Whether a rollout of this run can go on from its committed steps."""
        return self.runner.resumable


@dataclass(frozen=True, slots=True)
class RolloutJob:
    """One rollout to run: its message (task, ids, seed, steps to resume
    from), its actor's name (unique across runs: ``run<N>-<slot>``), its ledger (a child
    of the run's) and its committed top-level steps so far (the run's own
    list, which grows as steps are committed; read when the rollout has to
    be taken up again)."""

    message: RunRollout
    name: str
    ledger: BudgetLedger
    committed: Sequence[Step]


class Placement(Protocol):
    """Where a run's rollouts run (``Runtime.placement``).

    ``run_rollout`` runs one rollout to its end and returns its result; a
    rollout that crashes is restarted from its committed steps (at most
    ``run.restarts`` times, then ``RolloutGaveUp``); a placement that loses
    the process a rollout ran in takes it up elsewhere the same way.
    ``check_agent`` raises ``ConfigError`` for an agent this placement
    cannot run (before any model call)."""

    @property
    def kind(self) -> str: ...

    def check_agent(self, agent: object) -> None: ...

    async def run_rollout(self, run: PlacedRun, job: RolloutJob) -> RolloutResult: ...
