"""The driver's side of rollout workers, whatever carries the items (Ray,
a worker process's socket): ``WorkerBooks`` books the ledger items a
worker sends (its budget slices' asks and reports, restores) on the runs'
ledgers, in order (``SliceGrants``), and charges what was in flight as
reserved when the worker is lost; ``deliver_events`` hands its events to their runs'
streams; ``answer_bank_call`` runs a worker's call on the run's memory
bank; ``pick_worker`` chooses a worker for a rollout; ``outcome_result``
and ``replays_of`` are a placed rollout's way back and out;
``place_again`` is what a rollout whose worker was lost does next, and
``PlacedRollouts.run`` the loop that places a rollout until it has an
outcome; ``wait_to_replace`` is a lost worker's replacement backoff.  Must
not know how items travel.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, final

import anyio
import msgspec

from agentrt.agents._agent import Agent
from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._control import RolloutResult
from agentrt.agents._hierarchy import Hierarchy
from agentrt.protocols._events import Event, RolloutRestarted
from agentrt.protocols._model import ModelReply
from agentrt.protocols._trajectory import Step
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._journal import EventJournal
from agentrt.runtime.engine._rollout_actor import RunRollout
from agentrt.runtime.kernel._backoff import Backoff, RestartBackoff
from agentrt.runtime.kernel._errors import (
    BudgetExceeded,
    ConfigError,
    RuntimeFailure,
)
from agentrt.runtime.memory._bank import MemoryStore
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.placement._placement import (
    Emit,
    PlacedRun,
    PlacementLost,
    RolloutGaveUp,
    RolloutJob,
)
from agentrt.runtime.placement._slice_grants import Lent, SliceGrants
from agentrt.runtime.placement._worker_wire import (
    BankAnswer,
    BankGet,
    BankOut,
    BankPromote,
    BankPut,
    BankSearch,
    EventOut,
    FlushOut,
    Outbound,
    PlacedRollout,
    Reply,
    RestoreOut,
    RolloutDone,
    RolloutOutcome,
    RolloutRaised,
    SliceAsk,
    SliceGranted,
    SliceReport,
    StepOut,
    StepPrompts,
    event_tags,
)

log = get_logger(__name__)


@final
class WorkerBooks:
    """One worker's books on the driver: the ledger items it sends (its
    slices' asks and reports, restores) booked in order through the
    placement's ``SliceGrants``; ``send`` delivers an answer outside the
    worker's own exchange (the driver sets it)."""

    def __init__(self, grants: SliceGrants) -> None:
        self._grants = grants
        self.lent: dict[int, Lent] = {}
        self.admissions = 0
        """Calls that waited for the driver (the others took their budget
        from the worker's slice)."""
        self._send: Callable[[list[Reply]], None] | None = None

    def sends_with(self, send: Callable[[list[Reply]], None]) -> None:
        """How ``send`` reaches the worker."""
        self._send = send

    def send(self, replies: list[Reply]) -> None:
        if self._send is None:
            raise RuntimeFailure("a worker's books were given no way to reach it")
        self._send(replies)

    def book(self, items: list[Outbound]) -> list[Reply]:
        """Book the ledger items of ``items`` in order; the answers to send
        now.  A bad item is logged (a waiting ask answered)."""
        answers: list[Reply] = []
        for item in items:
            try:
                match item:
                    case SliceAsk():
                        self.admissions += item.wait
                        answer = self._grants.ask(self, item)
                        if answer is not None:
                            answers.append(answer)
                    case SliceReport():
                        self._grants.report(self, item)
                    case RestoreOut(ledger=key, model=model, usage=usage):
                        ledger = self._grants.ledgers.get(key)
                        if ledger is not None:
                            ledger.restore(model, usage)
            except Exception as error:
                log.error("placed_ledger_item_failed", item=type(item).__name__, error=repr(error))
                if isinstance(item, SliceAsk):
                    why = repr(error)
                    answers.append(
                        SliceGranted(id=item.id, slice=item.slice, refused=why, kind="invalid")
                    )
        return answers

    def lost(self) -> None:
        """The worker is gone: its calls in flight may have been served,
        so they are charged as reserved; what its slices held unspent
        goes back."""
        self._grants.lost(self)


