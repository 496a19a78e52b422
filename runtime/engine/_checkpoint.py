"""What an earlier incarnation of a run committed (the daemon's run store
after a crash or a shutdown), for ``Runtime.run`` to go on from.  Plain
data; must not know how it is stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentrt.protocols._events import ElicitationAnswered, ElicitationRequested, RolloutFinished
from agentrt.protocols._ids import RolloutId
from agentrt.protocols._model import ModelReply
from agentrt.protocols._trajectory import Step, TrajectorySummary
from agentrt.protocols._usage import Usage


@dataclass(frozen=True, slots=True)
class RolloutCheckpoint:
    """One rollout as an earlier incarnation of its run committed it: its
    steps in order, its end (if it got there) and its summary (if written)."""

    steps: Sequence[Step] = ()
    finished: RolloutFinished | None = None
    summary: TrajectorySummary | None = None


@dataclass(frozen=True, slots=True)
class JournaledCall:
    """A model call as the run's journal has it (``CallReserved`` and, if it
    got there, ``CallSettled``)."""

    request_id: str | None
    model: str
    reserved: Usage
    """The worst case booked before it was sent."""
    settled: bool = False
    """Its end is on record: charged ``usage``, or failed (``usage`` None)."""
    usage: Usage | None = None
    reply: ModelReply | None = None
    """An agent step's reply, kept for a resumed run to take the step up
    with (``CallSettled.reply``)."""


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
    rollouts: Mapping[RolloutId, RolloutCheckpoint]
    incarnation: int = 1
    """This resumption's number (1 for the first restart): names the
    rollouts it has to start again (``<rollout_id>~<incarnation>``: a
    pipeline's, which takes up the stages it finished but not one it was
    in the middle of)."""
    calls: Sequence[JournaledCall] | None = None
    """The run's journal of model calls, in order, when it was journaled
    (``Runtime.run(journal=True)``, the daemon's runs).  A call not behind a
    committed step (in flight at the crash, or a summary's, a judge's, the
    warm-up's) is charged from it: its usage, or its reservation when its
    end is not on record; so caps hold across crashes."""
    asked: Mapping[str, ElicitationRequested] = field(default_factory=dict)
    """The questions the run asked the person behind it, by id: one asked
    again (an approval of the same call) keeps its first deadline."""
    answered: Mapping[str, ElicitationAnswered] = field(default_factory=dict)
    """How they were answered, by id: a question asked again after its
    answer was recorded takes that answer up instead of asking twice."""


__all__ = ["JournaledCall", "RolloutCheckpoint", "RunCheckpoint"]
