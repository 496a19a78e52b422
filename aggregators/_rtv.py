"""Recursive Tournament Voting (RTV): ``RecursiveTournament`` and its
``Bracket``.

May import protocols, the runtime floor and ``agentrt.aggregators._aggregator``/
``judge``/``vote``; nothing else.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final, Literal, final

import anyio
import msgspec

from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    BudgetStop,
    emit_all,
    empty_result,
    usable,
)
from agentrt.aggregators._judge import Judge, ModelJudge, Verdict, report_unreadable
from agentrt.aggregators._verdict import VerdictUnparseable
from agentrt.aggregators._vote import Normalizer, answer_key, default_normalizer, plurality
from agentrt.protocols._events import VoteCast
from agentrt.protocols._trajectory import TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError

TieRule = Literal["coin", "first", "cheapest"]

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
    agreed: int = 0
    """Comparisons decided without a judge: their candidates' answers agreed."""
    judge_calls: int = 0
    """Judge calls made (votes cast, abstentions included)."""
    unreadable: list[str] = []
    """Comparisons no vote of which could be read (the coin decided them)."""

    def ranking(self, order: Sequence[str]) -> list[str]:
        """``order`` (rollout ids) sorted by level reached, deepest first;
        ties keep ``order``."""
        return sorted(order, key=lambda rid: -self.reached.get(rid, 0))


_Played = tuple[list[TrajectorySummary], VoteCast | None, Cost]
"""A comparison's survivors (one, or the whole group when the budget left it
undecided), its record (``None``: not played) and what it cost."""


