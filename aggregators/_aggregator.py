"""The ``Aggregator`` protocol, what an aggregator is given and what it returns.

Owns ``AggregationContext`` (a run's id, events, budget ledger, a model
backend metered on that ledger, the raw trajectories and PDR's rollout
callable: an aggregator's only way to reach a model), ``AggregationResult``
(the answer, the winning rollout, why, the trace of votes as ``VoteCast``
events), the ``Aggregator`` protocol over trajectory summaries, ``usable``
(which summaries take part: a failed or crashed rollout, one without an
answer, is left out and the aggregation goes on with the rest) and
``BudgetStop`` (how an aggregation notes that the ledger refused a call).

May import protocols, the runtime floor and ``agentrt.agents._recording``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, final

import msgspec

from agentrt.agents._recording import EventEmitter
from agentrt.aggregators._workspace import Rollout
from agentrt.protocols._events import VoteCast
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._metered import AfterCall, MeteredBackend

AGGREGATION_MIN_TOKENS: Final = 64
"""The fewest completion tokens a run's aggregation call (a judge's, an
aggregation agent's) is asked with when the budget is nearly spent: room
for a short verdict.  A call that cannot get them is refused."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregationContext:
    """Everything an aggregator may use besides the task and the summaries.

    ``backend`` is the only model access an aggregator has, and it is a
    ``MeteredBackend`` bound to ``ledger``: every judge, compressed-reasoning
    and aggregation-agent call is reserved on the run's ledger and charged
    to it, and a call that would cross a cap raises ``BudgetExceeded``
    instead of reaching the model (a run's context first lets such a call
    wait for the calls in flight, or run with ``max_tokens`` lowered to
    what is left: ``metered(min_tokens=...)``).
    ``AggregationContext.metered(...)`` wraps a backend for you.

    ``run_id``: stamped on every ``VoteCast``; ``events``: where votes are
    emitted (``None``: nowhere); ``ledger``: the run's budget ledger (or a
    slice of it); ``trajectories``: the raw trajectories by rollout id, for
    aggregators that read steps (the aggregation agent); ``rollout``: runs a
    fresh rollout seeded with a PDR workspace, on the run's ledger (PDR
    needs it; ``None`` otherwise); ``model``: the model judges and agents
    ask (``None``: the backend's first).

    Raises ``ConfigError`` when ``backend`` is not a ``MeteredBackend`` on
    ``ledger``.
    """

    run_id: str
    ledger: BudgetLedger
    backend: MeteredBackend
    events: EventEmitter | None = None
    trajectories: Mapping[str, Trajectory] = field(default_factory=dict)
    rollout: Rollout | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.backend, MeteredBackend):
            raise ConfigError(
                f"the backend must be a MeteredBackend on the context's ledger, got "
                f"{type(self.backend).__name__}; use AggregationContext.metered(backend, ledger)",
                where=f"AggregationContext(run_id={self.run_id!r}).backend",
            )
        if self.backend.ledger is not self.ledger:
            raise ConfigError(
                f"the backend is metered on ledger {self.backend.ledger.name!r}, not on the "
                f"context's ledger {self.ledger.name!r}",
                where=f"AggregationContext(run_id={self.run_id!r}).backend",
            )

    @classmethod
    def metered(
        cls,
        backend: ModelBackend,
        ledger: BudgetLedger,
        *,
        run_id: str = "",
        events: EventEmitter | None = None,
        trajectories: Mapping[str, Trajectory] | None = None,
        rollout: Rollout | None = None,
        model: str | None = None,
        after_call: AfterCall | None = None,
        min_tokens: int | None = None,
    ) -> AggregationContext:
        """A context whose backend is ``backend`` metered on ``ledger``
        (wrapped in a ``MeteredBackend``, unless it already is one on
        ``ledger``), ``after_call`` awaited after each of its calls and
        ``min_tokens`` its floor (see ``MeteredBackend``: with it, a judge
        call that does not fit its worst case waits for the calls in flight
        to give room back, or runs with ``max_tokens`` lowered, instead of
        being refused).  The other parameters are the fields'.  Raises
        ``ConfigError`` for a backend metered on another ledger (wrapping it
        again would charge every call twice)."""
        if isinstance(backend, MeteredBackend):
            if backend.ledger is not ledger:
                raise ConfigError(
                    f"the backend is already metered on ledger {backend.ledger.name!r}, not on "
                    f"{ledger.name!r}: pass the raw backend",
                    where=f"AggregationContext.metered(run_id={run_id!r})",
                )
        else:
            backend = MeteredBackend(
                backend, ledger, model=model, after_call=after_call, min_tokens=min_tokens
            )
        return cls(
            run_id=run_id,
            ledger=ledger,
            backend=backend,
            events=events,
            trajectories=trajectories if trajectories is not None else {},
            rollout=rollout,
            model=model,
        )


