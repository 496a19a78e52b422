"""Trajectory summaries: a finished rollout as its Re-TRAC sections, which
judges compare and later rollouts are seeded with.  Owns the ``Summarizer``
protocol, ``RuleBasedSummarizer`` and ``ModelSummarizer``.

May import protocols and the runtime floor; never aggregators or the roof.
"""

from __future__ import annotations

import re
from typing import Protocol, final

import anyio
import msgspec

from agentrt.protocols import (
    AssistantMessage,
    Cost,
    Fact,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    Trajectory,
    TrajectorySummary,
    UserMessage,
)
from agentrt.runtime.errors import BudgetExceeded
from agentrt.runtime.log import get_logger
from agentrt.runtime.models.base import ModelBackend

log = get_logger(__name__)


class Summarizer(Protocol):
    """Turns a finished trajectory into its summary."""

    async def summarize(self, trajectory: Trajectory) -> TrajectorySummary:
        """The summary of ``trajectory`` (never raises on odd content)."""
        ...


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_QUESTION = re.compile(r"[^.?!\n]*\?")
_HEDGE = re.compile(r"\b(?:not sure|unclear|unknown|might|maybe|perhaps|uncertain)\b", re.I)


@final
class RuleBasedSummarizer:
    """A summary read straight off the trajectory, no model: the answer is
    the final answer; facts are tool results (verified, with the step and
    call as evidence); failure modes come from tool and step errors and the
    stop reason; hypotheses from the assistant's text; uncertainties from
    unanswered questions.  The fallback, and what tests use.

    ``max_items``: entries kept per section; ``item_chars``: characters kept
    per entry."""

    def __init__(self, *, max_items: int = 8, item_chars: int = 200) -> None:
        self.max_items = max_items
        self.item_chars = item_chars

    async def summarize(self, trajectory: Trajectory) -> TrajectorySummary:
        return self.summarize_now(trajectory)

    def summarize_now(self, trajectory: Trajectory) -> TrajectorySummary:
        """The same summary, synchronously (no I/O involved)."""
        n, chars = self.max_items, self.item_chars
        facts: list[Fact] = []
        failures: list[str] = []
        hypotheses: list[str] = []
        uncertainties: list[str] = []
        sources: list[str] = []
        progress: list[str] = []
        for step in trajectory.steps:
            if step.error:
                failures.append(_clip(f"step {step.index}: {step.error}", chars))
            message = step.reply.choices[0].message if step.reply and step.reply.choices else None
            if isinstance(message, AssistantMessage):
                text = message.content or message.reasoning_content or ""
                if text.strip() and message.tool_calls:
                    hypotheses.append(_clip(f"step {step.index}: {text}", chars))
                for q in _QUESTION.findall(text):
                    uncertainties.append(_clip(q.strip(), chars))
                if _HEDGE.search(text) and not _QUESTION.search(text):
                    uncertainties.append(_clip(f"step {step.index}: {text}", chars))
            for result in step.tool_results:
                where = f"step {step.index}, {result.name} ({result.call_id})"
                if result.is_error:
                    failures.append(_clip(f"{where} failed: {result.content}", chars))
                    continue
                sources.append(where)
                facts.append(
                    Fact(
                        claim=_clip(result.content, chars),
                        evidence=where,
                        source_step=step.index,
                        verified=True,
                    )
                )
                progress.append(_clip(f"step {step.index}: used {result.name}", chars))
        if trajectory.status != "finished":
            failures.append(
                f"rollout {trajectory.status}: {trajectory.stop_reason or 'no reason recorded'}"
            )
        answer = trajectory.answer if trajectory.status == "finished" else None
        if answer is not None and not answer.strip():
            answer = None
        if answer is None:
            uncertainties.append("no final answer was reached")
        conclusions = [_clip(f"final answer: {answer}", chars)] if answer is not None else []
        return TrajectorySummary(
            rollout_id=trajectory.rollout_id,
            answer=answer,
            facts=facts[-n:],
            conclusions=conclusions,
            sources=_dedupe(sources)[-n:],
            uncertainties=_dedupe(uncertainties)[:n],
            hypotheses=hypotheses[:n],
            progress=progress[-n:],
            failure_modes=_dedupe(failures)[:n],
            cost=trajectory.cost,
        )


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class _FactOut(msgspec.Struct, kw_only=True):
    claim: str
    evidence: str = ""
    source_step: int | None = None
    verified: bool = False


