"""Compressed reasoning aggregation (ParallelMuse).

Owns ``compress`` (one trajectory summary as a report: planning -- the
hypotheses tried; methods -- the key tool results, verified ones first;
final reasoning -- conclusions, open uncertainties and the answer) and
``CompressedReasoning``: every report goes into one model call, on the
context's metered backend, that names the best-supported report.  One call
in total, bounded by ``report_chars`` per report; when the ledger refuses
it, a plurality vote over the reports' answers decides instead.

May import protocols, the runtime floor and the other aggregators; nothing
else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, final

import anyio

from agentrt.aggregators.base import (
    AggregationContext,
    AggregationResult,
    BudgetStop,
    emit_all,
    empty_result,
    usable,
)
from agentrt.aggregators.vote import plurality
from agentrt.protocols import (
    Cost,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    TrajectorySummary,
    UserMessage,
    VoteCast,
)
from agentrt.runtime.errors import BudgetExceeded, ConfigError

#: Most characters per report (every report is in the one prompt).
MAX_REPORT_CHARS: Final = 20_000


def compress(summary: TrajectorySummary, *, report_chars: int = 1_200) -> str:
    """The report of one trajectory, at most ``report_chars`` characters."""
    facts = sorted(summary.facts, key=lambda f: not f.verified)
    lines = ["Planning:"]
    lines += [f"- {h}" for h in summary.hypotheses[:3]] or ["- (none recorded)"]
    lines.append("Methods and key tool results:")
    lines += [
        f"- {'[verified] ' if f.verified else ''}{f.claim} ({f.evidence})" for f in facts[:5]
    ] or ["- (no tool results)"]
    lines.append("Final reasoning:")
    lines += [f"- {c}" for c in summary.conclusions[:3]]
    lines += [f"- open: {u}" for u in summary.uncertainties[:2]]
    lines += [f"- failure: {m}" for m in summary.failure_modes[:2]]
    lines.append(f"Answer: {summary.answer}")
    report = "\n".join(lines)
    return report if len(report) <= report_chars else report[: report_chars - 1] + "…"


_PICK = re.compile(r"report\s*#?\s*(\d+)|^\s*(\d+)\s*$", re.I | re.M)


@final
class CompressedReasoning:
    """One call over every trajectory's report picks the answer.  ``model``:
    the model asked (``None``: the context's, else the backend's first);
    ``report_chars``: characters per report, 100..20,000; ``max_tokens``:
    the reply's bound; ``timeout_s``: the call's deadline."""

    name = "compressed"

    def __init__(
        self,
        *,
        model: str | None = None,
        report_chars: int = 1_200,
        max_tokens: int = 64,
        timeout_s: float = 120.0,
    ) -> None:
        if not 100 <= report_chars <= MAX_REPORT_CHARS:
            raise ConfigError(
                f"report_chars must be >= 100 and <= {MAX_REPORT_CHARS}, got {report_chars}",
                where="compressed.report_chars",
            )
        self.model = model
        self.report_chars = report_chars
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        reports = "\n\n".join(
            f"Report {i + 1}:\n{compress(s, report_chars=self.report_chars)}"
            for i, s in enumerate(kept)
        )
        request = ModelRequest(
            messages=[
                SystemMessage(
                    content="Pick the report whose answer is best supported by its tool "
                    "results. Reply with 'Report <number>'."
                ),
                UserMessage(content=f"Task: {task}\n\n{reports}"),
            ],
            model=self.model or context.model,
            sampling=SamplingParams(temperature=0.0, max_tokens=self.max_tokens),
        )
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await context.backend.complete(request)
        except BudgetExceeded as exc:
            stop = BudgetStop()
            stop.note(exc)
            chosen, agree = plurality(kept)
            why = f"{stop.why()} before the one call; plurality: {agree}"
            return await self._result(
                kept, chosen, why=why, cost=Cost(), excluded=excluded, context=context
            )
        text = reply.choices[0].message.content or "" if reply.choices else ""
        found = _PICK.search(text)
        index = int(found.group(1) or found.group(2)) - 1 if found else -1
        if not 0 <= index < len(kept):
            # An unreadable pick: keep the first report's answer, and say so.
            index, why = 0, f"unreadable pick {text[:60]!r}; kept report 1"
        else:
            why = f"one call over {len(kept)} compressed reports picked report {index + 1}"
        cost = Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        return await self._result(
            kept, kept[index], why=why, cost=cost, excluded=excluded, context=context
        )

    async def _result(
        self,
        kept: list[TrajectorySummary],
        chosen: TrajectorySummary,
        *,
        why: str,
        cost: Cost,
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


__all__ = ["MAX_REPORT_CHARS", "CompressedReasoning", "compress"]
