"""The OpenAI chat-completions wire of the daemon's OpenAI-compatible endpoint.

Owns the request as clients send it (``ChatCompletionRequest``, decoded once
with msgspec; a field OpenAI does not define is refused), the task a
conversation becomes (``build_task``), the response and chunk shapes, and
OpenAI's error shape (``OpenAIError``).

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only its OpenAI-compatible endpoints import it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, final

import msgspec

from agentrt.protocols._api import RolloutInfo, RunInfo
from agentrt.runtime.kernel._errors import AgentrtError

# -- errors ---------------------------------------------------------------------


@final
class OpenAIError(AgentrtError):
    """A refusal in OpenAI's shape: ``{"error": {message, type, param, code}}``.

    ``retry`` sets ``x-should-retry``, which the official clients obey (they
    retry 409 and 5xx by default; a failed run must not silently run again)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        run_id: str | None = None,
        retry: bool | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message if param is None else f"{param}: {message}")
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.run_id = run_id
        self.retry = retry
        self.retry_after = retry_after

    @property
    def type(self) -> str:
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> ErrorBody:
        return ErrorBody(
            error=ErrorDetail(
                message=self.message,
                type=self.type,
                param=self.param,
                code=self.code,
                run_id=self.run_id,
            )
        )


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    param: str | None
    code: str | None
    run_id: str | None = None
    """agentrt's addition: the run the error is about, when there is one."""


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorDetail


