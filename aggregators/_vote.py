"""Majority and weighted vote over summaries, with pluggable normalization.

Owns the answer normalizers (``strip``, ``casefold``, ``number``
canonicalization, ``ANSWER:`` extraction, and ``chain`` to compose them),
``answer_key`` (the one grouping of answers: votes and the engine's early stop
both use it), ``MajorityVote`` and ``WeightedVote`` (a weight per summary:
verified facts, cost, or any callable).  No model calls.

May import protocols, ``agentrt.agents._recording``/``summary`` and
``agentrt.aggregators._aggregator``; nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import final

from agentrt.agents._summary import answer_text
from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    emit_all,
    empty_result,
    usable,
)
from agentrt.protocols._events import VoteCast
from agentrt.protocols._trajectory import TrajectorySummary

Normalizer = Callable[[str], str]
"""Maps an answer to the key answers are grouped by."""

_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")


def strip(answer: str) -> str:
    """Whitespace collapsed, trailing period removed."""
    return " ".join(answer.split()).rstrip(".").strip()


def casefold(answer: str) -> str:
    return answer.casefold()


def number(answer: str) -> str:
    """``"1,000.50"``, ``"1000.5"`` and ``"1.0005e3"`` all become ``"1000.5"``;
    anything that is not a number is returned unchanged."""
    text = answer.strip().rstrip(".").replace("$", "").strip()
    if not text or not _NUMBER.match(text) or not any(c.isdigit() for c in text):
        return answer
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return answer
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")


def extract_answer(answer: str) -> str:
    """The text after the last ``ANSWER:`` (or ``Final answer:``) marker, to
    the end of its line, if there is one, else the answer itself
    (``agentrt.agents._summary.answer_text``)."""
    return answer_text(answer)


def chain(*steps: Normalizer) -> Normalizer:
    """Apply ``steps`` left to right (one step: that step itself)."""
    if len(steps) == 1:
        return steps[0]

    def normalize(answer: str) -> str:
        for step in steps:
            answer = step(answer)
        return answer

    return normalize


#: The default: extract, strip, casefold, canonicalize numbers.
default_normalizer: Normalizer = chain(extract_answer, strip, casefold, number)

NORMALIZERS: dict[str, Normalizer] = {
    "strip": strip,
    "casefold": casefold,
    "number": number,
    "extract": extract_answer,
    "default": default_normalizer,
    "none": lambda a: a,
}


def answer_key(answer: str | None, normalize: Normalizer = default_normalizer) -> str | None:
    """The key ``answer`` is grouped by in a vote: ``normalize(answer)``, or
    ``None`` when there is no answer (``None``, empty or only whitespace: it
    casts no vote, as ``usable`` leaves it out).

    The one grouping of answers: ``MajorityVote``/``WeightedVote`` tally by
    it, and the engine's early stop must count by it with the vote's own
    ``normalize``, so that stopping early never changes which group wins.

    >>> answer_key("ANSWER: Paris.") == answer_key(" paris") == "paris"
    True
    >>> answer_key("  ") is None
    True
    """
    if answer is None or not answer.strip():
        return None
    return normalize(answer)


def voted_answer(answer: str, normalize: Normalizer = default_normalizer) -> str:
    """The part of ``answer`` a vote compared: the text after its last
    ``ANSWER:`` marker (``extract_answer``) when ``normalize`` groups it
    with the whole answer (the vote's normalizer extracts), else the whole
    ``answer`` (a normalizer that does not extract compared all of it).

    >>> voted_answer("6 x 7 is 42.\\nANSWER: 42")
    '42'
    >>> voted_answer("ANSWER: 42", NORMALIZERS["none"])
    'ANSWER: 42'
    """
    if extract_answer(answer) is answer:
        return answer  # no marker: nothing was extracted (a patch keeps its last newline)
    extracted = extract_answer(answer).strip()
    return extracted if extracted and normalize(extracted) == normalize(answer) else answer


def verified_facts_weight(summary: TrajectorySummary) -> float:
    """A vote's weight, in [0.5, 2.5]: 1, plus 0.75 per verified fact (a tool
    result that supports the answer; at most two count, so a rollout cannot
    outvote others by calling tools), minus 0.5 when the rollout recorded
    failures.  Facts that are mere tool output are not verified (see
    ``RuleBasedSummarizer``), so calling tools earns no weight by itself."""
    verified = sum(1 for f in summary.facts if f.verified)
    return 1.0 + 0.75 * min(verified, 2) - (0.5 if summary.failure_modes else 0.0)


def _tally(
    kept: Sequence[TrajectorySummary],
    normalize: Normalizer,
    weight: Callable[[TrajectorySummary], float],
) -> tuple[dict[str, float], dict[str, list[TrajectorySummary]]]:
    totals: dict[str, float] = {}
    members: dict[str, list[TrajectorySummary]] = {}
    for s in kept:
        key = answer_key(s.answer, normalize)
        if key is None:  # never for ``usable`` summaries; narrows the type
            continue
        totals[key] = totals.get(key, 0.0) + weight(s)
        members.setdefault(key, []).append(s)
    return totals, members


def plurality(
    candidates: Sequence[TrajectorySummary], normalize: Normalizer = default_normalizer
) -> tuple[TrajectorySummary, str]:
    """The first candidate of the most common normalized answer (first seen
    wins a tie; order ``candidates`` by preference), and a phrase saying so.
    ``candidates`` must not be empty."""
    totals, members = _tally(candidates, normalize, lambda _: 1.0)
    best = max(totals.values())
    key = next(k for k, v in totals.items() if v == best)
    return members[key][0], f"{best:g} of {len(candidates)} answers agree on {key!r}"


async def _vote(
    name: str,
    summaries: Sequence[TrajectorySummary],
    context: AggregationContext,
    *,
    normalize: Normalizer,
    weight: Callable[[TrajectorySummary], float],
) -> AggregationResult:
    kept, excluded = usable(summaries)
    if not kept:
        return empty_result(excluded, "no rollout produced an answer")
    totals, members = _tally(kept, normalize, weight)
    best = max(totals.values())
    # dicts keep insertion order: the first-seen answer wins a tie.
    key = next(k for k, v in totals.items() if v == best)
    tied = [k for k, v in totals.items() if v == best]
    chosen = members[key][0]
    vote = VoteCast(
        run_id="",
        aggregator=name,
        round=1,
        candidates=[s.rollout_id for s in kept],
        winner=chosen.rollout_id,
        votes={members[k][0].rollout_id: round(v) for k, v in totals.items()},
    )
    trace = await emit_all(context.events, [vote], run_id=context.run_id)
    why = f"{best:g} of {sum(totals.values()):g} votes for {key!r}"
    if len(tied) > 1:
        why += f" (tie among {len(tied)} answers; the first seen wins)"
    return AggregationResult(
        answer=chosen.answer,
        winner=chosen.rollout_id,
        rationale=why,
        trace=trace,
        excluded=excluded,
    )


@final
class MajorityVote:
    """The most frequent answer after normalization (one vote per rollout).

    Answers are grouped by ``answer_key(answer, normalize)``.  The answer
    returned is the original text of the first summary, in the order given
    (pass them in rollout order), of the winning group; a tie goes to the
    group seen first.  So the result is deterministic."""

    name = "majority"

    def __init__(self, normalize: Normalizer = default_normalizer) -> None:
        self.normalize = normalize

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        return await _vote(
            self.name, summaries, context, normalize=self.normalize, weight=lambda _: 1.0
        )


@final
class WeightedVote:
    """Each rollout's vote weighs ``weight(summary)`` (default: verified
    evidence, see ``verified_facts_weight``); grouping, the answer returned
    and ties as in ``MajorityVote``."""

    name = "weighted"

    def __init__(
        self,
        weight: Callable[[TrajectorySummary], float] = verified_facts_weight,
        normalize: Normalizer = default_normalizer,
    ) -> None:
        self.weight = weight
        self.normalize = normalize

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        return await _vote(
            self.name, summaries, context, normalize=self.normalize, weight=self.weight
        )


__all__ = [
    "NORMALIZERS",
    "MajorityVote",
    "Normalizer",
    "WeightedVote",
    "answer_key",
    "casefold",
    "chain",
    "default_normalizer",
    "extract_answer",
    "number",
    "plurality",
    "strip",
    "verified_facts_weight",
    "voted_answer",
]
