"""Reading a judge's reply: ``parse_verdict`` (which candidate), ``parse_score``
(a 0..10 score) and ``VerdictUnparseable`` (a judge that never gave one).

A judge reasons before it decides, so the verdict is the *last* explicit
marker in its reply (``VERDICT: 2``, ``**Winner:** Attempt 2``, a JSON
object ``{"verdict": 2}``); a sentence such as "attempt 2 is better" is
read only when no marker is present, and a bare number only when it is the
whole reply.  Refusals, ties and out-of-range numbers are no verdict.

Pure text handling: no model calls, no project imports but the error tree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import RuntimeFailure

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_JSON = re.compile(r"\{[^{}]*\}")
_VERDICT_KEYS = ("verdict", "winner", "best", "choice", "pick", "attempt", "decision")
_SCORE_KEYS = ("score", "rating", "verdict")
_DECOR = r"[\s*_`\"'\[\]()#:=\-\u2013\u2014>]*"
_NOUN = r"(?:attempt|candidate|report|option|response|answer)?"
#: An explicit verdict marker followed by the candidate's number.
_MARKER = re.compile(
    r"\b(?:final\s+verdict|verdict|winner|decision|final\s+(?:choice|answer)|"
    r"best\s+(?:attempt|candidate|report|response)|"
    r"(?:i\s+)?(?:choose|pick|select|prefer)|my\s+choice)"
    rf"(?:\s+(?:is|was))?{_DECOR}{_NOUN}{_DECOR}(\d+)\b",
    re.I,
)
#: "Attempt 2 is better" and the like: read only when no marker is found.
_PHRASE = re.compile(
    r"\b(?:attempt|candidate|report|response)\s*#?\s*(\d+)\s*(?:'s\s+answer\s+)?"
    r"(?:(?:is|was|seems|appears)\s+(?:clearly\s+|much\s+)?(?:the\s+)?"
    r"(?:better|best|stronger|strongest|correct|right|winner|preferable|superior|"
    r"more\s+\w+|most\s+\w+)|wins)\b",
    re.I,
)
_NO_PICK = re.compile(r"\b(?:neither|tie|tied|equally|cannot|can't|unable|no\s+attempt)\b", re.I)
_BARE = re.compile(rf"^{_DECOR}{_NOUN}{_DECOR}(\d+){_DECOR}\.?$", re.I)
_SCORE_MARKER = re.compile(
    r"\b(?:score|rating|confidence)(?:\s+(?:is|of))?[\s*_:=\-]*(\d+(?:\.\d+)?)\s*(?:/\s*10\b)?",
    re.I,
)
_OUT_OF_TEN = re.compile(r"\b(\d+(?:\.\d+)?)\s*(?:/|(?:out\s+)?of)\s*10\b", re.I)


class VerdictUnparseable(RuntimeFailure):
    """A judge gave no readable verdict (or score) in any of its replies,
    retries included.  ``where`` names the judge and the comparison,
    ``reply`` is the last reply, ``cost`` what the replies cost (already on
    the run's ledger)."""

    def __init__(self, message: str, *, where: str, reply: str, cost: Cost | None = None) -> None:
        self.where = where
        self.reply = reply
        self.cost = cost if cost is not None else Cost()
        super().__init__(f"{where}: {message}")


def _visible(text: str) -> str:
    """The reply without closed ``<think>`` blocks (a reasoning model's scratch)."""
    return _THINK.sub(" ", text)


def _json_values(text: str, keys: tuple[str, ...]) -> list[tuple[int, Any]]:
    """(position, value) of the first of ``keys`` in each flat JSON object."""
    found: list[tuple[int, Any]] = []
    for match in _JSON.finditer(text):
        try:
            obj = json.loads(match.group(0))
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        lowered = {str(k).lower(): v for k, v in obj.items()}
        for key in keys:
            if key in lowered:
                found.append((match.start(), lowered[key]))
                break
    return found


def _as_pick(value: Any, n: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and (digits := re.search(r"\d+", value)):
        number = int(digits.group())
    else:
        return None
    return number - 1 if 1 <= number <= n else None


def parse_verdict(text: str, n: int) -> int | None:
    """The 0-based index of the candidate a judge's reply picks among ``n``
    (shown to it as 1..n), or ``None`` when the reply picks none.

    Precedence: the last JSON object with a ``verdict``/``winner``/``best``
    key or explicit marker (``Verdict: 2``, ``**Best attempt:** #2``, ``I
    choose Attempt 2``), whichever comes last; else, unless the reply calls
    it a tie or refuses, the last "attempt N is better/best/correct/wins";
    else a reply that is only a number.  Markers with a number outside
    1..n are ignored.

    >>> parse_verdict("Attempt 1 cites no source; attempt 2 does. VERDICT: 2", 2)
    1
    >>> parse_verdict("I cannot tell which attempt is better.", 2) is None
    True
    """
    visible = _visible(text)
    explicit: list[tuple[int, int]] = []
    for pos, value in _json_values(visible, _VERDICT_KEYS):
        pick = _as_pick(value, n)
        if pick is not None:
            explicit.append((pos, pick))
    for match in _MARKER.finditer(visible):
        pick = _as_pick(int(match.group(1)), n)
        if pick is not None:
            explicit.append((match.start(), pick))
    if explicit:
        return max(explicit)[1]
    if not _NO_PICK.search(visible):
        phrases = [_as_pick(int(m.group(1)), n) for m in _PHRASE.finditer(visible)]
        picks = [p for p in phrases if p is not None]
        if picks:
            return picks[-1]
    bare = _BARE.match(visible.strip())
    return _as_pick(int(bare.group(1)), n) if bare else None


def _as_score(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip().split("/")[0])
        except ValueError:
            return None
    else:
        return None
    return number / 10 if 0 <= number <= 10 else None


def parse_score(text: str) -> float | None:
    """A 0..10 score in a judge's reply, as a value in [0, 1]; ``None`` when
    there is none.  The last of: a JSON ``{"score": 7}``, ``Score: 7``,
    ``7/10`` or ``7 (out) of 10``; else a reply that is only a number.

    >>> parse_score("The evidence is thin. Score: 3/10")
    0.3
    """
    visible = _visible(text)
    found: list[tuple[int, float]] = []
    for pos, value in _json_values(visible, _SCORE_KEYS):
        score = _as_score(value)
        if score is not None:
            found.append((pos, score))
    for pattern in (_SCORE_MARKER, _OUT_OF_TEN):
        for match in pattern.finditer(visible):
            score = _as_score(match.group(1))
            if score is not None:
                found.append((match.start(), score))
    if found:
        return max(found)[1]
    stripped = visible.strip().strip("*_`. ")
    return _as_score(stripped) if re.fullmatch(r"\d+(?:\.\d+)?", stripped) else None


__all__ = ["VerdictUnparseable", "parse_score", "parse_verdict"]
