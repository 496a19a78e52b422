"""Reading a judge's reply: ``parse_verdict`` (which candidate), ``parse_score``
(a score, on whatever scale the reply used, as a value in [0, 1]),
``cut_off`` (a reply that stopped before it finished) and
``VerdictUnparseable`` (a judge that never gave a readable one).

A reply is read in two tiers.  *Explicit* markers name the pick or the score
outright (``VERDICT: 2``, ``**Answer:** Attempt 2``, ``\\boxed{2}``, ``Best:
2``, ``{"verdict": 2}``, ``Rating: 4/5``); the last of them decides, and a
marker that names no readable pick (``VERDICT: tie``, ``SCORE: N/A``, a
number out of range) makes the reply unreadable rather than falling back on
looser text.  Only when there is no explicit marker is *plain* text read
("attempt 2 is better", a lone ``8/10``), and then only when it is
unambiguous.  Reasoning blocks (``<think>``, ``<thinking>``) are never read,
and a reply whose reasoning block is still open is unreadable.

Pure text handling: no model calls, no project imports but the error tree.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import RuntimeFailure

_OPEN_TAGS: Final = ("think", "thinking", "reasoning")
_CLOSED_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_OPEN_BLOCK = re.compile(r"<(?:think|thinking|reasoning)>", re.I)
# A chat template that opens the reasoning block in the prompt (Qwen3,
# DeepSeek-R1) leaves only its closing tag in the reply.
_CLOSE_ONLY = re.compile(r"^.*</(?:think|thinking|reasoning)>", re.S | re.I)
_JSON = re.compile(r"\{[^{}]*\}")
_VERDICT_KEYS = ("verdict", "winner", "best", "choice", "pick", "decision")
_SCORE_KEYS = ("score", "rating", "confidence", "probability", "likelihood")

#: Markdown and punctuation between a label and what it labels.
_DECOR = r"[\s*_`\"'\[\](){}#:=\-\u2013\u2014>|]*"
_NOUN = r"(?:attempt|candidate|report|option|response|answer|solution)"
_NUMBER = r"(\d+)(?![.,]\d|\s*%|\s*/\s*\d|\s+(?:of|out|attempts|candidates)\b)"
#: A second number after the first ("1 or 2", "1/2", "1 and 2"): no pick.
_EITHER = re.compile(r"^\s*(?:or|and|/|,)\s*(?:attempt\s*)?#?\d", re.I)
#: What follows a pick that says it is *not* the pick ("Attempt 1 is wrong").
_DISOWNED = re.compile(
    r"^[\s*_`]*(?:is|was)\s+(?:not\b|wrong|incorrect|worse|weaker|unsupported|flawed)", re.I
)
_NEGATED = re.compile(r"(?:\bnot|n't|\bnever|\bno)\s+(?:\w+\s+){0,2}$", re.I)

#: Labels that name the pick, with or without a noun ("Verdict: 2",
#: "Best attempt: #3", "My choice is Attempt 1").
_LABEL = (
    r"(?:final\s+|my\s+)?(?:verdict|winner|decision|choice|selection|pick)"
    r"|best(?:[\s-]+supported)?(?:\s+(?:attempt|candidate|response|option|answer|one))?"
)
#: Phrases that name the pick only together with a noun ("The correct answer
#: is Attempt 1", "**Answer:** Attempt 2", "I would select Attempt 2").
_NOUN_LABEL = (
    r"(?:(?:correct|right|final)\s+)?answer"
    r"|i(?:\s+would|'d|\s+will|'ll)?\s+(?:choose|pick|select|prefer|go\s+with|vote\s+for)"
)
_LINK = (
    r"(?:\s+(?:is|was|goes\s+to|would\s+be)(?:\s+(?:clearly|definitely|obviously))?"
    r"(?:\s+from)?)?"
)
_MARKER = re.compile(
    rf"\b(?:{_LABEL}){_LINK}{_DECOR}(?:{_NOUN}{_DECOR})?#?{_NUMBER}"
    rf"|\b(?:{_NOUN_LABEL}){_LINK}{_DECOR}{_NOUN}{_DECOR}#?{_NUMBER}",
    re.I,
)
#: A label followed by a refusal to pick ("VERDICT: tie", "Winner: neither").
_ABSTAIN = re.compile(
    rf"\b(?:{_LABEL}){_LINK}{_DECOR}"
    r"(?:tie|tied|draw|neither|none|both|n/?a|undecided|unclear|inconclusive|equal)\b",
    re.I,
)
_BOXED = re.compile(r"\\boxed\{\s*(?:\\text\{\s*)?(?:attempt\s*)?#?(\d+)\s*\}?\s*\}", re.I)
_BRACKETED = re.compile(r"\[\[\s*(\d+)\s*\]\]")
_POSITIVE = (
    r"better|best|stronger|strongest|correct|right|superior|preferable|preferred|the\s+winner"
    r"|(?:more|most)\s+(?:accurate|reliable|convincing|complete|thorough|correct|rigorous"
    r"|credible|trustworthy|persuasive|robust|(?:well|strongly)[\s-]supported|supported)"
)
#: Plain text: "Attempt 2 is better", "Attempt 2 wins", "the first attempt is best".
_PHRASE = re.compile(
    rf"\b{_NOUN}\s*#?\s*(\d+)(?:'s\s+answer)?\s+"
    rf"(?:(?:is|was|seems|appears)\s+(?:clearly\s+|much\s+|slightly\s+|the\s+|also\s+)*"
    rf"(?:{_POSITIVE})\b|wins\b)"
    rf"|\bthe\s+(first|second|third|fourth|fifth)\s+(?:attempt|one)\s+"
    rf"(?:is|was)\s+(?:clearly\s+|much\s+|the\s+)*(?:{_POSITIVE})\b",
    re.I,
)
_ORDINALS: Final = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}
#: Plain text that declines to pick: plain-text picks are then not read.
_REFUSAL = re.compile(
    r"\b(?:tie|tied|equally\s+(?:good|valid|well|strong|supported|plausible)"
    r"|(?:cannot|can't|can\s+not|unable\s+to|not\s+able\s+to)\s+(?:\w+\s+){0,2}"
    r"(?:choose|pick|decide|determine|tell|judge|select|evaluate|assess)"
    r"|difficult\s+to\s+(?:determine|say|choose|tell)|depends\s+on)\b",
    re.I,
)
_BARE = re.compile(rf"^{_DECOR}(?:{_NOUN}{_DECOR})?#?(\d+){_DECOR}\.?$", re.I)
_FINAL_ANSWER = re.compile(r"\bfinal\s+answer(?:\s+is)?\s*[:=][\s*_`$]*(\d+)\b", re.I)

#: A value, not the start of a range ("0-10").
_VALUE = r"(\d+(?:\.\d+)?)(?!\s*(?:-|\u2013|to)\s*\d)"
#: An explicit scale after a value: "/10", "out of 5", "of 100", "%".
_SCALE = r"(?:(?:\s+(?:stars?|points?))?\s*(?:/|out\s+of|of)\s*(\d+)\b|\s*(%))?"
_SCORE_LABEL = (
    r"(?:(?:overall\s+|final\s+)?(?:score|rating|confidence|probability|likelihood)|overall)"
    r"(?:\s*\(\s*\d+\s*(?:-|\u2013|to)\s*\d+\s*\))?"
    r"(?:\s+(?:is|of))?(?:[^\n\d:]{0,40}?[:=])?"
)
_SCORE_MARKER = re.compile(rf"\b{_SCORE_LABEL}{_DECOR}{_VALUE}{_SCALE}", re.I)
_SCORE_VERB = re.compile(
    r"\b(?:rate|give|assign|score)\s+(?:it|this|the\s+attempt|this\s+attempt|the\s+answer)?"
    rf"\s*(?:an?\s+|a\s+score\s+of\s+|at\s+)?{_VALUE}{_SCALE}",
    re.I,
)
_SCORE_ABSTAIN = re.compile(
    rf"\b{_SCORE_LABEL}{_DECOR}(?:n/?a|none|unknown|undetermined|cannot|-)(?:\W|$)", re.I
)
_SCORE_BOXED = re.compile(rf"\\boxed\{{\s*{_VALUE}{_SCALE}\s*\}}")
_LONE_SCORE = re.compile(rf"^{_DECOR}{_VALUE}{_SCALE}{_DECOR}\.?\s*$", re.I)
_DECLARED_SCALE = re.compile(
    r"\bscale\s+(?:of|from)\s+(\d+)\s*(?:to|-|\u2013)\s*(\d+)"
    r"|\b(\d+)\s*(?:to|-|\u2013)\s*(\d+)\s+scale\b",
    re.I,
)
#: Labels whose bare value may be a percentage ("Confidence: 90").
_PERCENT_LABELS = re.compile(r"confidence|probability|likelihood", re.I)


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


def cut_off(text: str, finish_reason: str | None = None) -> bool:
    """Whether a reply stopped before it finished: the server cut it at
    ``max_tokens`` (finish reason ``length``), or its reasoning block
    (``<think>``...) was never closed.  Such a reply is no verdict, whatever
    it says so far; a judge asks again with more room."""
    if finish_reason == "length":
        return True
    opened = len(_OPEN_BLOCK.findall(text))
    closed = sum(len(re.findall(rf"</{tag}>", text, re.I)) for tag in _OPEN_TAGS)
    return opened > closed


def _visible(text: str) -> str | None:
    """The reply without its reasoning blocks; ``None`` when one is still open."""
    if cut_off(text):
        return None
    text = _CLOSED_BLOCK.sub(" ", text)
    return _CLOSE_ONLY.sub(" ", text)


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


#: A marker that names no readable pick: the reply is unreadable.
_NO_PICK: Final = -1


def _as_pick(value: Any, n: int) -> int:
    """The 0-based pick a marker's value names, or ``_NO_PICK``."""
    if isinstance(value, bool):
        return _NO_PICK
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\W*(?:\w+\s*)?#?\s*\d+\W*", value.strip()):
        numbers = re.findall(r"\d+", value)
        number = int(numbers[0])
    else:
        return _NO_PICK
    return number - 1 if 1 <= number <= n else _NO_PICK