class AggregationResult(msgspec.Struct, frozen=True, kw_only=True):
    """What an aggregator decided."""

    answer: str | None
    """The chosen answer; ``None`` when no rollout produced one."""
    winner: str | None
    """The rollout id whose answer was chosen (``None``: none, or a merged
    answer no single rollout gave)."""
    rationale: str = ""
    """Why, in a sentence or two (and, when the budget cap stopped the
    aggregation early, that it did)."""
    trace: list[VoteCast] = []
    """Every vote / comparison, in order (the whole bracket for RTV)."""
    cost: Cost = Cost()
    """This aggregation's own model calls (judges, agents) as their replies
    reported them: a breakdown, not a bill.  Those calls went through the
    context's metered backend, so the run's ledger holds them already: a
    run's cost is its ledger's ``spent``; never add ``cost`` to it.  PDR's
    refinement rollouts are not in it (they are on the ledger as rollouts)."""
    excluded: list[str] = []
    """Rollouts left out (failed, crashed, no answer)."""


class Aggregator(Protocol):
    """Picks (or builds) one answer from the summaries of parallel rollouts."""

    @property
    def name(self) -> str:
        """Short name, used in events (``VoteCast.aggregator``)."""
        ...

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        """Aggregate ``summaries`` of rollouts of ``task``.  Model calls go
        through ``context.backend`` only (so they are on the run's ledger);
        votes are emitted to ``context.events`` with ``context.run_id``.  When
        the ledger refuses a call (``BudgetExceeded``), an aggregator stops
        calling and returns the best answer it has, saying so in
        ``rationale``."""
        ...


@final
class BudgetStop:
    """The first ``BudgetExceeded`` an aggregation met.  Once it is set, the
    aggregation starts no further model call (calls already admitted by the
    ledger finish: they fit under the cap)."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: BudgetExceeded | None = None

    def note(self, error: BudgetExceeded) -> None:
        if self.error is None:
            self.error = error

    @property
    def hit(self) -> bool:
        return self.error is not None

    def why(self) -> str:
        """``stopped at the budget cap (max_tokens)``, or ``""`` when not hit."""
        if self.error is None:
            return ""
        return f"stopped at the budget cap ({self.error.limit or self.error})"


def nothing_left(ledger: BudgetLedger) -> str | None:
    """The cap of ``ledger`` (or an ancestor) with nothing left at all, so
    that no further call can be admitted, there or on a budget slice a
    rollout worker holds (what a slice holds unspent is still left);
    ``None`` while there is room."""
    return ledger.headroom(lent=True).shortfall(1, 1)


def check_range(owner: str, key: str, value: float, low: float, high: float) -> None:
    """Raises ``ConfigError`` at ``owner.key`` unless ``low <= value <= high``."""
    if not low <= value <= high:
        raise ConfigError(
            f"{key} must be >= {low} and <= {high}, got {value}", where=f"{owner}.{key}"
        )


def usable(
    summaries: Sequence[TrajectorySummary],
) -> tuple[list[TrajectorySummary], list[str]]:
    """The summaries with an answer, and the rollout ids left out (both in
    the order given; one pass, so a vote over thousands stays linear)."""
    kept: list[TrajectorySummary] = []
    excluded: list[str] = []
    for s in summaries:
        if s.answer is not None and s.answer.strip():
            kept.append(s)
        else:
            excluded.append(s.rollout_id)
    return kept, excluded


def empty_result(excluded: list[str], why: str) -> AggregationResult:
    """The result when no rollout has an answer."""
    return AggregationResult(answer=None, winner=None, rationale=why, excluded=excluded)


async def emit_all(
    events: EventEmitter | None, trace: Sequence[VoteCast], *, run_id: str = ""
) -> list[VoteCast]:
    """Give ``trace`` the run's id and emit it (when there is an emitter);
    returns the events as emitted."""
    trace = [msgspec.structs.replace(v, run_id=run_id) for v in trace]
    if events is None:
        return trace
    return [await events.emit(vote) for vote in trace]


__all__ = [
    "AggregationContext",
    "AggregationResult",
    "Aggregator",
    "BudgetStop",
    "check_range",
    "emit_all",
    "empty_result",
    "nothing_left",
    "usable",
]
