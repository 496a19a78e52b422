"""Parallel-Distill-Refine (PDR), agentic: ``ParallelDistillRefine`` and its
``PDRRound``.

May import protocols, the runtime floor and the other aggregators; nothing
else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, final

import anyio
import msgspec

from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    Aggregator,
    BudgetStop,
    check_range,
    nothing_left,
    usable,
)
from agentrt.aggregators._judge import Judge, ModelJudge, report_unreadable
from agentrt.aggregators._rtv import RecursiveTournament
from agentrt.aggregators._verdict import VerdictUnparseable
from agentrt.aggregators._vote import Normalizer, answer_key, default_normalizer
from agentrt.aggregators._workspace import Rollout, Workspace
from agentrt.protocols._events import VoteCast
from agentrt.protocols._ids import crashed_refinement_id
from agentrt.protocols._trajectory import TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError
from agentrt.runtime.observe._log import get_logger

log = get_logger(__name__)

#: Most rounds of rollouts.
MAX_ROUNDS: Final = 8
#: Most rollouts per round (and rollouts running at once).
MAX_M: Final = 64
#: Most summaries in a workspace (each is in every seeded prompt).
MAX_K: Final = 16


class PDRRound(msgspec.Struct, frozen=True, kw_only=True):
    """One round: the workspace it started from and the summaries it made."""

    workspace: Workspace
    summaries: list[TrajectorySummary]


@final
class ParallelDistillRefine:
    """PDR: ``rounds`` rounds of ``m`` rollouts in parallel through the
    context's ``rollout(task, workspace)``; after each round the ``k`` best
    summaries become the next workspace, so context stays bounded; a final
    aggregator picks the answer from the last round.  A rollout that raises
    is a failed summary; a round with no answer leaves the previous one as
    the best.  Every judge call and rollout is on the run's ledger: when a
    judge call is refused, or nothing is left before a round, no further
    round starts and the final aggregator runs over the best round so far.

    ``judge``: default a ``ModelJudge``;
    ``rounds`` (1..8), ``m`` rollouts per round (1..64), ``k`` summaries in
    the workspace (1..16); ``select``: ``rtv`` ranks a round by the level
    each summary reached in an RTV bracket (``g``, ``v``); ``judge`` by
    pointwise scores.  ``final``: the last step (default RTV with the same
    judge); ``max_concurrency``: rollouts at once (default ``m``).  Raises
    ``ConfigError`` naming an option out of its bounds."""

    name = "pdr"

    def __init__(
        self,
        judge: Judge | None = None,
        *,
        rounds: int = 2,
        m: int = 8,
        k: int = 3,
        select: Literal["rtv", "judge"] = "rtv",
        g: int = 2,
        v: int = 4,
        final: Aggregator | None = None,
        max_concurrency: int | None = None,
        stop_on_agreement: bool = True,
        normalize: Normalizer = default_normalizer,
    ) -> None:
        for key, value, high in (("rounds", rounds, MAX_ROUNDS), ("m", m, MAX_M), ("k", k, MAX_K)):
            check_range("pdr", key, value, 1, high)
        if max_concurrency is not None:
            check_range("pdr", "max_concurrency", max_concurrency, 1, MAX_M)
        if select not in ("rtv", "judge"):
            raise ConfigError(f"select must be 'rtv' or 'judge', got {select!r}", where="pdr")
        self.judge: Judge = judge if judge is not None else ModelJudge()
        self.rounds, self.m, self.k, self.select = rounds, m, k, select
        self.stop_on_agreement, self.normalize = stop_on_agreement, normalize
        self.selector = RecursiveTournament(self.judge, g=g, v=v, normalize=normalize)
        self.final: Aggregator = final or RecursiveTournament(
            self.judge, g=g, v=v, normalize=normalize
        )
        self.limit = anyio.CapacityLimiter(max_concurrency or m)
        self.history: list[PDRRound] = []

    async def run(self, task: str, context: AggregationContext) -> AggregationResult:
        """Every round from an empty workspace, then the final aggregator."""
        return await self._rounds(task, [], context)

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        """``summaries`` are round 1; the remaining rounds follow."""
        return await self._rounds(task, list(summaries), context)

    def _rollout(self, context: AggregationContext) -> Rollout:
        if context.rollout is None:
            raise ConfigError(
                "pdr runs fresh rollouts: its context needs a rollout callable "
                "(AggregationContext.rollout)",
                where="pdr",
            )
        return context.rollout

    async def _rounds(
        self, task: str, first: list[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        self.history = []
        workspace = Workspace(round=1, k=self.k)
        cost = Cost()
        trace: list[VoteCast] = []
        current = first
        start = 1
        stopped = ""
        if first:
            self.history.append(PDRRound(workspace=workspace, summaries=first))
            start = 2
        for round_no in range(start, self.rounds + 1):
            rollout = self._rollout(context)  # before this round's first model call
            agreed = self._agreed(current)
            if agreed:
                stopped = f"round {round_no - 1} converged: {agreed}; no round {round_no}"
                break
            empty = nothing_left(context.ledger)
            if empty is not None:
                stopped = f"stopped at the budget cap ({empty}) before round {round_no}"
                break
            if current:
                workspace, spent, votes, why = await self._distill(task, current, round_no, context)
                cost, trace = cost + spent, trace + votes
                if why:
                    stopped = f"{why} while distilling round {round_no - 1}"
                    break
            fresh = await self._round(task, workspace, round_no, rollout)
            self.history.append(PDRRound(workspace=workspace, summaries=fresh))
            if not usable(fresh)[0] and usable(current)[0]:
                stopped = f"round {round_no} produced no answer; kept round {round_no - 1}'s"
                break
            current = fresh
        result = await self.final.aggregate(task, current, context)
        kept, _ = usable(current)
        excluded = [s.rollout_id for r in self.history for s in r.summaries if s.answer is None]
        done = f"{len(self.history)} of {self.rounds} rounds of {self.m}"
        if stopped:
            done += f" ({stopped})"
        return msgspec.structs.replace(
            result,
            rationale=(
                f"{done} (workspace k={self.k}, {len(kept)} answers in the round aggregated); "
                f"final {self.final.name}: {result.rationale}"
            ),
            trace=trace + result.trace,
            cost=cost + result.cost,
            excluded=excluded,
        )

    def _agreed(self, summaries: list[TrajectorySummary]) -> str:
        """``"its N answers agree"`` when the round converged, else ``""``."""
        kept, _ = usable(summaries)
        if not self.stop_on_agreement or len(kept) < 2:
            return ""
        keys = {answer_key(s.answer, self.normalize) for s in kept}
        return f"its {len(kept)} answers agree" if len(keys) == 1 else ""

    async def _distill(
        self,
        task: str,
        summaries: list[TrajectorySummary],
        round_no: int,
        context: AggregationContext,
    ) -> tuple[Workspace, Cost, list[VoteCast], str]:
        """The next workspace, what choosing it cost, its votes, and why the
        budget stopped it (``""``: it did not)."""
        kept, _ = usable(summaries)
        if len(kept) <= 1:
            return Workspace(round=round_no, k=self.k, summaries=kept[: self.k]), Cost(), [], ""
        if self.select == "rtv":
            _, bracket, cost = await self.selector.run_bracket(task, kept, context)
            order = bracket.ranking([s.rollout_id for s in kept])
            by_id = {s.rollout_id: s for s in kept}
            best = [by_id[rid] for rid in order[: self.k]]
            votes = [c for lvl in bracket.levels for c in lvl]
            why = bracket.stopped or ""
        else:
            best, cost, why = await self._by_scores(task, kept, context)
            votes = []
        return Workspace(round=round_no, k=self.k, summaries=best), cost, votes, why

    async def _by_scores(
        self, task: str, kept: list[TrajectorySummary], context: AggregationContext
    ) -> tuple[list[TrajectorySummary], Cost, str]:
        scores: list[float] = [0.0] * len(kept)
        costs: list[Cost] = [Cost()] * len(kept)
        stop = BudgetStop()
        unread: list[VerdictUnparseable] = []

        async def one(i: int) -> None:
            if stop.hit:
                return
            try:
                s = await self.judge.score(task, kept[i], context)
            except BudgetExceeded as exc:
                stop.note(exc)
                return
            except VerdictUnparseable as exc:  # unscored: ranks as 0
                unread.append(exc)
                costs[i] = exc.cost
                return
            scores[i], costs[i] = s.value, s.cost

        async with anyio.create_task_group() as tg:
            for i in range(len(kept)):
                tg.start_soon(one, i)
        if unread and len(unread) == len(kept):
            # No score could be read: reported; the round's order decides.
            await report_unreadable(context, unread[-1], "pdr (select = judge)")
        ranked = sorted(range(len(kept)), key=lambda i: (-scores[i], i))
        return [kept[i] for i in ranked[: self.k]], sum(costs, Cost()), stop.why()

    async def _round(
        self, task: str, workspace: Workspace, round_no: int, rollout: Rollout
    ) -> list[TrajectorySummary]:
        out: list[TrajectorySummary | None] = [None] * self.m

        async def one(i: int) -> None:
            async with self.limit:
                try:
                    out[i] = await rollout(task, workspace)
                except Exception as exc:  # a crashed rollout is recorded, not fatal
                    log.warning("pdr rollout failed", round=round_no, index=i, error=repr(exc))
                    out[i] = TrajectorySummary(
                        rollout_id=crashed_refinement_id(round_no, i),
                        answer=None,
                        failure_modes=[f"rollout crashed: {type(exc).__name__}: {exc}"],
                    )

        async with anyio.create_task_group() as tg:
            for i in range(self.m):
                tg.start_soon(one, i)
        return [s for s in out if s is not None]


__all__ = [
    "MAX_K",
    "MAX_M",
    "MAX_ROUNDS",
    "PDRRound",
    "ParallelDistillRefine",
    "Rollout",
    "Workspace",
]
