"""Recursive Tournament Voting (RTV).

Owns ``RecursiveTournament``: the summaries are split, in input order, into
groups of ``g``; a judge picks the best of each group with ``v`` votes (the
votes of one comparison, and all comparisons of one level, run concurrently
in an anyio task group); the winners advance and the process repeats until
one remains.  A group of one (an odd count) advances on a bye.  Ties: the
most votes win; among tied candidates the ``tie`` rule decides -- ``first``
(earlier in the bracket, i.e. input order) or ``cheapest`` (fewest rollout
tokens, then earlier).  Abstentions count for nobody; a comparison where
every vote abstained is a full tie.

The whole bracket is recorded as ``VoteCast`` events (one per comparison or
bye, ``round`` = level), emitted level by level.  ``ranking`` orders every
candidate by the level it reached (PDR keeps the top K of it).

For G = 2: N - 1 comparisons, (N - 1)·V judge calls, ceil(log2 N) levels.

May import protocols and ``agentrt.aggregators.base``/``judge``; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, final

import anyio
import msgspec

from agentrt.agents.recording import EventEmitter
from agentrt.aggregators.base import AggregationResult, emit_all, empty_result, usable
from agentrt.aggregators.judge import Judge, Verdict
from agentrt.protocols import Cost, Trajectory, TrajectorySummary, VoteCast
from agentrt.runtime.errors import ConfigError

TieRule = Literal["first", "cheapest"]


class Bracket(msgspec.Struct, frozen=True, kw_only=True):
    """A finished tournament: the comparisons per level and how far each
    candidate got (``reached[rollout_id]`` = the last level it played)."""

    levels: list[list[VoteCast]]
    reached: dict[str, int]

    def ranking(self, order: Sequence[str]) -> list[str]:
        """``order`` (rollout ids) sorted by level reached, deepest first;
        ties keep ``order``."""
        return sorted(order, key=lambda rid: -self.reached.get(rid, 0))


@final
class RecursiveTournament:
    """RTV (see the module docstring)."""

    name = "rtv"

    def __init__(self, judge: Judge, *, g: int = 2, v: int = 8, tie: TieRule = "first") -> None:
        if g < 2:
            raise ConfigError(f"group size g must be >= 2, got {g}", where="rtv.g")
        if v < 1:
            raise ConfigError(f"votes per comparison v must be >= 1, got {v}", where="rtv.v")
        if tie not in ("first", "cheapest"):
            raise ConfigError(f"tie rule must be 'first' or 'cheapest', got {tie!r}", where="rtv")
        self.judge, self.g, self.v, self.tie = judge, g, v, tie

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        trajectories: Mapping[str, Trajectory] | None = None,
        events: EventEmitter | None = None,
        run_id: str = "",
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        winner, bracket, cost = await self.run_bracket(task, kept, events=events, run_id=run_id)
        comparisons = sum(1 for lvl in bracket.levels for c in lvl if len(c.candidates) > 1)
        return AggregationResult(
            answer=winner.answer,
            winner=winner.rollout_id,
            rationale=(
                f"won a {len(bracket.levels)}-level tournament of {len(kept)} "
                f"(g={self.g}, v={self.v}, {comparisons} comparisons)"
            ),
            trace=[c for lvl in bracket.levels for c in lvl],
            cost=cost,
            excluded=excluded,
        )

    async def run_bracket(
        self,
        task: str,
        candidates: Sequence[TrajectorySummary],
        *,
        events: EventEmitter | None = None,
        run_id: str = "",
    ) -> tuple[TrajectorySummary, Bracket, Cost]:
        """Play the tournament over ``candidates`` (all with answers)."""
        pool = list(candidates)
        levels: list[list[VoteCast]] = []
        reached = {s.rollout_id: 0 for s in pool}
        cost = Cost()
        level = 0
        while len(pool) > 1:
            level += 1
            groups = [pool[i : i + self.g] for i in range(0, len(pool), self.g)]
            played = await self._level(task, groups, level)
            for s in pool:
                reached[s.rollout_id] = level
            pool = [w for w, _, _ in played]
            for _, _, c in played:
                cost = cost + c
            votes = [vote for _, vote, _ in played]
            levels.append(await emit_all(events, votes, run_id=run_id))
        if pool:
            reached[pool[0].rollout_id] = level + 1
        return pool[0], Bracket(levels=levels, reached=reached), cost

    async def _level(
        self, task: str, groups: list[list[TrajectorySummary]], level: int
    ) -> list[tuple[TrajectorySummary, VoteCast, Cost]]:
        """Every comparison of one level, concurrently; results in group order."""
        outcomes: list[tuple[TrajectorySummary, VoteCast, Cost] | None] = [None] * len(groups)

        async def play(i: int) -> None:
            outcomes[i] = await self._compare(task, groups[i], level)

        async with anyio.create_task_group() as tg:
            for i in range(len(groups)):
                tg.start_soon(play, i)
        return [o for o in outcomes if o is not None]

    async def _compare(
        self, task: str, group: list[TrajectorySummary], level: int
    ) -> tuple[TrajectorySummary, VoteCast, Cost]:
        ids = [s.rollout_id for s in group]
        if len(group) == 1:
            bye = VoteCast(
                run_id="", aggregator=self.name, round=level, candidates=ids, winner=ids[0]
            )
            return group[0], bye, Cost()
        verdicts: list[Verdict | None] = [None] * self.v

        async def vote(k: int) -> None:
            verdicts[k] = await self.judge.compare(task, group)

        async with anyio.create_task_group() as tg:
            for k in range(self.v):
                tg.start_soon(vote, k)
        tally = [0] * len(group)
        cost = Cost()
        for verdict in verdicts:
            if verdict is None:
                continue
            cost = cost + verdict.cost
            if verdict.winner is not None and 0 <= verdict.winner < len(group):
                tally[verdict.winner] += 1
        top = max(tally)
        tied = [i for i, t in enumerate(tally) if t == top]
        if self.tie == "cheapest":
            best = min(tied, key=lambda i: (group[i].cost.usage.total_tokens, i))
        else:
            best = tied[0]
        record = VoteCast(
            run_id="",
            aggregator=self.name,
            round=level,
            candidates=ids,
            winner=ids[best],
            votes=dict(zip(ids, tally, strict=True)),
        )
        return group[best], record, cost


__all__ = ["Bracket", "RecursiveTournament", "TieRule"]