_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<field>[^`]+)`")
_UNKNOWN = re.compile(r"unknown field `(?P<field>[^`]+)`")


def decode_error(exc: msgspec.DecodeError, *, prefix: str = "") -> OpenAIError:
    """A 400 naming the field msgspec's message points at (``messages[0].role``)."""
    text = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        return OpenAIError(400, f"the request body is not valid JSON: {text}", code="invalid_json")
    found = _AT.search(text)
    path = found.group("path") if found else ""
    reason = text[: found.start()] if found else text
    named = _MISSING.search(reason) or _UNKNOWN.search(reason)
    if named is not None:
        path = f"{path}.{named.group('field')}" if path else named.group("field")
    param = ".".join(p for p in (prefix, path) if p) or None
    return OpenAIError(400, reason, param=param, code="invalid_value")


# -- the request ----------------------------------------------------------------


class ContentPart(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: str
    text: str | None = None
    image_url: Any = None
    input_audio: Any = None
    file: Any = None
    refusal: str | None = None


class FunctionCallIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str = ""
    arguments: str = ""


class ToolCallIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCallIn | None = None


class MessageIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A message of the conversation; ``audio`` and ``function_call`` are
    refused, ``refusal`` is read as the assistant's text, ``annotations``
    (output metadata a client echoes back) carry nothing for the task."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None
    annotations: list[Any] | None = None
    reasoning_content: str | None = None
    """agentrt's own progress (streamed as reasoning), echoed back by
    clients: not part of the conversation."""
    audio: Any = None
    function_call: Any = None


class StreamOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class FunctionDefIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    """Accepted: the schema is offered to the model; agentrt does not
    constrain decoding, the arguments are the model's."""


class ToolIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: str
    function: FunctionDefIn | None = None
    custom: Any = None


class NamedFunction(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str


class NamedToolChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: str
    function: NamedFunction | None = None


class JsonSchemaIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str = "answer"
    description: str = ""
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseFormatIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaIn | None = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What an OpenAI client posts.  Every field OpenAI defines is here and
    either honoured or refused with a 400 naming it (``chat_requested``); a
    field OpenAI does not define is a 400 too.  agentrt's own fields
    (``rollouts``, ``aggregate``, ``aggregate_options``, ``budget`` or an
    ``agentrt`` object) scale the run."""

    model: str
    messages: Annotated[list[MessageIn], msgspec.Meta(min_length=1)]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None
    response_format: ResponseFormatIn | None = None
    tools: list[ToolIn] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    store: bool | None = None
    service_tier: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None
    prompt_cache_retention: str | None = None
    rollouts: Annotated[int, msgspec.Meta(ge=1)] | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    agentrt: ScalingIn | None = None


class ScalingIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``agentrt`` object of a request (``extra_body={"agentrt": {...}}``)."""

    rollouts: Annotated[int, msgspec.Meta(ge=1)] | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None


def decode_request(body: bytes) -> ChatCompletionRequest:
    try:
        request = msgspec.json.decode(body, type=ChatCompletionRequest)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
    if not request.messages:
        raise OpenAIError(400, "at least one message is required", param="messages")
    if request.n not in (None, 1):
        raise OpenAIError(
            400,
            f"n={request.n}: an agentrt run returns one answer; ask for several "
            "rollouts with `rollouts` (they are aggregated into that answer)",
            param="n",
        )
    return request


# -- from messages to a task ------------------------------------------------------

_SYSTEM_ROLES = frozenset({"system", "developer"})


def _text(message: MessageIn, index: int) -> str:
    for name in ("audio", "function_call"):
        if getattr(message, name) is not None:
            raise OpenAIError(
                400,
                f"agentrt does not support `{name}` in messages (text and tool calls only)",
                param=f"messages[{index}].{name}",
                code="unsupported_parameter",
            )
    content = message.content
    if content is None:
        return message.refusal or ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for j, part in enumerate(content):
        text = (
            part.text if part.type == "text" else part.refusal if part.type == "refusal" else None
        )
        if text is None:
            raise OpenAIError(
                400,
                f"only text content parts are supported, got {part.type!r}",
                param=f"messages[{index}].content[{j}]",
                code="unsupported_parameter",
            )
        texts.append(text)
    return "\n".join(texts)


def _transcript_line(message: MessageIn, index: int, names: dict[str, str]) -> str:
    text = _text(message, index)
    match message.role:
        case "user":
            return f"User: {text}"
        case "assistant":
            calls = [
                f"{c.function.name}({c.function.arguments}) [call {c.id}]"
                if c.id
                else f"{c.function.name}({c.function.arguments})"
                for c in message.tool_calls or []
                if c.function is not None
            ]
            said = f"Assistant: {text}" if text else "Assistant:"
            return f"{said}\n(called {', '.join(calls)})" if calls else said
        case _:  # tool / function results
            call = message.tool_call_id
            name = message.name or (names.get(call) if call else None) or "tool"
            return f"Tool result of {name}{f' [call {call}]' if call else ''}: {text}"


def build_task(messages: list[MessageIn]) -> str:
    """The run's task: a lone user message is the task itself; a longer
    exchange becomes a transcript with roles, to which the agent replies.
    System (and developer) messages come first, as instructions."""
    instructions = [_text(m, i) for i, m in enumerate(messages) if m.role in _SYSTEM_ROLES]
    turns = [(i, m) for i, m in enumerate(messages) if m.role not in _SYSTEM_ROLES]
    if not any(m.role == "user" for _, m in turns):
        raise OpenAIError(400, "at least one user message is required", param="messages")
    if len(turns) == 1:
        index, only = turns[0]
        body = _text(only, index)
        if not body.strip():
            raise OpenAIError(400, "the user message is empty", param=f"messages[{index}].content")
        head = "Task:\n" if instructions else ""
        body = head + body
    else:
        names = {
            c.id: c.function.name
            for _, m in turns
            for c in m.tool_calls or []
            if c.function is not None and c.id
        }
        lines = "\n\n".join(_transcript_line(m, i, names) for i, m in turns)
        body = f"Conversation so far:\n\n{lines}\n\nReply to the user's last message."
    if instructions:
        return "Instructions:\n" + "\n\n".join(instructions) + "\n\n" + body
    return body


# -- responses ---------------------------------------------------------------------


class PromptDetails(msgspec.Struct, frozen=True, kw_only=True):
    cached_tokens: int = 0


class UsageOut(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptDetails


class RolloutOut(msgspec.Struct, frozen=True, kw_only=True):
    rollout_id: str
    status: str
    steps: int
    answer: str | None


class Extension(msgspec.Struct, frozen=True, kw_only=True):
    """The ``agentrt`` field of a completion: the run behind the answer."""

    run_id: str
    status: str
    agent: str
    rollouts: int
    aggregate: str
    cost_usd: float
    model_calls: int
    rollout_details: list[RolloutOut] = []


class FunctionCallOut(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: str


class ToolCallOut(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class TopLogprobOut(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprobOut]


class LogprobsOut(msgspec.Struct, frozen=True, kw_only=True):
    content: list[TokenLogprobOut] | None
    refusal: None = None


FinishReasonOut = Literal["stop", "length", "tool_calls"]


class AssistantOut(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallOut] | None = None


class ChoiceOut(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    message: AssistantOut
    finish_reason: FinishReasonOut = "stop"
    logprobs: LogprobsOut | None = None


class ChatCompletion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: UsageOut
    agentrt: Extension


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class Delta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    """Progress of the run (and a thinking model's reasoning), where clients
    that show reasoning show it."""
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    delta: Delta
    finish_reason: FinishReasonOut | None = None
    logprobs: LogprobsOut | None = None


class ChatCompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsageOut | None = None
    agentrt: Extension | None = None


class ModelCard(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "agentrt"


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def usage_of(info: RunInfo) -> UsageOut:
    usage = info.cost.usage
    return UsageOut(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=PromptDetails(cached_tokens=usage.cached_prompt_tokens),
    )


def extension_of(info: RunInfo, rollouts: list[RolloutInfo]) -> Extension:
    return Extension(
        run_id=info.run_id,
        status=info.status,
        agent=info.agent,
        rollouts=info.rollouts,
        aggregate=info.aggregate,
        cost_usd=info.cost.usd,
        model_calls=info.cost.model_calls,
        rollout_details=[
            RolloutOut(rollout_id=r.rollout_id, status=r.status, steps=r.steps, answer=r.answer)
            for r in rollouts
        ],
    )


__all__ = [
    "AssistantOut",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChoiceOut",
    "ChunkChoice",
    "Delta",
    "ErrorBody",
    "Extension",
    "FinishReasonOut",
    "FunctionCallOut",
    "LogprobsOut",
    "MessageIn",
    "ModelCard",
    "ModelList",
    "OpenAIError",
    "ScalingIn",
    "TokenLogprobOut",
    "ToolCallDelta",
    "ToolCallIn",
    "ToolCallOut",
    "TopLogprobOut",
    "UsageOut",
    "build_task",
    "decode_error",
    "decode_request",
    "extension_of",
    "usage_of",
]
