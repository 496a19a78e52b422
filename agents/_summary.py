"""Trajectory summaries: a finished rollout as its Re-TRAC sections, which
judges compare and later rollouts are seeded with.  Owns the ``Summarizer``
protocol, ``RuleBasedSummarizer``, ``ModelSummarizer`` and ``answer_text``
(the text after the last ``answer:`` marker).  A summary's answer is always
its rollout's own: a summarizer describes, it never answers.

May import protocols and the runtime floor; never aggregators or the roof.
"""

from __future__ import annotations

import re
from typing import Final, Protocol, final

import anyio
import msgspec

from agentrt.protocols._messages import AssistantMessage, SystemMessage, UserMessage
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.protocols._tools import ToolResult
from agentrt.protocols._trajectory import Fact, Trajectory, TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.observe._log import get_logger

log = get_logger(__name__)


class Summarizer(Protocol):
    """Turns a finished trajectory into its summary."""

    async def summarize(self, trajectory: Trajectory) -> TrajectorySummary:
        """The summary of ``trajectory`` (never raises on odd content)."""
        ...


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())  # then ``_fit``, inlined (this runs once a step)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_ANSWER_MARKER = re.compile(r"\b(?:final\s+)?answer\s*[:=]", re.I)


def answer_text(answer: str) -> str:
    """The text after the last ``answer:`` (``Final answer:``, ``answer =``)
    marker, to the end of its line; ``answer`` itself when there is none
    (or nothing follows it).

    >>> answer_text("answer: 7? No. Final answer: 42\\nbecause...")
    '42'
    """
    last = None
    for last in _ANSWER_MARKER.finditer(answer):  # noqa: B007 - the last one is wanted
        pass
    if last is None:
        return answer
    line = answer[last.end() :].strip().split("\n", 1)[0].strip()
    return line or answer


def _key(answer: str) -> str:
    """An answer as compared with text: the marked part, casefolded, one
    space between words, no trailing period."""
    return " ".join(answer_text(answer).casefold().split()).rstrip(".").strip()


_QUESTION = re.compile(r"[^.?!\n]*\?")
_HEDGE = re.compile(r"\b(?:not sure|unclear|unknown|might|maybe|perhaps|uncertain)\b", re.I)


