"""ROUGE-L: longest-common-subsequence overlap between two token sequences.

Owns ``tokens`` (lower-cased word tokens), ``lcs_length`` and ``rouge_l``
(recall, precision and F1).  Written from the definition; no model, no I/O,
imports nothing of agentrt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

_WORD = re.compile(r"\w+", re.UNICODE)


class RougeL(msgspec.Struct, frozen=True):
    recall: float
    precision: float
    f1: float


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscore)."""
    return _WORD.findall(text.lower())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (O(len(a)·len(b)) time,
    O(min) memory)."""
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            current[j] = previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1])
        previous = current
    return previous[-1]


def rouge_l(reference: str, candidate: str) -> RougeL:
    """ROUGE-L of ``candidate`` against ``reference``: recall = LCS / |reference|,
    precision = LCS / |candidate|, F1 their harmonic mean.  For ranking steps
    by a query, the query is the reference (recall: how much of it a step
    covers)."""
    ref, cand = tokens(reference), tokens(candidate)
    if not ref or not cand:
        return RougeL(0.0, 0.0, 0.0)
    lcs = lcs_length(ref, cand)
    recall, precision = lcs / len(ref), lcs / len(cand)
    f1 = 0.0 if lcs == 0 else 2 * recall * precision / (recall + precision)
    return RougeL(recall, precision, f1)


__all__ = ["RougeL", "lcs_length", "rouge_l", "tokens"]