def _explicit_picks(visible: str, n: int) -> list[tuple[int, int]]:
    """(position, pick or ``_NO_PICK``) of every explicit verdict marker."""
    found = [(pos, _as_pick(value, n)) for pos, value in _json_values(visible, _VERDICT_KEYS)]
    for match in _MARKER.finditer(visible):
        if _NEGATED.search(visible[max(0, match.start() - 24) : match.start()]):
            continue
        after = visible[match.end() : match.end() + 40]
        if _DISOWNED.match(after):
            continue
        number = int(match.group(1) or match.group(2))
        found.append((match.start(), _NO_PICK if _EITHER.match(after) else _as_pick(number, n)))
    for pattern in (_BOXED, _BRACKETED):
        found.extend((m.start(), _as_pick(int(m.group(1)), n)) for m in pattern.finditer(visible))
    found.extend((m.start(), _NO_PICK) for m in _ABSTAIN.finditer(visible))
    return found


def _plain_picks(visible: str, n: int) -> set[int]:
    """The picks plain sentences name ("attempt 2 is better")."""
    picks: set[int] = set()
    for match in _PHRASE.finditer(visible):
        if _NEGATED.search(visible[max(0, match.start() - 24) : match.start()]):
            continue
        number = int(match.group(1)) if match.group(1) else _ORDINALS[match.group(2).lower()]
        picks.add(_as_pick(number, n))
    picks.update(_as_pick(int(m.group(1)), n) for m in _FINAL_ANSWER.finditer(visible))
    return picks


