"""``ScriptedBackend``: a deterministic, in-process ``ModelBackend`` for tests.

Test support only: imports protocols, errors, the template and the tokenizer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self, final

import anyio
import msgspec

from agentrt.protocols._messages import AssistantMessage, FunctionCall, ToolCall
from agentrt.protocols._model import (
    Choice,
    FinishReason,
    ModelReply,
    ModelRequest,
    TokenLogprob,
    TopLogprob,
)
from agentrt.protocols._usage import Usage
from agentrt.runtime.kernel._errors import (
    BackendError,
    BackendUnavailable,
    ConfigError,
    InvalidRequestError,
    UnknownModelError,
)
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.sglang._sglang_template import render_assistant, render_chat
from agentrt.runtime.testing._tokens import count_tokens, synthetic_logprob, synthetic_top, tokenize

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """A tool call a scripted reply makes.  ``id`` defaults to
    ``call_<request#>_<sample>_<k>``."""

    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """A fully specified scripted sample."""

    content: str | None = None
    tool_calls: Sequence[ScriptedToolCall] = ()
    reasoning: str | None = None
    finish_reason: FinishReason | None = None
    """Defaults to ``tool_calls`` when there are tool calls, else ``stop``."""
    usage: Usage | None = None
    """Reported usage instead of the counted one: its completion tokens for
    this sample; its prompt and cached tokens for the whole reply (the first
    sample that sets usage wins)."""
    logprobs: list[TokenLogprob] | None = None
    """Logprobs to report (when the request asks) instead of synthetic ones."""
    delay_s: float | None = None
    """Latency of this reply instead of the backend's ``latency_s``."""
    error: BaseException | None = None
    """Raised after the reply's content (streams yield the content first)."""


ReplySpec = str | ScriptedToolCall | Sequence[ScriptedToolCall] | ScriptedReply | BaseException
Script = Sequence[ReplySpec] | Callable[[ModelRequest], ReplySpec]


class ScriptExhausted(BackendError):
    """A list script ran out of replies (``on_exhausted="raise"``)."""


@dataclass(slots=True)
class _Sample:
    reply: ScriptedReply
    message: AssistantMessage
    usage: Usage
    logprobs: list[TokenLogprob] | None = field(default=None)


