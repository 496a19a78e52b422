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
from pydantic import BaseModel, ConfigDict, Field

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
    """Weights and thresholds of ``ScoredAdmission``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    w_novelty: float = Field(default=0.5, ge=0.0)
    """Weight of novelty (1 - max key similarity to stored items)."""
    w_verified: float = Field(default=0.4, ge=0.0)
    """Weight of being a verified tool result."""
    w_length: float = Field(default=0.1, ge=0.0)
    """Weight of a value length inside ``[min_chars, max_chars]``."""
    min_novelty: float = Field(default=0.25, ge=0.0, le=1.0)
    """Below this novelty a candidate is a near-duplicate and rejected."""
    threshold: float = Field(default=0.5, ge=0.0)
    """Least score admitted."""
    min_chars: int = Field(default=8, ge=1)
    """Values shorter than this score lower on length (empty ones are rejected)."""
    max_chars: int = Field(default=8000, ge=1)
    """Values longer than this score lower on length."""
    max_per_window: int = Field(default=20, ge=1)
    """Most admissions per rollout within ``window_s``."""
    window_s: float = Field(default=60.0, gt=0.0)
    """The rate limit's sliding window, seconds."""


@final
class ScoredAdmission:
    """``score = w_novelty * novelty + w_verified * verified + w_length *
    length_fit``, admitted at ``threshold``.  Novelty is 1 minus the highest
    token-Jaccard similarity to the neighbours' keys (below ``min_novelty``:
    rejected as a near-duplicate); verified is 1 for a successful tool
    result, 0 for a model's own claim; length_fit is 1 inside
    ``[min_chars, max_chars]`` (an empty value is rejected).  Admissions are
    rate-limited per rollout (``max_per_window`` per ``window_s``).  One
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

    def length_fit(self, value: str) -> float:
        c, n = self.config, len(value)
        if n < c.min_chars:
            return n / c.min_chars
        if n > c.max_chars:
            return c.max_chars / n
        return 1.0

    def decide(self, candidate: Candidate, neighbours: Sequence[str]) -> Admission:
        c = self.config
        if not candidate.key.strip() or not candidate.value.strip():
            return Admission(admitted=False, score=0.0, reason="empty key or value")
        mine = tokens(candidate.key)
        similarity = max((jaccard(mine, tokens(n)) for n in neighbours), default=0.0)
        novelty = 1.0 - similarity
        score = (
            c.w_novelty * novelty
            + c.w_verified * float(candidate.verified)
            + c.w_length * self.length_fit(candidate.value)
        )
        if novelty < c.min_novelty:
            return Admission(
                admitted=False,
                score=score,
                novelty=novelty,
                reason=f"near-duplicate (similarity {similarity:.2f} to a stored key)",
            )
        if score < c.threshold:
            return Admission(
                admitted=False,
                score=score,
                novelty=novelty,
                reason=f"score {score:.2f} below threshold {c.threshold:.2f}",
            )
        now = self.clock()
        recent = self._recent.setdefault(candidate.rollout_id, deque())
        while recent and recent[0] <= now - c.window_s:
            recent.popleft()
        if len(recent) >= c.max_per_window:
            return Admission(
                admitted=False,
                score=score,
                novelty=novelty,
                reason=f"rate limit: {c.max_per_window} admissions per {c.window_s:g} s "
                f"for rollout {candidate.rollout_id!r}",
            )
        recent.append(now)
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