@final
class RecursiveTournament:
    """RTV: the summaries, in an order shuffled with ``seed`` (``shuffle``;
    so byes fall on no rollout in particular), are split into groups of
    ``g``; a judge picks each group's best with ``v`` votes (concurrently
    within a level); winners advance until one remains (a lone candidate
    advances on a bye).  For ``g=2``: N - 1 comparisons, at most (N - 1)·V
    judge calls.

    Early stop (``skip_agreeing``, default on): a group whose candidates'
    answers agree (``answer_key`` with ``normalize``) is decided without a
    judge call (the tie rule picks who advances), so N identical answers
    cost no judge call.  Turn it off to have the judge rank agreeing
    summaries by their evidence too.

    ``judge``: default a ``ModelJudge``; ``g``: group size, 2..16; ``v``:
    votes per comparison, 1..64; ``tie``: among candidates with the most
    votes, ``coin`` (a coin seeded with ``seed`` and the comparison's place
    in the bracket), ``first`` (bracket order) or ``cheapest`` (fewest
    rollout tokens, then the coin).  Abstentions count for nobody; a vote
    whose reply never parsed is an abstention, and a comparison where no
    vote parsed raises ``VerdictUnparseable`` naming it.  Raises
    ``ConfigError`` naming an option out of its bounds.  When the ledger
    refuses a judge call, no further call starts: the level finishes with
    the votes admitted and the answer is a plurality over the candidates
    still in (the rationale says so).  The bracket is emitted as
    ``VoteCast`` events, level by level (an agreed comparison has no
    ``votes``)."""

    name = "rtv"

    def __init__(
        self,
        judge: Judge | None = None,
        *,
        g: int = 2,
        v: int = 8,
        tie: TieRule = "coin",
        seed: int = 0,
        shuffle: bool = True,
        skip_agreeing: bool = True,
        normalize: Normalizer = default_normalizer,
    ) -> None:
        if not 2 <= g <= MAX_GROUP:
            raise ConfigError(
                f"group size g must be >= 2 and <= {MAX_GROUP}, got {g}", where="rtv.g"
            )
        if not 1 <= v <= MAX_VOTES:
            raise ConfigError(
                f"votes per comparison v must be >= 1 and <= {MAX_VOTES}, got {v}", where="rtv.v"
            )
        if tie not in ("coin", "first", "cheapest"):
            raise ConfigError(
                f"tie rule must be 'coin', 'first' or 'cheapest', got {tie!r}", where="rtv.tie"
            )
        self.judge: Judge = judge if judge is not None else ModelJudge()
        self.g, self.v, self.tie = g, v, tie
        self.seed, self.shuffle, self.normalize = seed, shuffle, normalize
        self.skip_agreeing = skip_agreeing

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        winner, bracket, cost = await self.run_bracket(task, kept, context)
        comparisons = sum(1 for lvl in bracket.levels for c in lvl if len(c.candidates) > 1)
        shape = (
            f"g={self.g}, v={self.v}, {comparisons} comparisons, "
            f"{bracket.agreed} of them agreed, {bracket.judge_calls} judge calls"
        )
        if bracket.stopped is not None:
            why = f"{bracket.stopped} ({shape})"
        else:
            why = f"won a {len(bracket.levels)}-level tournament of {len(kept)} ({shape})"
        if bracket.unreadable:
            why += (
                f"; {len(bracket.unreadable)} comparisons had no readable verdict and were "
                f"decided by the coin ({bracket.unreadable[-1]})"
            )
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
        if self.shuffle:
            random.Random(f"{self.seed}:bracket").shuffle(pool)
        levels: list[list[VoteCast]] = []
        reached = {s.rollout_id: 0 for s in pool}
        cost = Cost()
        stop = BudgetStop()
        level = agreed = calls = 0
        unreadable: list[str] = []
        while len(pool) > 1 and not stop.hit:
            level += 1
            groups = [pool[i : i + self.g] for i in range(0, len(pool), self.g)]
            played = await self._level(task, groups, level, context, stop, unreadable=unreadable)
            for s in pool:
                reached[s.rollout_id] = level
            pool = [w for survivors, _, _ in played for w in survivors]
            cost = sum((c for _, _, c in played), cost)
            votes = [record for _, record, _ in played if record is not None]
            agreed += sum(1 for r in votes if len(r.candidates) > 1 and not r.votes)
            calls += sum(c.model_calls for _, _, c in played)
            if votes:
                levels.append(await emit_all(context.events, votes, run_id=context.run_id))
        stopped = None
        winner = pool[0]
        if len(pool) > 1:
            winner, agree = plurality(self._by_tie_rule(pool), self.normalize)
            stopped = f"{stop.why()} in level {level} with {len(pool)} candidates left; {agree}"
        elif stop.hit:
            stopped = (
                f"{stop.why()} in level {level}: won the comparisons on the votes they got "
                f"(some fewer than {self.v})"
            )
        reached[winner.rollout_id] = level + 1
        bracket = Bracket(
            levels=levels,
            reached=reached,
            stopped=stopped,
            agreed=agreed,
            judge_calls=calls,
            unreadable=unreadable,
        )
        return winner, bracket, cost

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
        *,
        unreadable: list[str],
    ) -> list[_Played]:
        """Every comparison of one level, concurrently; results in group order."""
        outcomes: list[_Played | None] = [None] * len(groups)

        async def play(i: int) -> None:
            coin = random.Random(f"{self.seed}:{level}:{i}")
            outcomes[i] = await self._compare(
                task, groups[i], level, context, stop, coin=coin, unreadable=unreadable
            )

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
        *,
        coin: random.Random,
        unreadable: list[str],
    ) -> _Played:
        ids = [s.rollout_id for s in group]
        if len(group) == 1:
            bye = VoteCast(
                run_id="", aggregator=self.name, round=level, candidates=ids, winner=ids[0]
            )
            return group, bye, Cost()
        if self.skip_agreeing and len({answer_key(s.answer, self.normalize) for s in group}) == 1:
            # Every candidate gives the same answer: no judge can change it.
            best = self._break_tie(group, list(range(len(group))), coin)
            record = VoteCast(
                run_id="", aggregator=self.name, round=level, candidates=ids, winner=ids[best]
            )
            return [group[best]], record, Cost()
        verdicts: list[Verdict | None] = [None] * self.v
        unread: list[VerdictUnparseable] = []

        async def vote(k: int) -> None:
            if stop.hit:
                return
            try:
                verdicts[k] = await self.judge.compare(task, group, context)
            except BudgetExceeded as exc:
                stop.note(exc)
            except VerdictUnparseable as exc:
                unread.append(exc)  # an abstention, unless no vote parsed

        async with anyio.create_task_group() as tg:
            for k in range(self.v):
                tg.start_soon(vote, k)
        cast = [verdict for verdict in verdicts if verdict is not None]
        spent = sum((v.cost for v in cast), Cost()) + sum((e.cost for e in unread), Cost())
        if unread and not any(v.winner is not None for v in cast):
            # No vote could be read: reported, and the coin decides below.
            where = f"rtv level {level}, comparison of {ids}"
            unreadable.append(await report_unreadable(context, unread[-1], where))
        if not cast and stop.hit:
            # Undecided (the cap refused its judges): every candidate stays
            # in, and the trace keeps the comparison, with no winner.
            undecided = VoteCast(
                run_id="",
                aggregator=self.name,
                round=level,
                candidates=ids,
                winner=None,
                votes=dict.fromkeys(ids, 0),
            )
            return group, undecided, spent
        tally = [0] * len(group)
        for verdict in cast:
            if verdict.winner is not None and 0 <= verdict.winner < len(group):
                tally[verdict.winner] += 1
        top = max(tally)
        best = self._break_tie(group, [i for i, t in enumerate(tally) if t == top], coin)
        record = VoteCast(
            run_id="",
            aggregator=self.name,
            round=level,
            candidates=ids,
            winner=ids[best],
            votes=dict(zip(ids, tally, strict=True)),
        )
        return [group[best]], record, spent

    def _break_tie(
        self, group: list[TrajectorySummary], tied: list[int], coin: random.Random
    ) -> int:
        if self.tie == "first":
            return tied[0]
        if self.tie == "cheapest":
            least = min(group[i].cost.usage.total_tokens for i in tied)
            tied = [i for i in tied if group[i].cost.usage.total_tokens == least]
        return coin.choice(tied)


__all__ = ["MAX_GROUP", "MAX_VOTES", "Bracket", "RecursiveTournament", "TieRule"]