@final
class ScriptedBackend:
    """A ``ModelBackend`` that answers from a script.

    ``script``: a sequence of reply specs, one per sample (a request with
    ``n=3`` takes the next three), or a callable ``(ModelRequest) -> spec``
    called once per sample.  A spec is a ``str`` (a text reply), a
    ``ScriptedToolCall`` or a list of them (``arguments``: a dict, or a raw
    string that may be malformed JSON), a ``ScriptedReply`` (full control),
    or an exception instance (raised after the latency).  ``requests``
    records every request; ``in_flight`` counts calls not yet finished.
    Usage is counted with ``runtime.testing.tokens`` over the ChatML
    rendering of ``sglang_template``; logprobs, when asked for, are synthetic
    and deterministic.

    ``on_exhausted``: what a list script does when it runs out: ``raise``
    (``ScriptExhausted``), ``repeat_last`` or ``cycle``.  Entering the
    backend (``async with``) is optional: it holds no resources; after
    leaving it, calls fail with ``BackendUnavailable``.
    """

    def __init__(
        self,
        script: Script,
        *,
        name: str = "scripted",
        models: Sequence[str] = ("scripted",),
        latency_s: float = 0.0,
        token_delay_s: float = 0.0,
        on_exhausted: Literal["raise", "repeat_last", "cycle"] = "raise",
    ) -> None:
        if not models:
            raise ConfigError("needs at least one model name", where=f"ScriptedBackend {name!r}")
        self._script = script
        self._name = name
        self._models = list(models)
        self.latency_s = latency_s
        self.token_delay_s = token_delay_s
        self.on_exhausted = on_exhausted
        self.requests: list[ModelRequest] = []
        self.in_flight = 0
        self._position = 0
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def models(self) -> list[str]:
        return list(self._models)

    @property
    def max_concurrency(self) -> None:
        """``None``: no limit, any number of calls run at once."""
        return None

    @property
    def consumed(self) -> int:
        """How many list-script items have been used."""
        return self._position

    async def __aenter__(self) -> Self:
        if self._closed:
            raise RuntimeError(f"ScriptedBackend {self._name!r} cannot be reopened once closed")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closed = True

    # -- the script --------------------------------------------------------

    def _next_spec(self, request: ModelRequest) -> object:
        if callable(self._script):
            return self._script(request)
        items = self._script
        if self._position < len(items):
            spec = items[self._position]
        elif self.on_exhausted == "repeat_last" and items:
            spec = items[-1]
        elif self.on_exhausted == "cycle" and items:
            spec = items[self._position % len(items)]
        else:
            raise ScriptExhausted(
                f"script exhausted after {len(items)} replies (request #{len(self.requests)})",
                backend=self._name,
            )
        self._position += 1
        return spec

    def _as_reply(self, spec: object) -> ScriptedReply:
        if isinstance(spec, BaseException):
            return ScriptedReply(error=spec)
        if isinstance(spec, ScriptedReply):
            return spec
        if isinstance(spec, str):
            return ScriptedReply(content=spec)
        if isinstance(spec, ScriptedToolCall):
            return ScriptedReply(tool_calls=(spec,))
        if isinstance(spec, Sequence) and all(isinstance(c, ScriptedToolCall) for c in spec):
            return ScriptedReply(tool_calls=tuple(spec))
        raise ConfigError(
            f"a script item is {type(spec).__name__}; expected str, ScriptedToolCall, a list "
            "of them, ScriptedReply or an exception",
            where=f"ScriptedBackend {self._name!r} item #{self._position}",
        )

    def _sample(self, request: ModelRequest, index: int, reply: ScriptedReply) -> _Sample:
        calls = [
            ToolCall(
                id=c.id or f"call_{len(self.requests)}_{index}_{k}",
                function=FunctionCall(
                    name=c.name,
                    arguments=c.arguments
                    if isinstance(c.arguments, str)
                    else _encoder.encode(c.arguments).decode(),
                ),
            )
            for k, c in enumerate(reply.tool_calls)
        ]
        message = AssistantMessage(
            content=reply.content, tool_calls=calls, reasoning_content=reply.reasoning
        )
        usage = reply.usage or Usage(
            completion_tokens=count_tokens(render_assistant(reply.content, calls))
        )
        logprobs = None
        if request.logprobs:
            logprobs = reply.logprobs
            if logprobs is None:
                logprobs = [
                    TokenLogprob(
                        token=piece,
                        logprob=synthetic_logprob(piece, pos, index),
                        top=[
                            TopLogprob(t, lp)
                            for t, lp in synthetic_top(piece, pos, request.top_logprobs, index)
                        ],
                    )
                    for pos, piece in enumerate(tokenize(reply.content or ""))
                ]
        return _Sample(reply=reply, message=message, usage=usage, logprobs=logprobs)

    def _begin(self, request: ModelRequest) -> tuple[list[_Sample], float]:
        if self._closed:
            raise BackendUnavailable("backend is closed", backend=self._name)
        if request.model is not None and request.model not in self._models:
            raise UnknownModelError(
                f"scripted backend {self._name!r} serves {self._models}, not {request.model!r}"
            )
        if request.n < 1:
            raise InvalidRequestError(f"n must be >= 1, got {request.n} ({self._name})")
        self.requests.append(request)
        replies = [self._as_reply(self._next_spec(request)) for _ in range(request.n)]
        delay = max((r.delay_s if r.delay_s is not None else self.latency_s) for r in replies)
        return [self._sample(request, i, r) for i, r in enumerate(replies)], delay

    def _reply(self, request: ModelRequest, samples: list[_Sample], started: float) -> ModelReply:
        given = [s.reply.usage for s in samples if s.reply.usage is not None]
        usage = Usage(
            prompt_tokens=given[0].prompt_tokens
            if given
            else count_tokens(render_chat(request.messages, request.tools)),
            completion_tokens=sum(s.usage.completion_tokens for s in samples),
            cached_prompt_tokens=given[0].cached_prompt_tokens if given else 0,
        )
        choices = [
            Choice(
                index=i,
                message=s.message,
                finish_reason=s.reply.finish_reason
                or ("tool_calls" if s.message.tool_calls else "stop"),
                logprobs=s.logprobs,
            )
            for i, s in enumerate(samples)
        ]
        return ModelReply(
            model=request.model or self._models[0],
            choices=choices,
            usage=usage,
            latency_s=anyio.current_time() - started,
            backend=self._name,
            request_id=request.request_id,
        )

    # -- ModelBackend ------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer from the script after the configured latency."""
        started = anyio.current_time()
        self.in_flight += 1
        try:
            samples, delay = self._begin(request)
            await anyio.sleep(delay)
            for s in samples:
                if s.reply.error is not None:
                    raise s.reply.error
            return self._reply(request, samples, started)
        finally:
            self.in_flight -= 1

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        """Yield each sample's reasoning, content tokens and tool-call pieces,
        then a final delta carrying the assembled reply.  Close the iterator
        (``contextlib.aclosing``) when abandoning it early."""
        started = anyio.current_time()
        self.in_flight += 1
        try:
            samples, delay = self._begin(request)
            await anyio.sleep(delay)
            for i, s in enumerate(samples):
                if s.message.reasoning_content:
                    yield StreamDelta(index=i, reasoning=s.message.reasoning_content)
                lps = s.logprobs or []
                for pos, piece in enumerate(tokenize(s.message.content or "")):
                    yield StreamDelta(index=i, content=piece, logprobs=lps[pos : pos + 1])
                    if self.token_delay_s:
                        await anyio.sleep(self.token_delay_s)
                for k, call in enumerate(s.message.tool_calls):
                    yield StreamDelta(
                        index=i,
                        tool_call_index=k,
                        tool_call_id=call.id,
                        tool_name=call.function.name,
                    )
                    args = call.function.arguments
                    half = len(args) // 2
                    for piece in (args[:half], args[half:]):
                        if piece:
                            yield StreamDelta(index=i, tool_call_index=k, tool_arguments=piece)
                if s.reply.error is not None:
                    raise s.reply.error
            yield StreamDelta(reply=self._reply(request, samples, started))
        finally:
            self.in_flight -= 1