async def answer_bank_call(bank: MemoryStore | None, item: BankOut) -> BankAnswer:
    """Run ``item``'s call on ``bank``; its answer (``error`` when it raised)."""
    if bank is None:
        return BankAnswer(id=item.id, error="this Runtime has no memory bank")
    try:
        match item.call:
            case BankSearch(match=match, owners=owners, k=k):
                return BankAnswer(id=item.id, hits=await bank.search(match, owners, k=k))
            case BankGet(item_id=item_id, owners=owners, count_hit=count_hit):
                found = await bank.get(item_id, owners, count_hit=count_hit)
                return BankAnswer(id=item.id, item=found)
            case BankPut(item=new):
                return BankAnswer(id=item.id, number=await bank.put(new))
            case BankPromote(source=source, target=target, min_hits=hits, verified_only=only):
                promoted = await bank.promote(source, target, min_hits=hits, verified_only=only)
                return BankAnswer(id=item.id, number=promoted)
    except Exception as error:
        return BankAnswer(id=item.id, error=f"{type(error).__name__}: {error}")
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A rollout worker as a placement's ``workers`` shows it: its node
    (``local``: a worker process of this host) and process, its rollouts
    in flight and placed so far, the calls it waited for the driver's
    grant for (``admissions``: the others took their budget from its
    slice), and whether it is alive (``lost``: why not)."""

    index: int
    node_id: str
    pid: int
    in_flight: int
    placed: int
    alive: bool
    lost: str = ""
    admissions: int = 0


class PooledWorker(Protocol):
    """A rollout worker as ``pick_worker``, ``worker_infos`` and
    ``PlacedRollouts`` see it."""

    index: int
    load: int
    alive: bool
    lost: str
    pumped: anyio.Event
    node_id: str
    pid: int
    placed: int
    books: WorkerBooks


W = TypeVar("W", bound=PooledWorker)


def worker_infos(workers: Sequence[PooledWorker]) -> list[WorkerInfo]:
    """What a placement's ``workers`` shows of each of ``workers``."""
    return [
        WorkerInfo(
            index=w.index,
            node_id=w.node_id,
            pid=w.pid,
            in_flight=w.load,
            placed=w.placed,
            alive=w.alive,
            lost=w.lost,
            admissions=w.books.admissions,
        )
        for w in workers
    ]


def replacement_backoff() -> RestartBackoff:
    """The backoff between replacements of lost workers: from 1s up to
    60s, starting over once a worker stayed healthy for 60s."""
    return RestartBackoff(Backoff(initial_s=1.0, max_s=60.0, reset_after_s=60.0))


@dataclass(slots=True)
class RunEntry(Generic[W]):
    """A run with rollouts on the workers: its stream, its rollouts in
    flight and the worker its rollouts keep to (``home``)."""

    emit: Emit
    active: int = 0
    home: W | None = None


def pick_worker(workers: Sequence[W], entry: RunEntry[W], slack: int, placement: str) -> W:
    """The least loaded live worker, but the run's ``home`` while it has at
    most ``slack`` more rollouts in flight (its rollouts keep hitting the
    same model replica's prefix cache).  Raises ``PlacementLost`` naming
    ``placement`` and why each worker was lost when none is alive."""
    alive = [w for w in workers if w.alive]
    if not alive:
        why = "; ".join(f"worker {w.index}: {w.lost}" for w in workers)
        raise PlacementLost(f"every rollout worker of the {placement} is lost ({why})")
    least = min(alive, key=lambda w: w.load)
    home = entry.home
    if home is not None and home.alive and home.load <= least.load + slack:
        return home
    if home is None or not home.alive:
        entry.home = least
    return least


