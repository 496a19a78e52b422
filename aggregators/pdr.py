"""Parallel-Distill-Refine (PDR), agentic.

Owns ``Workspace`` (the bounded set of at most K summaries that conditions a
round's fresh rollouts, with the text they are seeded with) and
``ParallelDistillRefine``: R rounds of M rollouts run in parallel through a
caller-provided ``rollout(task, workspace) -> TrajectorySummary``; after each
round the K best summaries (by an RTV bracket's ranking, or by a judge's
pointwise scores) become the next workspace; a final aggregator (RTV by
default) picks the answer from the last round.  Context stays bounded by the
workspace, never by history.  A rollout that raises is recorded as a failed
summary and the round continues with the rest.

Used as an ``Aggregator`` it treats the given summaries as round 1 and runs
the remaining rounds; ``run(task)`` runs every round from an empty workspace.

May import protocols and the other aggregators; nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, final

import anyio
import msgspec

from agentrt.agents.recording import EventEmitter
from agentrt.aggregators.base import AggregationResult, Aggregator, usable
from agentrt.aggregators.judge import Judge, render_summary
from agentrt.aggregators.rtv import RecursiveTournament
from agentrt.protocols import Cost, Trajectory, TrajectorySummary, VoteCast
from agentrt.runtime.errors import ConfigError
from agentrt.runtime.log import get_logger

log = get_logger(__name__)

_CONTINUE = (
    "Earlier attempts at this task are summarized below. Do not trust them: "
    "their facts may be wrong and their answers unverified. Check what they "
    "claim with tools, and try strategies they did not."
)


class Workspace(msgspec.Struct, frozen=True, kw_only=True):
    """What conditions one round: at most ``k`` summaries of the round before."""

    round: int
    k: int
    summaries: list[TrajectorySummary] = []

    def render(self) -> str:
        """The seed text a rollout gets (empty for the first round)."""
        if not self.summaries:
            return ""
        blocks = "\n\n".join(
            f"Attempt {i + 1}:\n{render_summary(s)}" for i, s in enumerate(self.summaries)
        )
        return f"{_CONTINUE}\n\n{blocks}"


Rollout = Callable[[str, Workspace], Awaitable[TrajectorySummary]]
"""Runs one fresh rollout of ``task`` seeded with the workspace."""


class PDRRound(msgspec.Struct, frozen=True, kw_only=True):
    """One round: the workspace it started from and the summaries it made."""

    workspace: Workspace
    summaries: list[TrajectorySummary]


@final
class ParallelDistillRefine:
    """PDR (see the module docstring).  ``select``: ``rtv`` ranks a round by
    the level each summary reached in an RTV bracket (``g``, ``v``);
    ``judge`` by pointwise scores.  ``final``: the last step (default RTV
    with the same judge)."""

    name = "pdr"

    def __init__(
        self,
        rollout: Rollout,
        judge: Judge,
        *,
        rounds: int = 2,
        m: int = 8,
        k: int = 3,
        select: Literal["rtv", "judge"] = "rtv",
        g: int = 2,
        v: int = 4,
        final: Aggregator | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        for key, value, low in (("rounds", rounds, 1), ("m", m, 1), ("k", k, 1)):
            if value < low:
                raise ConfigError(f"{key} must be >= {low}, got {value}", where=f"pdr.{key}")
        if select not in ("rtv", "judge"):
            raise ConfigError(f"select must be 'rtv' or 'judge', got {select!r}", where="pdr")
        self.rollout, self.judge = rollout, judge
        self.rounds, self.m, self.k, self.select = rounds, m, k, select
        self.selector = RecursiveTournament(judge, g=g, v=v)
        self.final: Aggregator = final or RecursiveTournament(judge, g=g, v=v)
        self.limit = anyio.CapacityLimiter(max_concurrency or m)
        self.history: list[PDRRound] = []

    async def run(
        self, task: str, *, events: EventEmitter | None = None, run_id: str = ""
    ) -> AggregationResult:
        """Every round from an empty workspace, then the final aggregator."""
        return await self._rounds(task, [], events=events, run_id=run_id)

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        trajectories: Mapping[str, Trajectory] | None = None,
        events: EventEmitter | None = None,
        run_id: str = "",
    ) -> AggregationResult:
        """``summaries`` are round 1; the remaining rounds follow."""
        return await self._rounds(task, list(summaries), events=events, run_id=run_id)

    async def _rounds(
        self,
        task: str,
        first: list[TrajectorySummary],
        *,
        events: EventEmitter | None,
        run_id: str,
    ) -> AggregationResult:
        self.history = []
        workspace = Workspace(round=1, k=self.k)
        cost = Cost()
        trace: list[VoteCast] = []
        current = first
        start = 1
        if first:
            self.history.append(PDRRound(workspace=workspace, summaries=first))
            start = 2
        for round_no in range(start, self.rounds + 1):
            if current:
                workspace, spent, votes = await self._distill(
                    task, current, round_no, events=events, run_id=run_id
                )
                cost, trace = cost + spent, trace + votes
            current = await self._round(task, workspace, round_no)
            self.history.append(PDRRound(workspace=workspace, summaries=current))
        result = await self.final.aggregate(task, current, events=events, run_id=run_id)
        kept, _ = usable(current)
        excluded = [s.rollout_id for r in self.history for s in r.summaries if s.answer is None]
        return msgspec.structs.replace(
            result,
            rationale=(
                f"{self.rounds} rounds of {self.m} (workspace k={self.k}, {len(kept)} answers "
                f"in the last round); final {self.final.name}: {result.rationale}"
            ),
            trace=trace + result.trace,
            cost=cost + result.cost,
            excluded=excluded,
        )

    async def _distill(
        self,
        task: str,
        summaries: list[TrajectorySummary],
        round_no: int,
        *,
        events: EventEmitter | None,
        run_id: str,
    ) -> tuple[Workspace, Cost, list[VoteCast]]:
        kept, _ = usable(summaries)
        if len(kept) <= 1:
            return Workspace(round=round_no, k=self.k, summaries=kept[: self.k]), Cost(), []
        if self.select == "rtv":
            _, bracket, cost = await self.selector.run_bracket(
                task, kept, events=events, run_id=run_id
            )
            order = bracket.ranking([s.rollout_id for s in kept])
            by_id = {s.rollout_id: s for s in kept}
            best = [by_id[rid] for rid in order[: self.k]]
            votes = [c for lvl in bracket.levels for c in lvl]
        else:
            scores: list[float] = [0.0] * len(kept)
            costs: list[Cost] = [Cost()] * len(kept)

            async def one(i: int) -> None:
                s = await self.judge.score(task, kept[i])
                scores[i], costs[i] = s.value, s.cost

            async with anyio.create_task_group() as tg:
                for i in range(len(kept)):
                    tg.start_soon(one, i)
            ranked = sorted(range(len(kept)), key=lambda i: (-scores[i], i))
            best = [kept[i] for i in ranked[: self.k]]
            cost = sum(costs, Cost())
            votes = []
        return Workspace(round=round_no, k=self.k, summaries=best), cost, votes

    async def _round(
        self, task: str, workspace: Workspace, round_no: int
    ) -> list[TrajectorySummary]:
        out: list[TrajectorySummary | None] = [None] * self.m

        async def one(i: int) -> None:
            async with self.limit:
                try:
                    out[i] = await self.rollout(task, workspace)
                except Exception as exc:  # a crashed rollout is recorded, not fatal
                    log.warning("pdr rollout failed", round=round_no, index=i, error=repr(exc))
                    out[i] = TrajectorySummary(
                        rollout_id=f"pdr-r{round_no}-{i}",
                        answer=None,
                        failure_modes=[f"rollout crashed: {type(exc).__name__}: {exc}"],
                    )

        async with anyio.create_task_group() as tg:
            for i in range(self.m):
                tg.start_soon(one, i)
        return [s for s in out if s is not None]


__all__ = ["PDRRound", "ParallelDistillRefine", "Rollout", "Workspace"]
