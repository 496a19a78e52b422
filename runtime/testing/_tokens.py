"""The fakes' deterministic tokenizer and synthetic log-probabilities.  Token
ids are ``100 + crc32(token) % (VOCAB_SIZE - 100)``, stable across processes
(ids below 100 reserved; ``EOS_ID`` is 2); two tokens may share an id.

Owns nothing else; imports nothing from agentrt.
"""

from __future__ import annotations

import functools
import math
import re
import zlib
from typing import NamedTuple

VOCAB_SIZE = 32_000
EOS_ID = 2
_FIRST_ID = 100

_TOKEN_RE = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")
# Chat turns start with this; the text is split before it where the
# character before is not a space (the tokenizer cuts there too, because
# whitespace only ever attaches forward).
_TURN_SEP = "\n<|im_start|>"

# Reverse map for decode_ids; bounded so a long-running sim cannot grow it
# without limit (once full, new tokens decode as <id:N>).
_REVERSE_LIMIT = 1 << 17
_reverse: dict[int, str] = {}

# Words the fakes pick synthetic text and alternatives from.
WORDS = (
    "the", "model", "agent", "tool", "result", "answer", "plan", "check", "value",
    "step", "search", "found", "next", "data", "query", "reason", "so", "then",
    "we", "it", "is", "a", "of", "to", "and", "in", "that", "for", "with", "on",
)  # fmt: skip


def tokenize(text: str) -> list[str]:
    """Split ``text`` into tokens: a run of word characters (``\\w+``) or a
    single other non-space character, each with the whitespace before it;
    trailing whitespace is one more token.  ``"Hello, world!\\n"`` is
    ``["Hello", ",", " world", "!", "\\n"]``; joining gives the text back."""
    return _TOKEN_RE.findall(text)


@functools.lru_cache(maxsize=1 << 16)
def token_id(token: str) -> int:
    """The stable id of one token."""
    tid = _FIRST_ID + zlib.crc32(token.encode("utf-8")) % (VOCAB_SIZE - _FIRST_ID)
    if len(_reverse) < _REVERSE_LIMIT:
        _reverse.setdefault(tid, token)
    return tid


def encode(text: str) -> list[int]:
    """Token ids of ``text``."""
    return [token_id(t) for t in _TOKEN_RE.findall(text)]


@functools.lru_cache(maxsize=1 << 14)
def _encode_segment(segment: str) -> tuple[int, ...]:
    return tuple(token_id(t) for t in _TOKEN_RE.findall(segment))


def split_segments(text: str) -> list[str]:
    """``text`` cut at chat-turn boundaries where tokenization cuts anyway."""
    parts = text.split(_TURN_SEP)
    segments = [parts[0]]
    for part in parts[1:]:
        last = segments[-1]
        if last and last[-1].isspace():
            segments[-1] = last + _TURN_SEP + part
        else:
            segments.append(_TURN_SEP + part)
    return segments


class EncodedPrompt(NamedTuple):
    """A prompt's ids, and where its last segment starts (to extend it)."""

    ids: list[int]
    head: int
    tail: str

    def extend(self, suffix: str) -> list[int]:
        """``encode(prompt + suffix)`` without re-encoding the prompt."""
        ids = self.ids[: self.head]
        ids.extend(_encode_segment(self.tail + suffix))
        return ids

    def extend_tokens(self, pieces: list[str], end: str = "") -> list[int]:
        """``encode(prompt + "".join(pieces) + end)`` for ``pieces`` that are
        already tokens (generated text): when the prompt ends in whitespace
        (a chat prompt's ``assistant\\n``), that whitespace joins the first
        piece, and ``end`` starts after a non-space, so no text is
        re-tokenized."""
        tail = self.tail
        if not (pieces and tail and tail[-1].isspace() and not pieces[0][0].isspace()):
            return self.extend("".join(pieces) + end)
        if len(pieces[-1]) and pieces[-1][-1].isspace():
            return self.extend("".join(pieces) + end)
        last = _TOKEN_RE.findall(tail)[-1]
        if not last.isspace():
            return self.extend("".join(pieces) + end)
        ids = self.ids[:-1]
        ids.append(token_id(last + pieces[0]))
        ids.extend([token_id(p) for p in pieces[1:]])
        ids.extend(_encode_segment(end))
        return ids


def encode_prompt(text: str) -> EncodedPrompt:
    """``encode(text)``, computed per chat turn with a cache: conversations
    that grow turn by turn re-tokenize only their new turns."""
    ids: list[int] = []
    segments = split_segments(text)
    for segment in segments[:-1]:
        ids.extend(_encode_segment(segment))
    head = len(ids)
    ids.extend(_encode_segment(segments[-1]))
    return EncodedPrompt(ids, head, segments[-1])


def encode_segmented(text: str) -> list[int]:
    """``encode(text)`` through the per-turn cache (see ``encode_prompt``)."""
    return encode_prompt(text).ids


def count_tokens(text: str) -> int:
    """The number of tokens in ``text``."""
    return len(_TOKEN_RE.findall(text))


def decode_ids(ids: list[int]) -> str:
    """Text for token ids this process has seen (the first token encoded
    to an id wins); unknown ids as ``<id:N>``."""
    return "".join(_reverse.get(i, f"<id:{i}>") for i in ids)


def synthetic_logprob(token: str, position: int, salt: int = 0) -> float:
    """A deterministic log-probability in ``[-2.0, -0.001]`` for a token at a
    position: a hash, not a model, but stable and plausible in range."""
    h = zlib.crc32(f"{salt}:{position}:{token}".encode())
    return -max(0.001, round((h % 2000) / 1000.0, 3))


def synthetic_top(token: str, position: int, k: int, salt: int = 0) -> list[tuple[str, float]]:
    """``k`` alternatives for a position, best first; the chosen token is the
    first entry, the others are words from ``WORDS`` with lower logprobs."""
    if k <= 0:
        return []
    chosen = synthetic_logprob(token, position, salt)
    out = [(token, chosen)]
    start = zlib.crc32(f"{salt}:{position}".encode()) % len(WORDS)
    for j in range(1, k):
        alt = " " + WORDS[(start + j) % len(WORDS)]
        out.append((alt, round(chosen - math.log1p(j), 3)))
    return out