@final
class RuleBasedSummarizer:
    """A summary read straight off the trajectory, no model: the answer is
    the final answer; facts are tool results (verified, with the step and
    call as evidence); failure modes come from tool and step errors and the
    stop reason; hypotheses from the assistant's text; uncertainties from
    unanswered questions.  The fallback, and what tests use.

    A tool result is a ``verified`` fact only when it contains the
    rollout's answer (``answer_text``): a result that merely exists is an
    observation, not evidence for the answer.

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
        failures: list[str] = []
        hypotheses: list[str] = []
        uncertainties: list[str] = []
        used: list[tuple[int, ToolResult]] = []  # the successful tool results, in order
        answer = trajectory.answer if trajectory.status == "finished" else None
        if answer is not None and not answer.strip():
            answer = None
        key = _key(answer) if answer is not None else ""
        for step in trajectory.steps:
            index = step.index
            if step.error:
                failures.append(_clip(f"step {index}: {step.error}", chars))
            reply = step.reply
            message = reply.choices[0].message if reply is not None and reply.choices else None
            # An empty text (a step of tool calls alone) has nothing to read.
            if isinstance(message, AssistantMessage) and (
                text := message.content or message.reasoning_content
            ):
                if message.tool_calls and text.strip():
                    hypotheses.append(_clip(f"step {index}: {text}", chars))
                _read_doubts(f"step {index}: ", text, chars, uncertainties)
            for result in step.tool_results:
                if result.is_error:
                    where = f"step {index}, {result.name} ({result.call_id})"
                    failures.append(_clip(f"{where} failed: {result.content}", chars))
                else:
                    used.append((index, result))
        # Only the last ``n`` facts and progress entries are kept: only those are built.
        facts: list[Fact] = []
        for index, result in used[-n:]:
            content = " ".join(result.content.split())
            facts.append(
                Fact(
                    claim=_fit(content, chars),
                    evidence=f"step {index}, {result.name} ({result.call_id})",
                    source_step=index,
                    # casefold neither makes nor removes whitespace: the
                    # spaced-out text casefolded is the casefolded one spaced out
                    verified=key in content.casefold() if key else False,
                )
            )
        if trajectory.status != "finished":
            failures.append(
                f"rollout {trajectory.status}: {trajectory.stop_reason or 'no reason recorded'}"
            )
        if answer is None:
            uncertainties.append("no final answer was reached")
        conclusions = [_clip(f"final answer: {answer}", chars)] if answer is not None else []
        return TrajectorySummary(
            rollout_id=trajectory.rollout_id,
            answer=answer,
            facts=facts,
            conclusions=conclusions,
            sources=_dedupe([f"step {i}, {r.name} ({r.call_id})" for i, r in used])[-n:],
            uncertainties=_dedupe(uncertainties)[:n],
            hypotheses=hypotheses[:n],
            progress=[_clip(f"step {i}: used {r.name}", chars) for i, r in used[-n:]],
            failure_modes=_dedupe(failures)[:n],
            cost=trajectory.cost,
        )


def _read_doubts(where: str, text: str, chars: int, uncertainties: list[str]) -> None:
    """The questions ``text`` asks, or else the whole text when it hedges."""
    for q in _QUESTION.findall(text):
        uncertainties.append(_clip(q.strip(), chars))
    if _HEDGE.search(text) and not _QUESTION.search(text):
        uncertainties.append(_clip(f"{where}{text}", chars))


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class _FactOut(msgspec.Struct, kw_only=True):
    claim: str
    evidence: str = ""
    source_step: int | None = None
    verified: bool = False


class _PartOut(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """What the model must produce for one part (validated by msgspec)."""

    answer_seen: str | None = None
    hypotheses: list[str] = []
    progress: list[str] = []
    facts: list[_FactOut] = []
    conclusions: list[str] = []
    sources: list[str] = []
    uncertainties: list[str] = []
    failure_modes: list[str] = []


_SUMMARY_PROMPT = """You summarize part {part} of {parts} of the record of one attempt at a \
task, for a judge who will not read the record. Describe; do not solve the task yourself. \
Reply with ONE JSON object and nothing else, with keys:
"hypotheses": the ideas or strategies the attempt tried;
"progress": what it established, in order;
"facts": [{"claim", "evidence", "source_step", "verified"}] - verified is true only when a \
tool result in step source_step shows the claim;
"conclusions": what it concluded and from which evidence;
"sources": where its evidence came from;
"uncertainties": open questions and gaps;
"failure_modes": errors, dead ends, loops;
"answer_seen": the final answer the attempt gave, if this part shows it, else null.
Short strings; under {limit} words in all."""

_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


def transcript(trajectory: Trajectory, *, item_chars: int = 2_000) -> list[str]:
    """The trajectory as text, one entry per step (and one for its end):
    the assistant's words and calls, the tool results (errors marked) and
    step errors, each piece clipped to ``item_chars``."""
    entries: list[str] = []
    for step in trajectory.steps:
        lines = [f"[step {step.index}]"]
        message = step.reply.choices[0].message if step.reply and step.reply.choices else None
        if isinstance(message, AssistantMessage):
            if message.reasoning_content:
                lines.append(f"reasoning: {_clip(message.reasoning_content, item_chars)}")
            if message.content:
                lines.append(f"assistant: {_clip(message.content, item_chars)}")
            lines.extend(
                f"call {c.function.name}({_clip(c.function.arguments, item_chars)})"
                for c in message.tool_calls
            )
        for result in step.tool_results:
            mark = " (error)" if result.is_error else ""
            lines.append(f"tool {result.name}{mark}: {_clip(result.content, item_chars)}")
        if step.error:
            lines.append(f"step error: {_clip(step.error, item_chars)}")
        entries.append("\n".join(lines))
    entries.append(
        f"[end] status: {trajectory.status} ({trajectory.stop_reason or 'no reason recorded'}); "
        f"final answer: {trajectory.answer if trajectory.status == 'finished' else None}"
    )
    return entries


def _chunks(entries: list[str], chunk_chars: int) -> list[str]:
    """``entries`` packed in order into chunks of at most ``chunk_chars``
    (an entry longer than that is a chunk of its own, clipped)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for whole in entries:
        entry = whole if len(whole) <= chunk_chars else whole[: chunk_chars - 1] + "…"
        if current and size + len(entry) + 2 > chunk_chars:
            chunks.append("\n\n".join(current))
            current, size = [], 0
        current.append(entry)
        size += len(entry) + 2
    if current:
        chunks.append("\n\n".join(current))
    return chunks


