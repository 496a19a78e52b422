"""Recursive Tournament Voting (RTV): ``RecursiveTournament`` and its
``Bracket``.

May import protocols, the runtime floor and ``agentrt.aggregators.base``/
``judge``/``vote``; nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, final

import anyio
import msgspec

from agentrt.aggregators.base import (
    AggregationContext,
    AggregationResult,
    BudgetStop,
    emit_all,
    empty_result,
    usable,
)
from agentrt.aggregators.judge import Judge, ModelJudge, Verdict
from agentrt.aggregators.vote import plurality
from agentrt.protocols import Cost, TrajectorySummary, VoteCast
from agentrt.runtime.errors import BudgetExceeded, ConfigError

TieRule = Literal["first", "cheapest"]

#: Largest group a comparison may hold (a judge reads every member at once).
MAX_GROUP: Final = 16
#: Most judge votes per comparison.
MAX_VOTES: Final = 64


class Bracket(msgspec.Struct, frozen=True, kw_only=True):
    """A finished (or budget-stopped) tournament: the comparisons per level,
    how far each candidate got (``reached[rollout_id]`` = the last level it
    played; the winner one more), and, when the budget cap stopped it,
    ``stopped`` saying so."""

    levels: list[list[VoteCast]]
    reached: dict[str, int]
    stopped: str | None = None

    def ranking(self, order: Sequence[str]) -> list[str]:
        """``order`` (rollout ids) sorted by level reached, deepest first;
        ties keep ``order``."""
        return sorted(order, key=lambda rid: -self.reached.get(rid, 0))


_Played = tuple[list[TrajectorySummary], VoteCast | None, Cost]
"""A comparison's survivors (one, or the whole group when the budget left it
undecided), its record (``None``: not played) and what it cost."""


@final
class RecursiveTournament:
    """RTV: the summaries are split, in input order, into groups of ``g``; a
    judge picks each group's best with ``v`` votes (concurrently within a
    level); winners advance until one remains (a lone candidate advances on
    a bye).  For ``g=2``: N - 1 comparisons, (N - 1)·V judge calls.

    ``judge``: default a ``ModelJudge``; ``g``: group size, 2..16; ``v``:
    votes per comparison, 1..64; ``tie``: among candidates with the most
    votes, ``first`` (input order) or ``cheapest`` (fewest rollout tokens).
    Abstentions count for nobody.  Raises ``ConfigError`` naming the option
    out of its bounds.  When the ledger refuses a judge call, no further
    call starts: the level finishes with the votes admitted and the answer
    is a plurality over the candidates still in (the rationale says so).
    The bracket is emitted as ``VoteCast`` events, level by level."""

    name = "rtv"

    def __init__(
        self,
        judge: Judge | None = None,
        *,
        g: int = 2,
        v: int = 8,
        tie: TieRule = "first",
    ) -> None:
        if not 2 <= g <= MAX_GROUP:
            raise ConfigError(
                f"group size g must be >= 2 and <= {MAX_GROUP}, got {g}", where="rtv.g"
            )
        if not 1 <= v <= MAX_VOTES:
            raise ConfigError(
                f"votes per comparison v must be >= 1 and <= {MAX_VOTES}, got {v}", where="rtv.v"
            )
        if tie not in ("first", "cheapest"):
            raise ConfigError(f"tie rule must be 'first' or 'cheapest', got {tie!r}", where="rtv")
        self.judge: Judge = judge if judge is not None else ModelJudge()
        self.g, self.v, self.tie = g, v, tie

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        winner, bracket, cost = await self.run_bracket(task, kept, context)
        comparisons = sum(1 for lvl in bracket.levels for c in lvl if len(c.candidates) > 1)
        shape = f"g={self.g}, v={self.v}, {comparisons} comparisons"
        if bracket.stopped is not None:
            why = f"{bracket.stopped} ({shape})"
        else:
            why = f"won a {len(bracket.levels)}-level tournament of {len(kept)} ({shape})"
        return AggregationResult(
            answer=winner.answer,
            winner=winner.rollout_id,
            rationale=why,
            trace=[c for lvl in bracket.levels for c in lvl],
            cost=cost,
            excluded=excluded,
        )

    async def run_bracket(
        self, task: str, candidates: Sequence[TrajectorySummary], context: AggregationContext
    ) -> tuple[TrajectorySummary, Bracket, Cost]:
        """Play the tournament over ``candidates`` (all with answers)."""
        pool = list(candidates)
        levels: list[list[VoteCast]] = []
        reached = {s.rollout_id: 0 for s in pool}
        cost = Cost()
        stop = BudgetStop()
        level = 0
        while len(pool) > 1 and not stop.hit:
            level += 1
            groups = [pool[i : i + self.g] for i in range(0, len(pool), self.g)]
            played = await self._level(task, groups, level, context, stop)
            for s in pool:
                reached[s.rollout_id] = level
            pool = [w for survivors, _, _ in played for w in survivors]
            cost = sum((c for _, _, c in played), cost)
            votes = [record for _, record, _ in played if record is not None]
            if votes:
                levels.append(await emit_all(context.events, votes, run_id=context.run_id))
        stopped = None
        winner = pool[0]
        if len(pool) > 1:
            winner, agree = plurality(self._by_tie_rule(pool))
            stopped = f"{stop.why()} in level {level} with {len(pool)} candidates left; {agree}"
        elif stop.hit:
            stopped = (
                f"{stop.why()} in level {level}: won the comparisons on the votes they got "
                f"(some fewer than {self.v})"
            )
        reached[winner.rollout_id] = level + 1
        return winner, Bracket(levels=levels, reached=reached, stopped=stopped), cost

    def _by_tie_rule(self, pool: list[TrajectorySummary]) -> list[TrajectorySummary]:
        if self.tie == "cheapest":
            return sorted(pool, key=lambda s: s.cost.usage.total_tokens)  # stable: then earlier
        return pool

    async def _level(
        self,
        task: str,
        groups: list[list[TrajectorySummary]],
        level: int,
        context: AggregationContext,
        stop: BudgetStop,
    ) -> list[_Played]:
        """Every comparison of one level, concurrently; results in group order."""
        outcomes: list[_Played | None] = [None] * len(groups)

        async def play(i: int) -> None:
            outcomes[i] = await self._compare(task, groups[i], level, context, stop)

        async with anyio.create_task_group() as tg:
            for i in range(len(groups)):
                tg.start_soon(play, i)
        return [o for o in outcomes if o is not None]

    async def _compare(
        self,
        task: str,
        group: list[TrajectorySummary],
        level: int,
        context: AggregationContext,
        stop: BudgetStop,
    ) -> _Played:
        ids = [s.rollout_id for s in group]
        if len(group) == 1:
            bye = VoteCast(
                run_id="", aggregator=self.name, round=level, candidates=ids, winner=ids[0]
            )
            return group, bye, Cost()
        verdicts: list[Verdict | None] = [None] * self.v

        async def vote(k: int) -> None:
            if stop.hit:
                return
            try:
                verdicts[k] = await self.judge.compare(task, group, context)
            except BudgetExceeded as exc:
                stop.note(exc)

        async with anyio.create_task_group() as tg:
            for k in range(self.v):
                tg.start_soon(vote, k)
        cast = [verdict for verdict in verdicts if verdict is not None]
        if not cast and stop.hit:
            return group, None, Cost()  # undecided: every candidate stays in
        tally = [0] * len(group)
        for verdict in cast:
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
        return [group[best]], record, sum((v.cost for v in cast), Cost())


__all__ = ["MAX_GROUP", "MAX_VOTES", "Bracket", "RecursiveTournament", "TieRule"]
