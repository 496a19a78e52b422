"""The ``Aggregator`` protocol and what every aggregator returns.

Owns ``AggregationResult`` (the answer, the winning rollout, why, the trace
of votes as ``VoteCast`` events, and what aggregating cost), the
``Aggregator`` protocol over trajectory summaries, and ``usable``: which
summaries take part (a failed or crashed rollout, one without an answer,
is left out and the aggregation continues with the rest).

May import protocols and ``agentrt.agents.recording``; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from agentrt.agents.recording import EventEmitter
from agentrt.protocols import Cost, Trajectory, TrajectorySummary, VoteCast


class AggregationResult(msgspec.Struct, frozen=True, kw_only=True):
    """What an aggregator decided."""

    answer: str | None
    """The chosen answer; ``None`` when no rollout produced one."""
    winner: str | None
    """The rollout id whose answer was chosen (``None``: none, or a merged
    answer no single rollout gave)."""
    rationale: str = ""
    """Why, in a sentence or two."""
    trace: list[VoteCast] = []
    """Every vote / comparison, in order (the whole bracket for RTV)."""
    cost: Cost = Cost()
    """What aggregating cost (judge and agent calls), not the rollouts."""
    excluded: list[str] = []
    """Rollouts left out (failed, crashed, no answer)."""


class Aggregator(Protocol):
    """Picks (or builds) one answer from the summaries of parallel rollouts."""

    @property
    def name(self) -> str:
        """Short name, used in events (``VoteCast.aggregator``)."""
        ...

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        trajectories: Mapping[str, Trajectory] | None = None,
        events: EventEmitter | None = None,
        run_id: str = "",
    ) -> AggregationResult:
        """Aggregate ``summaries`` (``trajectories`` by rollout id, when the
        aggregator reads raw steps); votes are emitted to ``events`` with
        ``run_id``."""
        ...


def usable(
    summaries: Sequence[TrajectorySummary],
) -> tuple[list[TrajectorySummary], list[str]]:
    """The summaries with an answer, and the rollout ids left out."""
    kept = [s for s in summaries if s.answer is not None and s.answer.strip()]
    return kept, [s.rollout_id for s in summaries if s not in kept]


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


__all__ = ["AggregationResult", "Aggregator", "emit_all", "empty_result", "usable"]
