"""Admission to the memory bank: which candidates are worth storing.  Owns the
``AdmissionPolicy`` extension point and ``ScoredAdmission``, the heuristic
standing in for LTS's learned controller.

Pure computation (plus the rate limiter's clock); must not import agents,
tools or aggregators (runtime floor).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, Protocol, final

import msgspec
from pydantic import BaseModel, ConfigDict, Field, field_validator

_WORD = re.compile(r"[0-9A-Za-z_]+")

_STOPWORD_TEXT: Final = """
    a an and are as at be by for from has have in is it its of on or that the this
    to was were will with what which who how why when where do does did not no yes
    you your we our i me my he she they them their there here then than so if but
    into out up down can could would should may might must shall about over under
    again
    """
#: Words that match everything and rank nothing.
STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())


def tokens(text: str) -> set[str]:
    """Lower-cased informative word tokens of ``text`` (stopwords dropped)."""
    return {w for t in _WORD.findall(text) if (w := t.lower()) not in STOPWORDS}


def jaccard(a: set[str], b: set[str]) -> float:
    """Token Jaccard similarity (0 when both are empty)."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """Something a rollout offers to the bank."""

    key: str
    value: str
    rollout_id: str = ""
    step: int = -1
    verified: bool = False
    """The value is a successful tool result (not the model's own claim)."""
    claim: str = ""
    """What the value answers (the tool call): values of one claim are
    versions of each other, not duplicates; ``""`` for a note."""
    confirmed: bool = False
    """A verifying tool's result: shared without waiting for other rollouts."""


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """An admission decision: whether to store, the score to store with, why."""

    admitted: bool
    score: float
    reason: str
    novelty: float = 1.0


class AdmissionPolicy(Protocol):
    """Decides whether a candidate is stored.  ``neighbours``: keys of the
    most similar items already in the bank (best first, maybe empty)."""

    def decide(self, candidate: Candidate, neighbours: Sequence[str]) -> Admission: ...


class AdmissionConfig(BaseModel):
    """Gates, weights and threshold of ``ScoredAdmission`` (``memory_admission``
    in the runtime's configuration)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    w_novelty: float = Field(default=0.35, ge=0.0)
    """Weight of novelty (1 - max key similarity to stored items)."""
    w_verified: float = Field(default=0.3, ge=0.0)
    """Weight of being a verified tool result (not the model's own claim)."""
    w_information: float = Field(default=0.25, ge=0.0)
    """Weight of information: distinct informative words in the value, up to
    ``informative_words``."""
    w_length: float = Field(default=0.1, ge=0.0)
    """Weight of a value length inside ``[min_chars, max_chars]``."""
    threshold: float = Field(default=0.65, ge=0.0)
    """Least score admitted.  With the default weights a verified result
    passes when it is no near-duplicate and says something; a model's own
    claim needs novelty above about 0.86 and full information."""
    min_novelty: float = Field(default=0.25, ge=0.0, le=1.0)
    """Below this novelty a candidate is a near-duplicate and rejected."""
    informative_words: int = Field(default=6, ge=1)
    """Distinct informative words (stopwords dropped) that count as full information."""
    min_information: float = Field(default=0.3, ge=0.0, le=1.0)
    """Below this information a value says too little and is rejected."""
    min_text_share: float = Field(default=0.9, ge=0.0, le=1.0)
    """Least share of printable characters; below it the value is not text."""
    reject_patterns: list[str] = Field(
        default_factory=lambda: [
            r"^\W*(error|exception|traceback|failed|failure)\b",
            r"^\W*(no results?|not found|nothing found|none|null|n/a)\W*$",
        ]
    )
    """Regular expressions (case-insensitive) a value must not match: failures
    and empty answers that a successful tool call can still return."""
    min_chars: int = Field(default=8, ge=1)
    """Values shorter than this score lower on length (empty ones are rejected)."""
    max_chars: int = Field(default=8000, ge=1)
    """Values longer than this score lower on length."""
    max_per_window: int = Field(default=20, ge=1)
    """Most admissions per rollout within ``window_s``."""
    window_s: float = Field(default=60.0, gt=0.0)
    """The rate limit's sliding window, seconds."""
    corroborate: int = Field(default=2, ge=1)
    """Rollouts that must get the same result of the same tool call before
    the other rollouts see it (1: the first result is shared at once, and a
    wrong one spreads).  Until then it is kept, with its sources, but not
    shown; a different result of the same call is kept as another version."""
    verifiers: list[str] = []
    """Tools whose successful results are confirmed facts (a test run, a
    checked lookup): shared at once, without corroboration."""

    recheck: bool = True
    """A call of a read-only tool (MCP ``readOnlyHint``) whose result the
    bank does not share yet is made twice at once (no model call): the
    second result is a source of its own, so with ``corroborate = 2`` two
    calls that agree share it at once, and two that disagree are kept as
    versions, neither shared.  Set false when a read-only call is costly."""

    @field_validator("reject_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"reject_patterns[{index}] {pattern!r}: {exc}") from None
        return patterns


@final
class ScoredAdmission:
    """A scored admission that can say no (LTS's admission controller as a
    heuristic).  Gates first, each a rejection with its reason: an empty key
    or value; a value that is not text (printable share under
    ``min_text_share``); a value matching a ``reject_patterns`` entry (an
    error or empty answer); a near-duplicate (novelty, 1 minus the highest
    token-Jaccard similarity to the neighbours' keys, under
    ``min_novelty``); too little information (under ``min_information``).
    Then ``score = w_novelty * novelty + w_verified * verified +
    w_information * information + w_length * length_fit``, admitted at
    ``threshold``: verified is 1 for a successful tool result, 0 for a
    model's own claim; information is the share of ``informative_words``
    distinct informative words in the value; length_fit is 1 inside
    ``[min_chars, max_chars]``.  Admissions are rate-limited per rollout
    (``max_per_window`` per ``window_s``).  The bank later raises the score
    of items rollouts fetch (use), and evicts the lowest scores first.  One
    instance serves all rollouts of a run."""

    def __init__(
        self,
        config: AdmissionConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or AdmissionConfig()
        self.clock = clock
        self._recent: dict[str, deque[float]] = {}
        self._reject = [re.compile(p, re.IGNORECASE) for p in self.config.reject_patterns]

    def length_fit(self, value: str) -> float:
        c, n = self.config, len(value)
        if n < c.min_chars:
            return n / c.min_chars
        if n > c.max_chars:
            return c.max_chars / n
        return 1.0

    def information(self, value: str) -> float:
        """Distinct informative words of ``value`` over ``informative_words``, capped at 1."""
        return min(len(tokens(value)) / self.config.informative_words, 1.0)

    @staticmethod
    def text_share(value: str) -> float:
        """Share of printable characters (whitespace counts as printable)."""
        if not value:
            return 1.0
        return sum(ch.isprintable() or ch.isspace() for ch in value) / len(value)

    def refusal(self, key: str, value: str) -> str | None:
        """Why the value cannot be stored whatever its score (``None``: it can)."""
        c = self.config
        if not key.strip() or not value:
            return "empty key or value"
        if (share := self.text_share(value)) < c.min_text_share:
            return f"not text ({share:.0%} printable < {c.min_text_share:.0%})"
        failed = next((p for p in self._reject if p.search(value)), None)
        if failed is not None:
            return f"value looks like a failure or an empty answer (matches {failed.pattern!r})"
        return None

    def _rate_limited(self, rollout_id: str) -> str | None:
        c = self.config
        now = self.clock()
        recent = self._recent.setdefault(rollout_id, deque())
        while recent and recent[0] <= now - c.window_s:
            recent.popleft()
        if len(recent) >= c.max_per_window:
            return (
                f"rate limit: {c.max_per_window} admissions per {c.window_s:g} s "
                f"for rollout {rollout_id!r}"
            )
        recent.append(now)
        return None

    def decide(self, candidate: Candidate, neighbours: Sequence[str]) -> Admission:
        c = self.config
        value = candidate.value.strip()
        refused = self.refusal(candidate.key, value)
        if refused is not None:
            return Admission(admitted=False, score=0.0, reason=refused)
        mine = tokens(candidate.key)
        similarity = max((jaccard(mine, tokens(n)) for n in neighbours), default=0.0)
        novelty = 1.0 - similarity
        information = self.information(value)
        score = (
            c.w_novelty * novelty
            + c.w_verified * float(candidate.verified)
            + c.w_information * information
            + c.w_length * self.length_fit(value)
        )
        reason: str | None
        if novelty < c.min_novelty:
            reason = f"near-duplicate (similarity {similarity:.2f} to a stored key)"
        elif information < c.min_information:
            reason = f"says too little (information {information:.2f} < {c.min_information:.2f})"
        elif score < c.threshold:
            kind = "verified result" if candidate.verified else "unverified claim"
            reason = (
                f"score {score:.2f} below threshold {c.threshold:.2f} ({kind}, "
                f"novelty {novelty:.2f}, information {information:.2f})"
            )
        else:
            reason = self._rate_limited(candidate.rollout_id)
        if reason is not None:
            return Admission(admitted=False, score=score, novelty=novelty, reason=reason)
        return Admission(admitted=True, score=score, novelty=novelty, reason="admitted")


__all__ = [
    "STOPWORDS",
    "Admission",
    "AdmissionConfig",
    "AdmissionPolicy",
    "Candidate",
    "ScoredAdmission",
    "jaccard",
    "tokens",
]
