"""What an earlier incarnation of a run committed (the daemon's run store
after a crash or a shutdown), for ``Runtime.run`` to go on from.  Plain
data; must not know how it is stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentrt.protocols import RolloutFinished, RolloutId, Step, TrajectorySummary


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
    rollouts: Mapping[RolloutId, RolloutCheckpoint]
    incarnation: int = 1
    """This resumption's number (1 for the first restart): names the
    rollouts it has to restart from scratch (``<rollout_id>~<incarnation>``:
    a pipeline's, which cannot be taken up mid-stage)."""


__all__ = ["RolloutCheckpoint", "RunCheckpoint"]
