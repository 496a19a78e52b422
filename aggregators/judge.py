"""Judges and best-of-N.

Owns the ``Judge`` protocol (a pointwise ``score`` of one summary and a
``compare`` picking the best of a group), ``ModelJudge`` (a model reads the
*summaries*, never raw traces, and answers with a number), ``SimulatedJudge``
(knows the ground truth and is right with probability ``q``: tests and the
scaling benchmark) and ``BestOfN`` (pointwise: highest score; pairwise: the
champion meets each challenger in turn).

May import protocols, the runtime floor's model backend protocol and
``agentrt.aggregators.base``/``vote``; nothing else.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, final

import anyio
import msgspec

from agentrt.agents.recording import EventEmitter
from agentrt.aggregators.base import AggregationResult, emit_all, empty_result, usable
from agentrt.aggregators.vote import Normalizer, default_normalizer
from agentrt.protocols import (
    Cost,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    Trajectory,
    TrajectorySummary,
    Usage,
    UserMessage,
    VoteCast,
)
from agentrt.runtime.errors import BackendError
from agentrt.runtime.log import get_logger
from agentrt.runtime.models.base import ModelBackend


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """A group comparison: the index of the best candidate (``None``: the
    judge abstained, e.g. its output did not parse) and what it cost."""

    winner: int | None
    cost: Cost = Cost()


class Score(msgspec.Struct, frozen=True, kw_only=True):
    """A pointwise score in [0, 1] and what it cost."""

    value: float
    cost: Cost = Cost()


class Judge(Protocol):
    """Reads summaries and says which is best supported."""

    async def score(self, task: str, summary: TrajectorySummary) -> Score:
        """How likely ``summary``'s answer is right, in [0, 1]."""
        ...

    async def compare(self, task: str, candidates: Sequence[TrajectorySummary]) -> Verdict:
        """Which of ``candidates`` (two or more) is best."""
        ...


def render_summary(summary: TrajectorySummary, *, item_chars: int = 200) -> str:
    """A summary as the compact text a judge reads."""

    def clip(text: str) -> str:
        return text if len(text) <= item_chars else text[: item_chars - 1] + "…"

    lines = [f"answer: {summary.answer if summary.answer is not None else 'None'}"]
    for f in summary.facts:
        mark = "verified" if f.verified else "unverified"
        lines.append(f"fact ({mark}; {f.evidence}): {clip(f.claim)}")
    for title, items in (
        ("conclusion", summary.conclusions),
        ("uncertainty", summary.uncertainties),
        ("hypothesis", summary.hypotheses),
        ("failure", summary.failure_modes),
    ):
        lines.extend(f"{title}: {clip(i)}" for i in items)
    return "\n".join(lines)


_JUDGE_SYSTEM = (
    "You judge attempts at a task from their summaries. Tool-verified facts are "
    "evidence; an attempt's own reasoning is not. Count evidence, not attempts."
)
_INT = re.compile(r"-?\d+")


@final
class ModelJudge:
    """A judge backed by one model call per score / comparison.

    ``temperature`` > 0 makes repeated votes (RTV's V) differ."""

    def __init__(
        self,
        backend: ModelBackend,
        *,
        model: str | None = None,
        temperature: float = 0.7,
        max_tokens: int = 16,
        timeout_s: float = 60.0,
    ) -> None:
        self.backend = backend
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    async def _ask(self, user: str) -> tuple[str, Cost]:
        request = ModelRequest(
            messages=[SystemMessage(content=_JUDGE_SYSTEM), UserMessage(content=user)],
            model=self.model,
            sampling=SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens),
        )
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await self.backend.complete(request)
        except (TimeoutError, BackendError) as error:
            # One failed judgement must not sink an aggregation over rollouts
            # that already ran: it counts as an abstention (compare) or a
            # zero score (score), and the log says why.
            get_logger(__name__).warning(
                "judge_call_failed", backend=self.backend.name, error=str(error)
            )
            return "", Cost()
        text = reply.choices[0].message.content or "" if reply.choices else ""
        return text, Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)

    async def score(self, task: str, summary: TrajectorySummary) -> Score:
        text, cost = await self._ask(
            f"Task: {task}\n\nAttempt:\n{render_summary(summary)}\n\n"
            "How likely is this answer correct? Reply with one integer from 0 to 10."
        )
        found = _INT.search(text)
        value = min(10, max(0, int(found.group()))) / 10 if found else 0.0
        return Score(value=value, cost=cost)

    async def compare(self, task: str, candidates: Sequence[TrajectorySummary]) -> Verdict:
        blocks = "\n\n".join(
            f"Attempt {i + 1}:\n{render_summary(s)}" for i, s in enumerate(candidates)
        )
        text, cost = await self._ask(
            f"Task: {task}\n\n{blocks}\n\nWhich attempt's answer is best supported? "
            f"Reply with one integer from 1 to {len(candidates)}."
        )
        found = _INT.search(text)
        pick = int(found.group()) - 1 if found else -1
        return Verdict(winner=pick if 0 <= pick < len(candidates) else None, cost=cost)