SUMMARY_MIN_TOKENS: Final = 128
"""The fewest completion tokens a run's model-summary call is asked with
when the budget is nearly spent (room for a short part: the answer seen and
a few facts); a call that cannot get them is refused, and its rollout keeps
its rule-based summary."""


@final
class ModelSummarizer:
    """Summaries written by a model from the whole trajectory: its
    ``transcript`` is cut into chunks of ``chunk_chars`` and each chunk is
    summarized by one bounded call into the Re-TRAC sections (hypotheses,
    progress, facts with evidence, conclusions, sources, uncertainties,
    failure modes) as JSON; the parts are merged in order (``max_items``
    per section).

    The summary's ``answer`` is the rollout's own, never the model's: the
    answer the model says it saw is checked against the rollout's (by
    ``answer_text``, case and spacing ignored), and a mismatch is recorded
    in ``uncertainties`` (the rollout's answer is kept; a rollout with no
    answer keeps none).  A fact stays ``verified`` only when its
    ``source_step`` has a successful tool result.

    Malformed output, a failed call or one the budget refuses falls back to
    ``fallback`` (and says so in ``failure_modes``).  ``backend``: give it
    a ``MeteredBackend`` on the run's ledger
    (``agentrt.runtime.models._metered``) so that every call is reserved and
    charged like every other; ``model``: the model to ask (``None``: the
    backend's first); ``max_tokens``: each part's length bound (what the
    ledger reserves); ``chunk_chars``: characters of transcript per call;
    ``timeout_s``: each call's deadline.

    A summary's ``cost`` is its rollout's plus these calls', for reading and
    for the tie rules that prefer cheap rollouts.  It is not a bill: with a
    metered backend the calls are on the run's ledger already, and a run's
    cost is its ledger's ``spent``; never add summary costs to it."""

    def __init__(
        self,
        backend: ModelBackend,
        *,
        model: str | None = None,
        max_tokens: int = 512,
        chunk_chars: int = 12_000,
        max_items: int = 8,
        timeout_s: float = 60.0,
        fallback: RuleBasedSummarizer | None = None,
    ) -> None:
        for key, value, low in (
            ("max_tokens", max_tokens, 1),
            ("chunk_chars", chunk_chars, 500),
            ("max_items", max_items, 1),
        ):
            if value < low:
                raise ConfigError(
                    f"{key} must be >= {low}, got {value}", where=f"ModelSummarizer.{key}"
                )
        self.backend = backend
        self.model = model
        self.max_tokens = max_tokens
        self.chunk_chars = chunk_chars
        self.max_items = max_items
        self.timeout_s = timeout_s
        self.fallback = fallback or RuleBasedSummarizer()
        self._decoder = msgspec.json.Decoder(_PartOut)

    def requests(self, trajectory: Trajectory) -> list[ModelRequest]:
        """One request per chunk of the trajectory's transcript."""
        chunks = _chunks(transcript(trajectory), self.chunk_chars)
        limit = str(max(32, self.max_tokens * 3 // 4))
        return [
            ModelRequest(
                messages=[
                    SystemMessage(
                        content=_SUMMARY_PROMPT.replace("{limit}", limit)
                        .replace("{part}", str(k + 1))
                        .replace("{parts}", str(len(chunks)))
                    ),
                    UserMessage(content=f"Task: {trajectory.task}\n\nRecord:\n{chunk}"),
                ],
                model=self.model,
                sampling=SamplingParams(temperature=0.0, max_tokens=self.max_tokens),
            )
            for k, chunk in enumerate(chunks)
        ]

    async def summarize(self, trajectory: Trajectory) -> TrajectorySummary:
        fallback = self.fallback.summarize_now(trajectory)
        requests = self.requests(trajectory)
        texts: list[str] = [""] * len(requests)
        cost = Cost()
        try:
            for k, request in enumerate(requests):
                with anyio.fail_after(self.timeout_s):
                    reply = await self.backend.complete(request)
                cost = cost + Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
                texts[k] = reply.choices[0].message.content or "" if reply.choices else ""
        except BudgetExceeded as exc:
            # The run's cap is reached: the rollout keeps its rule-based
            # summary (the parts already written are on the ledger).
            log.info("summary call refused by the budget", rollout=trajectory.rollout_id)
            noted = _noted(
                fallback, f"summary model call skipped: budget cap reached ({exc.limit})"
            )
            return msgspec.structs.replace(noted, cost=noted.cost + cost)
        except Exception as exc:  # a failed summary call must not lose the rollout
            log.warning("summary call failed", rollout=trajectory.rollout_id, error=repr(exc))
            noted = _noted(fallback, f"summary model call failed: {type(exc).__name__}")
            return msgspec.structs.replace(noted, cost=noted.cost + cost)
        parts = [self._parse(text) for text in texts]
        if any(part is None for part in parts):
            log.info("summary output malformed; using rule-based", rollout=trajectory.rollout_id)
            noted = _noted(fallback, "summary model output was malformed; rule-based summary")
            return msgspec.structs.replace(noted, cost=noted.cost + cost)
        return self._merge(trajectory, fallback, [p for p in parts if p is not None], cost)

    def _merge(
        self,
        trajectory: Trajectory,
        fallback: TrajectorySummary,
        parts: list[_PartOut],
        cost: Cost,
    ) -> TrajectorySummary:
        n = self.max_items
        answer = fallback.answer  # the rollout's own, whatever the model says
        uncertainties = _dedupe([u for p in parts for u in p.uncertainties])[:n]
        seen = [p.answer_seen for p in parts if p.answer_seen and p.answer_seen.strip()]
        for claimed in _dedupe(seen):
            if answer is None:
                uncertainties.append(
                    f"the summarizer read an answer {claimed!r}, but the rollout reached none"
                )
            elif _key(claimed) != _key(answer):
                uncertainties.append(
                    f"the summarizer read the answer as {claimed!r}; the rollout's own, "
                    f"{answer!r}, is kept"
                )
        tool_steps = {
            step.index
            for step in trajectory.steps
            if any(not r.is_error for r in step.tool_results)
        }
        facts = [
            Fact(
                claim=f.claim,
                evidence=f.evidence,
                source_step=f.source_step,
                verified=f.verified and f.source_step in tool_steps,
            )
            for p in parts
            for f in p.facts
        ]
        return TrajectorySummary(
            rollout_id=trajectory.rollout_id,
            answer=answer,
            facts=facts[:n],
            conclusions=_dedupe([c for p in parts for c in p.conclusions])[:n],
            sources=_dedupe([c for p in parts for c in p.sources])[:n],
            uncertainties=uncertainties,
            hypotheses=_dedupe([c for p in parts for c in p.hypotheses])[:n],
            progress=_dedupe([c for p in parts for c in p.progress])[:n] or fallback.progress,
            failure_modes=_dedupe([c for p in parts for c in p.failure_modes])[:n],
            cost=trajectory.cost + cost,
        )

    def _parse(self, text: str) -> _PartOut | None:
        match = _JSON_OBJECT.search(text)
        if match is None:
            return None
        try:
            return self._decoder.decode(match.group(0))
        except msgspec.DecodeError:
            return None


def _noted(summary: TrajectorySummary, note: str) -> TrajectorySummary:
    return msgspec.structs.replace(summary, failure_modes=[*summary.failure_modes, note])


__all__ = [
    "SUMMARY_MIN_TOKENS",
    "ModelSummarizer",
    "RuleBasedSummarizer",
    "Summarizer",
    "answer_text",
    "transcript",
]