def parse_verdict(text: str, n: int) -> int | None:
    """The 0-based index of the candidate a judge's reply picks among ``n``
    (shown to it as 1..n), or ``None`` when the reply is unreadable.

    The last explicit marker decides: ``VERDICT: 2``, ``Final verdict:
    Attempt 2``, ``**Answer:** Attempt 2``, ``The correct answer is Attempt
    2``, ``I choose Attempt 2``, ``Best: 2``, ``\\boxed{2}``, ``[[2]]``,
    ``<verdict>2</verdict>`` or a JSON object with a ``verdict``/``winner``/
    ``best`` key.  When that marker names no pick (``VERDICT: tie``, ``1 or
    2``, a number outside 1..n) the reply is unreadable.  Without any
    marker, plain sentences ("attempt 2 is better", "Final answer: 2") are
    read when they all name the same attempt and the reply does not call it
    a tie or decline; else a reply that is only a number (``2``, ``Attempt
    2``).  Reasoning blocks are skipped; an unclosed one makes the reply
    unreadable (see ``cut_off``).

    >>> parse_verdict("Attempt 1 cites no source; attempt 2 does. VERDICT: 2", 2)
    1
    >>> parse_verdict("I cannot tell which attempt is better.", 2) is None
    True
    """
    visible = _visible(text)
    if visible is None:
        return None
    explicit = _explicit_picks(visible, n)
    if explicit:
        pick = max(explicit)[1]
        return None if pick == _NO_PICK else pick
    if not _REFUSAL.search(visible):
        plain = _plain_picks(visible, n)
        if len(plain) == 1 and _NO_PICK not in plain:
            return plain.pop()
        if plain:
            return None
    bare = _BARE.match(visible.strip())
    if bare is None:
        return None
    pick = _as_pick(int(bare.group(1)), n)
    return None if pick == _NO_PICK else pick