@final
class SimulatedJudge:
    """A judge with known accuracy: given candidates of which some are right
    (their normalized answer equals ``truth``) and some wrong, it picks a
    right one with probability ``q`` (else a wrong one); among candidates all
    right or all wrong it picks uniformly.  ``score`` is 1 for a right answer
    with probability ``q`` (0 for a wrong one with probability ``q``).

    ``tokens_per_call`` is the usage each call reports; ``delay_s`` a
    latency, to observe concurrency (``max_in_flight``)."""

    def __init__(
        self,
        truth: str,
        q: float,
        *,
        seed: int = 0,
        normalize: Normalizer = default_normalizer,
        tokens_per_call: int = 200,
        delay_s: float = 0.0,
    ) -> None:
        self.truth = normalize(truth)
        self.q = q
        self.normalize = normalize
        self.rng = random.Random(seed)
        self.tokens_per_call = tokens_per_call
        self.delay_s = delay_s
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def _right(self, s: TrajectorySummary) -> bool:
        return s.answer is not None and self.normalize(s.answer) == self.truth

    async def _call(self) -> Cost:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        usage = Usage(prompt_tokens=self.tokens_per_call - 4, completion_tokens=4)
        return Cost(usage=usage, model_calls=1)

    async def score(self, task: str, summary: TrajectorySummary) -> Score:
        cost = await self._call()
        honest = self.rng.random() < self.q
        value = 1.0 if self._right(summary) == honest else 0.0
        return Score(value=value, cost=cost)

    async def compare(self, task: str, candidates: Sequence[TrajectorySummary]) -> Verdict:
        cost = await self._call()
        right = [i for i, s in enumerate(candidates) if self._right(s)]
        wrong = [i for i in range(len(candidates)) if i not in right]
        if right and wrong:
            pool = right if self.rng.random() < self.q else wrong
        else:
            pool = list(range(len(candidates)))
        return Verdict(winner=self.rng.choice(pool), cost=cost)


@final
class BestOfN:
    """Best-of-N by a judge: ``pointwise`` scores every summary (in
    parallel) and keeps the highest (first on a tie); ``pairwise`` lets the
    champion meet each challenger in input order."""

    name = "best_of_n"

    def __init__(self, judge: Judge, *, mode: Literal["pointwise", "pairwise"] = "pointwise"):
        self.judge = judge
        self.mode = mode

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
        trace: list[VoteCast] = []
        cost = Cost()
        if self.mode == "pointwise":
            scores: list[Score | None] = [None] * len(kept)

            async def one(i: int) -> None:
                scores[i] = await self.judge.score(task, kept[i])

            async with anyio.create_task_group() as tg:
                for i in range(len(kept)):
                    tg.start_soon(one, i)
            values = [s.value if s else 0.0 for s in scores]
            for s in scores:
                cost = cost + (s.cost if s else Cost())
            best = values.index(max(values))
            trace.append(
                VoteCast(
                    run_id="",
                    aggregator=self.name,
                    round=1,
                    candidates=[s.rollout_id for s in kept],
                    winner=kept[best].rollout_id,
                    votes={s.rollout_id: round(v * 100) for s, v in zip(kept, values, strict=True)},
                )
            )
            why = f"highest judge score {values[best]:.2f} of {len(kept)}"
        else:
            champion = kept[0]
            for round_no, challenger in enumerate(kept[1:], start=1):
                pair = [champion.rollout_id, challenger.rollout_id]
                verdict = await self.judge.compare(task, [champion, challenger])
                cost = cost + verdict.cost
                if verdict.winner == 1:
                    champion = challenger
                trace.append(
                    VoteCast(
                        run_id="",
                        aggregator=self.name,
                        round=round_no,
                        candidates=pair,
                        winner=champion.rollout_id,
                    )
                )
            best = kept.index(champion)
            why = f"won {len(kept) - 1} pairwise comparisons as champion or challenger"
        trace = await emit_all(events, trace, run_id=run_id)
        return AggregationResult(
            answer=kept[best].answer,
            winner=kept[best].rollout_id,
            rationale=why,
            trace=trace,
            cost=cost,
            excluded=excluded,
        )


__all__ = ["BestOfN", "Judge", "ModelJudge", "Score", "SimulatedJudge", "Verdict", "render_summary"]
