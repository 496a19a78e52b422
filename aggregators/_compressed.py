"""Compressed reasoning aggregation (ParallelMuse): ``CompressedReasoning``.

Each trajectory is compressed by a model call into a report (planning,
methods with the key tool results, final reasoning) from its whole record
(``agentrt.agents._summary.transcript``; the summary's text when the
trajectory is not at hand); one more call reads every report, each shown
with its rollout's own answer in a shuffled order, and names the
best-supported one.  N + 1 calls, all on the context's metered backend.

May import protocols, the runtime floor, ``agentrt.agents._summary`` and the
other aggregators; nothing else.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final, final

import anyio

from agentrt.agents._summary import transcript
from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    BudgetStop,
    check_range,
    emit_all,
    empty_result,
    usable,
)
from agentrt.aggregators._judge import report_unreadable
from agentrt.aggregators._verdict import VerdictUnparseable, cut_off, parse_verdict
from agentrt.aggregators._vote import plurality
from agentrt.aggregators._workspace import render_summary
from agentrt.protocols._events import VoteCast
from agentrt.protocols._messages import SystemMessage, UserMessage
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.protocols._trajectory import TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import BackendError, BudgetExceeded
from agentrt.runtime.observe._log import get_logger

log = get_logger(__name__)

#: Most characters per report (every report is in the picking prompt).
MAX_REPORT_CHARS: Final = 20_000
#: Most characters of one trajectory's record a compression call reads.
MAX_SOURCE_CHARS: Final = 400_000

_COMPRESS = """Compress one attempt at a task into a report for a reviewer who will not \
read the attempt. Use three sections:
Planning: what the attempt set out to do and the hypotheses it tried.
Methods: the key tool calls and what their results showed (keep exact values; \
say which results were errors).
Final reasoning: how it reached its answer from that evidence, and what stayed uncertain.
Do not solve the task yourself and do not change its answer. At most {words} words."""

_PICK = """Each report below compresses one attempt at the task, with the attempt's \
answer. Judge which answer is best supported by tool results (not by the attempt's own \
claims). Reason briefly, then end with the line 'VERDICT: <report number>'."""


@final
class CompressedReasoning:
    """ParallelMuse's compressed reasoning aggregation (see the module).

    ``model``: the model asked (``None``: the context's, else the
    backend's first); ``report_chars``: each report's bound in characters,
    100..20,000 (the compression call's ``max_tokens`` follows from it);
    ``source_chars``: characters of a trajectory's record one compression
    reads (its start and end when longer), 1,000..400,000; ``max_tokens``:
    the picking reply's bound (room to reason); ``timeout_s``: each call's
    deadline; ``seed``: the order reports are shown in.

    A compression that fails or is refused by the ledger leaves that
    rollout's summary text as its report (the rationale counts them);
    when the picking call is refused, fails or names no report, a
    plurality vote over the answers decides (an unreadable pick is also
    reported as a non-fatal ``ErrorRaised``).  Raises ``ConfigError``
    naming an option out of its bounds."""

    name = "compressed"

    def __init__(
        self,
        *,
        model: str | None = None,
        report_chars: int = 1_200,
        source_chars: int = 24_000,
        max_tokens: int = 1024,
        timeout_s: float = 120.0,
        seed: int = 0,
    ) -> None:
        check_range("compressed", "report_chars", report_chars, 100, MAX_REPORT_CHARS)
        check_range("compressed", "source_chars", source_chars, 1_000, MAX_SOURCE_CHARS)
        self.model = model
        self.report_chars = report_chars
        self.source_chars = source_chars
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.seed = seed

    def _source(self, summary: TrajectorySummary, context: AggregationContext) -> str:
        trajectory = context.trajectories.get(summary.rollout_id)
        text = (
            "\n\n".join(transcript(trajectory))
            if trajectory is not None
            else render_summary(summary)
        )
        if len(text) <= self.source_chars:
            return text
        half = self.source_chars // 2
        return (
            f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"
        )

    async def _compress(
        self,
        task: str,
        summary: TrajectorySummary,
        context: AggregationContext,
        stop: BudgetStop,
    ) -> tuple[str | None, Cost]:
        """The model's report of one trajectory (``None``: the call failed
        or was refused) and what it cost."""
        if stop.hit:
            return None, Cost()
        words = max(30, self.report_chars // 7)
        request = ModelRequest(
            messages=[
                SystemMessage(content=_COMPRESS.replace("{words}", str(words))),
                UserMessage(
                    content=f"Task: {task}\n\nRecord of the attempt:\n"
                    f"{self._source(summary, context)}\n\nIts final answer: {summary.answer}"
                ),
            ],
            model=self.model or context.model,
            sampling=SamplingParams(temperature=0.0, max_tokens=max(64, self.report_chars // 3)),
        )
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await context.backend.complete(request)
        except BudgetExceeded as exc:
            stop.note(exc)
            return None, Cost()
        except (TimeoutError, BackendError) as exc:
            log.warning("compression_failed", rollout=summary.rollout_id, error=str(exc))
            return None, Cost()
        cost = Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        text = (reply.choices[0].message.content or "").strip() if reply.choices else ""
        if not text:
            return None, cost
        clipped = text if len(text) <= self.report_chars else text[: self.report_chars - 1] + "…"
        return clipped, cost

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        stop = BudgetStop()
        made: list[tuple[str | None, Cost]] = [(None, Cost())] * len(kept)

        async def one(i: int) -> None:
            made[i] = await self._compress(task, kept[i], context, stop)

        async with anyio.create_task_group() as tg:
            for i in range(len(kept)):
                tg.start_soon(one, i)
        cost = sum((c for _, c in made), Cost())
        missing = sum(1 for report, _ in made if report is None)
        reports = [
            report if report is not None else render_summary(kept[i])[: self.report_chars]
            for i, (report, _) in enumerate(made)
        ]
        note = f" ({missing} reports are summaries: compression failed)" if missing else ""
        if stop.hit:
            chosen, agree = plurality(kept)
            why = f"{stop.why()} while compressing{note}; plurality: {agree}"
            return await self._result(kept, chosen, why, cost, excluded=excluded, context=context)
        order = list(range(len(kept)))
        random.Random(self.seed).shuffle(order)  # position bias: no rollout always first
        blocks = "\n\n".join(
            f"Report {j + 1}:\n{reports[i]}\nAnswer: {kept[i].answer}" for j, i in enumerate(order)
        )
        request = ModelRequest(
            messages=[
                SystemMessage(content=_PICK),
                UserMessage(content=f"Task: {task}\n\n{blocks}"),
            ],
            model=self.model or context.model,
            sampling=SamplingParams(temperature=0.0, max_tokens=self.max_tokens),
        )
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await context.backend.complete(request)
        except (BudgetExceeded, TimeoutError, BackendError) as exc:
            chosen, agree = plurality(kept)
            if isinstance(exc, BudgetExceeded):
                stop.note(exc)
                why = f"{stop.why()} before the picking call{note}; plurality: {agree}"
            else:
                why = f"the picking call failed ({exc}){note}; plurality: {agree}"
            return await self._result(kept, chosen, why, cost, excluded=excluded, context=context)
        cost = cost + Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        text = reply.choices[0].message.content or "" if reply.choices else ""
        finish = reply.choices[0].finish_reason if reply.choices else None
        # A reply cut off before it finished is no pick, whatever it says so far.
        shown = None if cut_off(text, finish) else parse_verdict(text, len(kept))
        if shown is None:
            model = self.model or context.model or context.backend.default_model
            error = VerdictUnparseable(
                f"no report named in {text[-200:]!r}", where=f"judge (model {model!r})", reply=text
            )
            unread = await report_unreadable(context, error, "compressed (picking call)")
            chosen, agree = plurality(kept)
            return await self._result(
                kept,
                chosen,
                f"{unread}{note}; plurality: {agree}",
                cost,
                excluded=excluded,
                context=context,
            )
        index = order[shown]
        why = (
            f"{len(kept)} model-written reports ({len(kept) + 1} calls){note}; "
            f"the picking call chose report {shown + 1} ({kept[index].rollout_id})"
        )
        return await self._result(kept, kept[index], why, cost, excluded=excluded, context=context)

    async def _result(
        self,
        kept: list[TrajectorySummary],
        chosen: TrajectorySummary,
        why: str,
        cost: Cost,
        *,
        excluded: list[str],
        context: AggregationContext,
    ) -> AggregationResult:
        vote = VoteCast(
            run_id="",
            aggregator=self.name,
            round=1,
            candidates=[s.rollout_id for s in kept],
            winner=chosen.rollout_id,
        )
        return AggregationResult(
            answer=chosen.answer,
            winner=chosen.rollout_id,
            rationale=why,
            trace=await emit_all(context.events, [vote], run_id=context.run_id),
            cost=cost,
            excluded=excluded,
        )


__all__ = ["MAX_REPORT_CHARS", "MAX_SOURCE_CHARS", "CompressedReasoning"]