class _SummaryOut(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """What the model must produce (validated by msgspec)."""

    answer: str | None
    facts: list[_FactOut] = []
    conclusions: list[str] = []
    sources: list[str] = []
    uncertainties: list[str] = []
    hypotheses: list[str] = []
    failure_modes: list[str] = []


_SUMMARY_PROMPT = """You summarize one finished attempt at a task for a judge who will not \
read the attempt. Reply with ONE JSON object and nothing else, with keys:
"answer": the attempt's final answer, or null if it reached none;
"facts": [{"claim", "evidence", "source_step", "verified"}] - verified is true only when a \
tool result shows it;
"conclusions", "sources", "uncertainties", "hypotheses", "failure_modes": lists of short strings.
Keep it under {limit} words."""

_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


@final
class ModelSummarizer:
    """Summaries written by one bounded model call as JSON, validated;
    malformed output, a failed call or one the budget refuses falls back to
    ``fallback`` (and says so in ``failure_modes``).

    ``backend``: give it a ``MeteredBackend`` on the run's ledger
    (``agentrt.runtime.models.metered``) so that the call is reserved and
    charged like every other; ``model``: the model to ask (``None``: the
    backend's first, by default a small one); ``max_tokens``: the summary's
    length bound (what the ledger reserves); ``timeout_s``: the call's
    deadline; ``fallback``: used when the call fails, is refused by the
    budget or its output does not validate.

    A summary's ``cost`` is its rollout's plus this call's, for reading and
    for the tie rules that prefer cheap rollouts.  It is not a bill: with a
    metered backend the call is on the run's ledger already, and a run's
    cost is its ledger's ``spent``; never add summary costs to it."""

    def __init__(
        self,
        backend: ModelBackend,
        *,
        model: str | None = None,
        max_tokens: int = 512,
        timeout_s: float = 60.0,
        fallback: RuleBasedSummarizer | None = None,
    ) -> None:
        self.backend = backend
        self.model = model
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.fallback = fallback or RuleBasedSummarizer()
        self._decoder = msgspec.json.Decoder(_SummaryOut)

    def _request(self, trajectory: Trajectory) -> ModelRequest:
        draft = self.fallback.summarize_now(trajectory)
        digest = msgspec.json.encode(draft).decode()
        system = _SUMMARY_PROMPT.replace("{limit}", str(max(32, self.max_tokens * 3 // 4)))
        user = (
            f"Task: {trajectory.task}\nStatus: {trajectory.status} "
            f"({trajectory.stop_reason or ''})\nFinal answer: {trajectory.answer}\n"
            f"Record of the attempt (JSON): {_clip(digest, self.max_tokens * 8)}"
        )
        return ModelRequest(
            messages=[SystemMessage(content=system), UserMessage(content=user)],
            model=self.model,
            sampling=SamplingParams(temperature=0.0, max_tokens=self.max_tokens),
        )

    async def summarize(self, trajectory: Trajectory) -> TrajectorySummary:
        fallback = self.fallback.summarize_now(trajectory)
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await self.backend.complete(self._request(trajectory))
        except BudgetExceeded as exc:
            # The run's cap is reached: the rollout keeps its rule-based
            # summary, and nothing was spent on the refused call.
            log.info("summary call refused by the budget", rollout=trajectory.rollout_id)
            return _noted(fallback, f"summary model call skipped: budget cap reached ({exc.limit})")
        except Exception as exc:  # a failed summary call must not lose the rollout
            log.warning("summary call failed", rollout=trajectory.rollout_id, error=repr(exc))
            return _noted(fallback, f"summary model call failed: {type(exc).__name__}")
        text = reply.choices[0].message.content or "" if reply.choices else ""
        parsed = self._parse(text)
        call_cost = Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        if parsed is None:
            log.info("summary output malformed; using rule-based", rollout=trajectory.rollout_id)
            noted = _noted(fallback, "summary model output was malformed; rule-based summary")
            return msgspec.structs.replace(noted, cost=noted.cost + call_cost)
        return TrajectorySummary(
            rollout_id=trajectory.rollout_id,
            answer=parsed.answer if parsed.answer and parsed.answer.strip() else None,
            facts=[
                Fact(
                    claim=f.claim,
                    evidence=f.evidence,
                    source_step=f.source_step,
                    verified=f.verified,
                )
                for f in parsed.facts
            ],
            conclusions=parsed.conclusions,
            sources=parsed.sources,
            uncertainties=parsed.uncertainties,
            hypotheses=parsed.hypotheses,
            progress=fallback.progress,
            failure_modes=parsed.failure_modes,
            cost=trajectory.cost + call_cost,
        )

    def _parse(self, text: str) -> _SummaryOut | None:
        match = _JSON_OBJECT.search(text)
        if match is None:
            return None
        try:
            return self._decoder.decode(match.group(0))
        except msgspec.DecodeError:
            return None


def _noted(summary: TrajectorySummary, note: str) -> TrajectorySummary:
    return msgspec.structs.replace(summary, failure_modes=[*summary.failure_modes, note])


__all__ = ["ModelSummarizer", "RuleBasedSummarizer", "Summarizer"]
