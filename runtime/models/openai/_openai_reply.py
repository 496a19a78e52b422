"""OpenAI chat-completion replies turned into agentrt's ``ModelReply``.

Owns :func:`completion_to_reply` (a non-streaming reply) and
:class:`StreamAssembly` (a streamed one: content, reasoning and logprobs
joined per choice, tool-call deltas joined by index, usage from the final
chunk).  Tool-call arguments stay the raw text the model produced.

Pure data: no I/O.  Imports ``agentrt.protocols``, the wire Structs of
:mod:`agentrt.runtime.wire` and ``StreamDelta``.
"""

from __future__ import annotations

from typing import Any

from agentrt.protocols._messages import AssistantMessage, FunctionCall, ToolCall
from agentrt.protocols._model import Choice, FinishReason, ModelReply, TokenLogprob, TopLogprob
from agentrt.protocols._usage import Usage
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.wire._chat import (
    ReplyChunk,
    ReplyCompletion,
    ReplyLogprobs,
    ReplyToolCall,
    ReplyUsage,
)
from agentrt.runtime.wire._common import encoder

__all__ = ["StreamAssembly", "completion_to_reply"]

_FINISH: dict[str | None, FinishReason] = {
    None: "stop",
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def _finish(reason: str | None) -> FinishReason:
    return _FINISH.get(reason, "error")


def _arguments(value: str | dict[str, Any] | None) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    return encoder.encode(value).decode()


def _logprobs(wire_logprobs: ReplyLogprobs | None) -> list[TokenLogprob]:
    if wire_logprobs is None or not wire_logprobs.content:
        return []
    return [
        TokenLogprob(
            t.token,
            t.logprob,
            [TopLogprob(a.token, a.logprob) for a in t.top_logprobs] if t.top_logprobs else [],
        )
        for t in wire_logprobs.content
    ]


def _usage(wire_usage: ReplyUsage | None) -> Usage:
    if wire_usage is None:
        return Usage()
    details = wire_usage.prompt_tokens_details
    return Usage(
        prompt_tokens=wire_usage.prompt_tokens,
        completion_tokens=wire_usage.completion_tokens,
        cached_prompt_tokens=(details.cached_tokens or 0) if details is not None else 0,
    )


def completion_to_reply(
    completion: ReplyCompletion,
    *,
    model: str,
    latency_s: float,
    backend: str,
    request_id: str | None,
) -> ModelReply:
    """A non-streaming reply as a ``ModelReply``; ``model`` is used only
    when the server did not say which model served it."""
    choices: list[Choice] = []
    for c in completion.choices:
        m = c.message
        if m is None:
            message = AssistantMessage()
        else:
            calls = (
                [
                    ToolCall(
                        tc.id or f"call_{c.index}_{i}",
                        FunctionCall(
                            (tc.function.name or "") if tc.function else "",
                            _arguments(tc.function.arguments if tc.function else None),
                        ),
                    )
                    for i, tc in enumerate(m.tool_calls)
                ]
                if m.tool_calls
                else []
            )
            message = AssistantMessage(
                content=m.content,
                tool_calls=calls,
                reasoning_content=m.reasoning_content or m.reasoning,
            )
        choices.append(
            Choice(
                index=c.index,
                message=message,
                finish_reason=_finish(c.finish_reason),
                logprobs=_logprobs(c.logprobs) if c.logprobs is not None else None,
            )
        )
    if len(choices) > 1:
        choices.sort(key=lambda ch: ch.index)
    return ModelReply(
        model=completion.model or model,
        choices=choices,
        usage=_usage(completion.usage),
        latency_s=latency_s,
        backend=backend,
        request_id=request_id or completion.id or None,
    )


class _ToolCallParts:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] | None = None


class _ChoiceParts:
    __slots__ = ("content", "finish_reason", "logprobs", "reasoning", "tools")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tools: dict[int, _ToolCallParts] = {}
        self.logprobs: list[TokenLogprob] | None = None
        self.finish_reason: str | None = None

    def add_logprobs(self, wire_logprobs: ReplyLogprobs) -> list[TokenLogprob]:
        logprobs = _logprobs(wire_logprobs)
        if self.logprobs is None:
            self.logprobs = []
        self.logprobs.extend(logprobs)
        return logprobs