async def deliver_events(
    runs: Mapping[str, RunEntry[Any]], items: list[Outbound], prompts: StepPrompts
) -> tuple[list[int], dict[int, str]]:
    """The events of ``items`` to their runs' streams, in order (steps'
    prompts rebuilt with ``prompts``, the channel's): the ids to ack, and
    those whose sink raised (not committed) with why."""
    acked: list[int] = []
    failed: dict[int, str] = {}
    for item in items:
        event: Event
        match item:
            case StepOut(ack=ack):
                event = prompts.decode(item)
            case EventOut(event=event, ack=ack):
                pass
            case FlushOut(ack=ack, rollout=rollout):
                prompts.forget(rollout)
                acked.append(ack)
                continue
            case _:
                continue
        entry = runs.get(event.run_id)
        if entry is None:
            log.warning("placed_event_dropped", run=event.run_id, kind=type(event).__name__)
        else:
            try:
                await entry.emit(event)
            except Exception as error:
                log.error("placed_event_failed", run=event.run_id, error=repr(error))
                if ack:
                    failed[ack] = repr(error)
        if ack:
            acked.append(ack)
    return acked, failed


def check_rebuildable(agent: object, placement: str) -> None:
    """Raise ``ConfigError`` unless ``agent`` can be rebuilt on a worker
    (named, or given as a configuration): ``placement`` names the placement."""
    if isinstance(agent, Agent | Hierarchy):
        raise ConfigError(
            f"the {placement} rebuilds a run's agent on its workers: name a configured "
            "agent or pass an AgentConfig, not a built Agent or Hierarchy",
            where="agent",
        )


def placed_rollout(
    run: PlacedRun, job: RolloutJob, message: RunRollout, *, memory: bool
) -> PlacedRollout:
    """What asks a worker to run ``message`` (``job``'s rollout, or its
    placing again) for ``run``; ``memory``: the run's bank is on the driver."""
    agent = run.agent
    return PlacedRollout(
        rollout=message,
        name=job.name,
        ledger=message.rollout_id,
        agent=agent if isinstance(agent, str) else None,
        agent_config=agent.model_dump_json() if isinstance(agent, AgentConfig) else None,
        restarts=run.restarts,
        memory=memory,
        journaled=run.journal is not None,
        replays=replays_of(run.journal, message.rollout_id),
        events=event_tags(run.events),
    )


def outcome_result(
    outcome: RolloutOutcome, rollout_id: str, committed: Sequence[Step]
) -> RolloutResult:
    """A placed rollout's result (its trajectory's first steps taken from
    ``committed``, the rollout's steps the driver committed, as the worker
    said), or the exception it ended in."""
    match outcome:
        case RolloutDone(result=result, committed=0):
            return result
        case RolloutDone(result=result, committed=count):
            if count > len(committed):
                raise RuntimeFailure(
                    f"rollout {rollout_id}: its worker counted {count} committed steps, "
                    f"the driver has {len(committed)}"
                )
            trajectory = result.trajectory
            steps = [*committed[:count], *trajectory.steps]
            return msgspec.structs.replace(
                result, trajectory=msgspec.structs.replace(trajectory, steps=steps)
            )
        case RolloutRaised(kind="budget", message=text, limit=limit):
            raise BudgetExceeded(text, limit=limit)
        case RolloutRaised(kind="gave_up", message=text):
            raise RolloutGaveUp(text)
        case RolloutRaised(message=text):
            raise RuntimeFailure(f"rollout {rollout_id} failed: {text}")
    raise AssertionError("unreachable")


def replays_of(journal: EventJournal | None, rollout_id: str) -> dict[str, ModelReply]:
    """The replies an earlier incarnation of the run left for the calls of
    ``rollout_id`` (and its sub-agents'), taken out of the run's journal to
    travel with the rollout to its worker."""
    if journal is None:
        return {}
    prefix = f"{rollout_id}-"
    sub = f"{rollout_id}."
    mine = [key for key in journal.replays if key.startswith((prefix, sub))]
    return {key: journal.replays.pop(key) for key in mine}


class WorkerLost(Exception):
    """A placed rollout's worker was lost (the message says why) before
    the rollout had an outcome."""


Ask = Callable[[W, PlacedRollout, Sequence[Step]], Awaitable[RolloutResult]]