def _normalized(
    value: str | float, scale: str | None, percent: str | None, *, top: int, percent_ok: bool
) -> float | None:
    """``value`` on its scale as a number in [0, 1], or ``None`` when it is
    off its scale.  ``scale``: an explicit maximum ("/5"); ``top``: the
    maximum the reply declared ("on a scale of 1 to 5"), else 10."""
    number = float(value)
    if percent:
        maximum = 100.0
    elif scale:
        maximum = float(scale)
    elif isinstance(value, float) or (isinstance(value, str) and "." in value):
        # A fraction on 0..1 ("Confidence: 0.9"), else a decimal on the scale.
        maximum = 1.0 if number <= 1.0 else float(top)
    elif number > top and percent_ok and number <= 100:
        maximum = 100.0
    else:
        maximum = float(top)
    if maximum <= 0 or not 0 <= number <= maximum:
        return None
    return number / maximum


def _declared_top(visible: str) -> int:
    """The top of the scale the reply says it uses ("on a 1-5 scale"), else 10."""
    tops = [
        int(m.group(2) or m.group(4))
        for m in _DECLARED_SCALE.finditer(visible)
        if int(m.group(2) or m.group(4)) in (1, 5, 10, 100)
    ]
    return tops[-1] if tops else 10


def parse_score(text: str) -> float | None:
    """A judge's score as a value in [0, 1], or ``None`` when the reply is
    unreadable.  The scale is the one the reply used: ``Rating: 4/5`` ->
    0.8, ``7 out of 10`` -> 0.7, ``85/100`` or ``85%`` -> 0.85, a fraction
    (``Confidence: 0.9``) -> 0.9, a number the reply put on a declared scale
    ("on a scale of 1 to 5, ... a 2") -> 0.4; a bare integer is out of 10
    (as asked), and above 10 only a confidence or probability is read as a
    percentage.

    The last explicit marker decides (``Score: 7``, ``**Rating:** 6/10``,
    ``I'd rate it 7 out of 10``, ``\\boxed{8}``, a JSON ``{"score": 7}``);
    a marker off its scale or naming no score (``SCORE: N/A``) makes the
    reply unreadable.  Without one, only a last line that is nothing but a
    score (``8/10``, ``7 of 10``, ``7``) is read: "passed 3/4 tests" is no
    score.

    >>> parse_score("The evidence is thin. Score: 3/10")
    0.3
    """
    visible = _visible(text)
    if visible is None:
        return None
    top = _declared_top(visible)
    explicit: list[tuple[int, float | None]] = []
    for pos, found in _json_values(visible, _SCORE_KEYS):
        value: str | float | None = None
        if isinstance(found, int | float) and not isinstance(found, bool):
            value = found
        elif isinstance(found, str) and re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", found):
            value = found.strip()
        score = None if value is None else _normalized(value, None, None, top=top, percent_ok=True)
        explicit.append((pos, score))
    for pattern in (_SCORE_MARKER, _SCORE_VERB, _SCORE_BOXED):
        for match in pattern.finditer(visible):
            percent_ok = bool(_PERCENT_LABELS.search(match.group(0)))
            value = _normalized(
                match.group(1), match.group(2), match.group(3), top=top, percent_ok=percent_ok
            )
            explicit.append((match.start(), value))
    explicit.extend((m.start(), None) for m in _SCORE_ABSTAIN.finditer(visible))
    if explicit:
        return max(explicit, key=lambda found: found[0])[1]
    # No marker: a last line that is only a score ("8/10", "7 of 10", "7").
    lines = [line for line in visible.splitlines() if line.strip()]
    last = _LONE_SCORE.match(lines[-1]) if lines else None
    if last is None:
        return None
    return _normalized(last.group(1), last.group(2), last.group(3), top=top, percent_ok=False)


__all__ = ["VerdictUnparseable", "cut_off", "parse_score", "parse_verdict"]
