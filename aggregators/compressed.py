"""Compressed reasoning aggregation (ParallelMuse).

Owns ``compress`` (one trajectory summary as a report: planning -- the
hypotheses tried; methods -- the key tool results, verified ones first;
final reasoning -- conclusions, open uncertainties and the answer) and
``CompressedReasoning``: every report goes into one model call that names
the best-supported report.  One call in total, bounded by ``report_chars``
per report.

May import protocols, the runtime floor's model backend protocol and the
other aggregators; nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import final

import anyio

from agentrt.agents.recording import EventEmitter
from agentrt.aggregators.base import AggregationResult, emit_all, empty_result, usable
from agentrt.protocols import (
    Cost,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    Trajectory,
    TrajectorySummary,
    UserMessage,
    VoteCast,
)
from agentrt.runtime.models.base import ModelBackend


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
    """One call over every trajectory's report picks the answer."""

    name = "compressed"

    def __init__(
        self,
        backend: ModelBackend,
        *,
        model: str | None = None,
        report_chars: int = 1_200,
        max_tokens: int = 64,
        timeout_s: float = 120.0,
    ) -> None:
        self.backend = backend
        self.model = model
        self.report_chars = report_chars
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

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
            model=self.model,
            sampling=SamplingParams(temperature=0.0, max_tokens=self.max_tokens),
        )
        with anyio.fail_after(self.timeout_s):
            reply = await self.backend.complete(request)
        cost = Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        text = reply.choices[0].message.content or "" if reply.choices else ""
        found = _PICK.search(text)
        index = int(found.group(1) or found.group(2)) - 1 if found else -1
        if not 0 <= index < len(kept):
            # An unreadable pick: keep the first report's answer, and say so.
            index, why = 0, f"unreadable pick {text[:60]!r}; kept report 1"
        else:
            why = f"one call over {len(kept)} compressed reports picked report {index + 1}"
        chosen = kept[index]
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
            trace=await emit_all(events, [vote], run_id=run_id),
            cost=cost,
            excluded=excluded,
        )


__all__ = ["CompressedReasoning", "compress"]
