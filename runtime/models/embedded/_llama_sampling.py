"""One sample from an in-process llama.cpp model, token by token (runtime
floor): the synchronous generation loop (``TokenLoop``) the embedded
backend runs in a worker thread.  It drives ``Llama.generate`` rather than
``create_chat_completion``, which reports no usage when streaming, cannot
be stopped between tokens, and needs ``logits_all=True`` (~400 MB for
SmolLM2) for log-probabilities.

Not thread-safe: one ``TokenLoop`` at a time per ``Llama``.  Must not import
agents, tools or aggregators, and does no async work.  ``llama_cpp`` and
``numpy`` are imported on first use.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentrt.protocols._model import FinishReason, TokenLogprob, TopLogprob

_NO_CANCEL: Final = threading.Event()


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """What one sample needs besides the prompt."""

    temperature: float
    top_p: float
    max_tokens: int
    stop: Sequence[str]
    seed: int
    logprobs: bool = False
    top_logprobs: int = 0
    reuse_prefix: bool = True
    """Keep the KV cache of the longest prefix shared with what was evaluated
    last (fast); ``False`` evaluates the prompt afresh (reproducible)."""


@dataclass(slots=True)
class Piece:
    """What one generated token adds: its visible text (maybe empty while
    held back or mid-character) and, when asked for, its log-probability."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


class TokenLoop:
    """Generates one sample.  Iterate :meth:`pieces` (one ``Piece`` per
    token); afterwards ``text``, ``finish_reason`` and ``completion_tokens``
    describe the whole sample.  ``cancel`` is checked before each token.
    Text is decoded as UTF-8 incrementally; stop sequences apply (text that
    may start one is held back); log-probabilities come from the logits row
    of the sampled position."""

    def __init__(
        self,
        llm: Any,
        prompt: list[int],
        settings: SamplingSettings,
        *,
        cancel: threading.Event = _NO_CANCEL,
    ) -> None:
        self._llm = llm
        self._prompt = prompt
        self._settings = settings
        self._cancel = cancel
        self._vocab = _llama_cpp().llama_model_get_vocab(llm.model)
        self._n_vocab: int = llm.n_vocab()
        self.text = ""
        self.finish_reason: FinishReason = "length"
        self.completion_tokens = 0
        self.cancelled = False

    def pieces(self) -> Generator[Piece, None, None]:
        """Generate, yielding once per sampled token."""
        llm = self._llm
        settings = self._settings
        llama_cpp = _llama_cpp()
        llm.set_seed(settings.seed)
        if not settings.reuse_prefix:
            llm.reset()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        emitted = 0
        stopped_by_sequence = False
        tokens = llm.generate(
            self._prompt,
            temp=settings.temperature,
            top_p=settings.top_p,
            # Disable llama-cpp-python's extra defaults (top_k=40, min_p=0.05):
            # the request's temperature and top_p are the whole policy.
            top_k=0,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
        )
        try:
            if settings.max_tokens <= 0:
                return
            for token in tokens:
                if self._cancel.is_set():
                    self.cancelled = True
                    self.finish_reason = "stop"
                    return
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    self.finish_reason = "stop"
                    break
                self.completion_tokens += 1
                logprobs = [self._logprob(token)] if settings.logprobs else []
                self.text += decoder.decode(llm.detokenize([token]))
                cut = _first_stop(self.text, settings.stop)
                if cut is not None:
                    self.text = self.text[:cut]
                    self.finish_reason = "stop"
                    stopped_by_sequence = True
                    yield Piece(self.text[emitted:], logprobs)
                    emitted = len(self.text)
                    break
                if self.completion_tokens >= settings.max_tokens:
                    self.finish_reason = "length"
                    self.text += decoder.decode(b"", final=True)
                    yield Piece(self.text[emitted:], logprobs)
                    emitted = len(self.text)
                    break
                safe = len(self.text) - _held_back(self.text, settings.stop)
                yield Piece(self.text[emitted:safe] if safe > emitted else "", logprobs)
                emitted = max(emitted, safe)
        finally:
            tokens.close()
        if not stopped_by_sequence:
            self.text += decoder.decode(b"", final=True)
        if len(self.text) > emitted:
            yield Piece(self.text[emitted:])

    def _logprob(self, token: int) -> TokenLogprob:
        # After sampling, llama.cpp still holds the logits row the token was
        # sampled from (the last output of the last decode).
        import numpy as np  # ships with llama-cpp-python, like llama_cpp itself

        llama_cpp = _llama_cpp()
        row = llama_cpp.llama_get_logits_ith(self._llm.ctx, -1)
        logits = np.ctypeslib.as_array(row, shape=(self._n_vocab,)).astype(np.float64)
        peak = float(logits.max())
        log_norm = peak + float(np.log(np.exp(logits - peak).sum()))
        top: list[TopLogprob] = []
        k = min(self._settings.top_logprobs, self._n_vocab)
        if k > 0:
            best = np.argpartition(-logits, k - 1)[:k]
            best = best[np.argsort(-logits[best])]
            top = [TopLogprob(self._piece_text(int(i)), float(logits[i]) - log_norm) for i in best]
        return TokenLogprob(self._piece_text(token), float(logits[token]) - log_norm, top)

    def _piece_text(self, token: int) -> str:
        text: str = self._llm.detokenize([token]).decode("utf-8", errors="replace")
        return text


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the earliest stop sequence begins in ``text``, if any."""
    found = [i for i in (text.find(s) for s in stops if s) if i != -1]
    return min(found) if found else None


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could begin a stop sequence
    (and so must not be shown yet)."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


def _llama_cpp() -> Any:
    import llama_cpp

    return llama_cpp