@dataclass(slots=True, eq=False)
class PlacedRollouts(Generic[W]):
    """The runs with rollouts on a placement's workers (``runs``, by run
    id), and each rollout's ledger and run (by rollout id)."""

    runs: dict[str, RunEntry[W]] = field(default_factory=dict)
    ledgers: dict[str, BudgetLedger] = field(default_factory=dict)
    entries: dict[str, RunEntry[W]] = field(default_factory=dict)
    grants: SliceGrants = field(init=False)
    """The workers' slices of the runs' budgets."""

    def __post_init__(self) -> None:
        self.grants = SliceGrants(self.ledgers, self._sharers)

    def _sharers(self, rollout: str) -> int:
        """The rollouts in flight of ``rollout``'s run (they share its budget)."""
        entry = self.entries.get(rollout)
        return 1 if entry is None else entry.active

    async def run(
        self, run: PlacedRun, job: RolloutJob, workers: Sequence[W], place: Placing[W]
    ) -> RolloutResult:
        """Run ``job`` on one of ``workers`` (``place.ask``); when that
        worker is lost (``WorkerLost``), on another, from the rollout's
        committed steps once what the lost one committed is pumped in."""
        message = job.message
        key = message.rollout_id
        entry = self.runs.setdefault(run.run_id, RunEntry[W](run.emit))
        entry.active += 1
        self.ledgers[key] = job.ledger
        self.entries[key] = entry
        losses = 0
        try:
            while True:
                worker = pick_worker(workers, entry, place.slack, place.name)
                placed = placed_rollout(run, job, message, memory=place.memory)
                try:
                    return await place.ask(worker, placed, job.committed)
                except WorkerLost as lost:
                    await worker.pumped.wait()  # what it committed is in
                    losses += 1
                    message = await place_again(
                        run, job, message, worker=worker.index, lost=lost, incarnation=losses
                    )
        finally:
            self.ledgers.pop(key, None)
            self.entries.pop(key, None)
            entry.active -= 1
            if entry.active == 0:
                self.runs.pop(run.run_id, None)


@dataclass(frozen=True, slots=True)
class Placing(Generic[W]):
    """How ``PlacedRollouts.run`` places: the placement's ``name`` (for its
    errors), its affinity ``slack``, whether rollouts have a memory bank,
    and ``ask``, which runs a placed rollout on a worker."""

    name: str
    slack: int
    memory: bool
    ask: Ask[W]


async def wait_to_replace(backoff: RestartBackoff, healthy_for: float, lost: int) -> bool:
    """Wait out ``backoff`` before starting another worker in place of
    worker ``lost`` (healthy for ``healthy_for`` seconds); ``False``
    (logged) when the backoff gives up."""
    delay = backoff.crashed(healthy_for)
    if delay is None:
        log.warning("rollout_worker_not_replaced", lost=lost, error=backoff.limit_reason())
        return False
    await anyio.sleep(delay)
    return True


__all__ = [
    "PlacedRollouts",
    "Placing",
    "PooledWorker",
    "RunEntry",
    "WorkerBooks",
    "WorkerInfo",
    "WorkerLost",
    "answer_bank_call",
    "check_rebuildable",
    "deliver_events",
    "outcome_result",
    "pick_worker",
    "placed_rollout",
    "replacement_backoff",
    "replays_of",
    "wait_to_replace",
    "worker_infos",
]


async def place_again(
    run: PlacedRun,
    job: RolloutJob,
    message: RunRollout,
    *,
    worker: int,
    lost: BaseException,
    incarnation: int,
) -> RunRollout:
    """The message that places ``job`` again after ``worker`` was lost
    (what it committed already pumped in): from the rollout's committed
    steps when the run can resume them, else from the start;
    ``RolloutRestarted`` says which."""
    key = message.rollout_id
    steps = list(job.committed)
    go_on = steps if run.resumable and steps else None
    log.warning("rollout_worker_lost", rollout=key, worker=worker, steps=len(steps))
    await run.emit(
        RolloutRestarted(
            run_id=run.run_id,
            rollout_id=key,
            incarnation=incarnation,
            error=f"rollout worker {worker} lost: {lost}",
            resumed_steps=len(steps) if go_on is not None else 0,
        )
    )
    return msgspec.structs.replace(
        message, resume=go_on, restored=go_on is not None, charged=go_on is not None
    )