class StreamAssembly:
    """Joins the chunks of one streamed reply.  :meth:`add` returns the
    deltas worth handing to the caller (empty role-only chunks are not);
    :meth:`reply` builds the final ``ModelReply``."""

    __slots__ = ("_choices", "_id", "_model", "_usage")

    def __init__(self) -> None:
        self._choices: dict[int, _ChoiceParts] = {}
        self._model = ""
        self._id = ""
        self._usage: ReplyUsage | None = None

    def add(self, chunk: ReplyChunk) -> list[StreamDelta]:
        if chunk.model:
            self._model = chunk.model
        if chunk.id:
            self._id = chunk.id
        if chunk.usage is not None:
            self._usage = chunk.usage
        out: list[StreamDelta] = []
        for c in chunk.choices:
            parts = self._choices.get(c.index)
            if parts is None:
                parts = self._choices[c.index] = _ChoiceParts()
            if c.finish_reason is not None:
                parts.finish_reason = c.finish_reason
            logprobs = parts.add_logprobs(c.logprobs) if c.logprobs is not None else []
            d = c.delta
            text = (d.content or "") if d is not None else ""
            reasoning = (d.reasoning_content or d.reasoning or "") if d is not None else ""
            if text:
                parts.content.append(text)
            if reasoning:
                parts.reasoning.append(reasoning)
            if text or reasoning or logprobs:
                out.append(
                    StreamDelta(index=c.index, content=text, reasoning=reasoning, logprobs=logprobs)
                )
            if d is not None and d.tool_calls:
                for tc in d.tool_calls:
                    out.append(self._tool_delta(c.index, parts, tc))
        return out

    @staticmethod
    def _tool_delta(index: int, parts: _ChoiceParts, tc: ReplyToolCall) -> StreamDelta:
        slot_index = tc.index
        if slot_index is None:
            # No index (a few servers): a new id opens a new call, anything
            # else continues the last one.
            known = {p.id for p in parts.tools.values()}
            if tc.id is not None and tc.id not in known:
                slot_index = len(parts.tools)
            else:
                slot_index = max(parts.tools, default=0)
        slot = parts.tools.get(slot_index)
        if slot is None:
            slot = parts.tools[slot_index] = _ToolCallParts()
        if tc.id:
            slot.id = tc.id
        fn = tc.function
        name = fn.name if fn is not None else None
        raw = fn.arguments if fn is not None else None
        arguments = _arguments(raw) if raw is not None else ""
        if name:
            slot.name = name  # set, not appended: some servers repeat it
        if raw is not None:
            if slot.arguments is None:
                slot.arguments = []
            slot.arguments.append(arguments)
        return StreamDelta(
            index=index,
            tool_call_index=slot_index,
            tool_call_id=tc.id,
            tool_name=name,
            tool_arguments=arguments,
        )

    def reply(
        self, *, model: str, latency_s: float, backend: str, request_id: str | None
    ) -> ModelReply:
        choices: list[Choice] = []
        for index in sorted(self._choices):
            parts = self._choices[index]
            calls = [
                ToolCall(
                    slot.id or f"call_{index}_{i}",
                    FunctionCall(
                        slot.name or "",
                        "{}" if slot.arguments is None else "".join(slot.arguments),
                    ),
                )
                for i, slot in ((i, parts.tools[k]) for i, k in enumerate(sorted(parts.tools)))
            ]
            message = AssistantMessage(
                content="".join(parts.content) if parts.content else None,
                tool_calls=calls,
                reasoning_content="".join(parts.reasoning) if parts.reasoning else None,
            )
            choices.append(
                Choice(
                    index=index,
                    message=message,
                    finish_reason=_finish(parts.finish_reason),
                    logprobs=parts.logprobs,
                )
            )
        return ModelReply(
            model=self._model or model,
            choices=choices,
            usage=_usage(self._usage),
            latency_s=latency_s,
            backend=backend,
            request_id=request_id or self._id or None,
        )
