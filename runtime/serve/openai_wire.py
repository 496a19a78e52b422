"""The OpenAI chat-completions wire of the daemon's OpenAI-compatible endpoint.

Owns the request as clients send it (``ChatCompletionRequest``, decoded once
with msgspec; fields agentrt does not use are accepted and ignored), turning
it into a ``RunRequest`` (``to_run_request``: the task from the messages, the
scaling options from the request's extra fields or its ``agentrt`` object),
the response and chunk shapes, and OpenAI's error shape (``OpenAIError``).

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only ``openai_compat`` imports it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, final

import msgspec

from agentrt.protocols import Budget, RunRequest, ScalingSpec
from agentrt.protocols.api import RolloutInfo, RunInfo
from agentrt.runtime.errors import AgentrtError

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
    ) -> None:
        super().__init__(message if param is None else f"{param}: {message}")
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.run_id = run_id
        self.retry = retry

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


class ContentPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


class FunctionCallIn(msgspec.Struct, kw_only=True):
    name: str = ""
    arguments: str = ""


class ToolCallIn(msgspec.Struct, kw_only=True):
    id: str = ""
    function: FunctionCallIn | None = None


class MessageIn(msgspec.Struct, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool | None = None


Rollouts = Annotated[int, msgspec.Meta(ge=1)]


class ScalingIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``agentrt`` object of a request (``extra_body={"agentrt": {...}}``)."""

    rollouts: Rollouts | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    """What an OpenAI client posts.  Sampling fields (``temperature``...) and
    client-side ``tools`` are accepted and ignored: the agent's configuration
    decides how it samples and which tools it has."""

    model: str
    messages: list[MessageIn]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    rollouts: Rollouts | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    agentrt: ScalingIn | None = None


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
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise OpenAIError(
                400,
                f"only text content parts are supported, got {part.type!r}",
                param=f"messages[{index}].content[{j}]",
            )
        texts.append(part.text)
    return "\n".join(texts)


def _transcript_line(message: MessageIn, index: int) -> str:
    text = _text(message, index)
    match message.role:
        case "user":
            return f"User: {text}"
        case "assistant":
            calls = [
                f"{c.function.name}({c.function.arguments})"
                for c in message.tool_calls or []
                if c.function is not None
            ]
            said = f"Assistant: {text}" if text else "Assistant:"
            return f"{said}\n(called {', '.join(calls)})" if calls else said
        case _:  # tool / function results
            who = message.name or message.tool_call_id or "tool"
            return f"Tool result ({who}): {text}"


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
        lines = "\n\n".join(_transcript_line(m, i) for i, m in turns)
        body = f"Conversation so far:\n\n{lines}\n\nReply to the user's last message."
    if instructions:
        return "Instructions:\n" + "\n\n".join(instructions) + "\n\n" + body
    return body


# -- to a RunRequest ---------------------------------------------------------------


def _option(request: ChatCompletionRequest, key: str) -> tuple[Any, str]:
    """A scaling option and where it came from (top level or ``agentrt``)."""
    top = getattr(request, key)
    nested = getattr(request.agentrt, key) if request.agentrt is not None else None
    if top is not None and nested is not None and top != nested:
        raise OpenAIError(
            400,
            f"{key} is given twice with different values ({top!r} at the top level, "
            f"{nested!r} in `agentrt`); give it once",
            param=f"agentrt.{key}",
        )
    if nested is not None:
        return nested, f"agentrt.{key}"
    return top, key


def _budget(raw: dict[str, Any] | None, where: str) -> Budget:
    if raw is None:
        return Budget()
    unknown = sorted(set(raw) - set(Budget.__struct_fields__))
    if unknown:
        known = ", ".join(Budget.__struct_fields__)
        raise OpenAIError(
            400,
            f"unknown budget field {unknown[0]!r}; known: {known}",
            param=f"{where}.{unknown[0]}",
        )
    try:
        return msgspec.convert(raw, Budget)
    except msgspec.ValidationError as exc:
        raise decode_error(exc, prefix=where) from None


def to_run_request(
    request: ChatCompletionRequest,
    *,
    agent: str,
    default_rollouts: int,
    default_aggregate: str,
    default_options: dict[str, Any],
) -> tuple[RunRequest, dict[str, str]]:
    """The run a chat request asks for, and where each scaling option came
    from (to name the right field when the manager refuses one)."""
    rollouts, rollouts_at = _option(request, "rollouts")
    aggregate, aggregate_at = _option(request, "aggregate")
    options, options_at = _option(request, "aggregate_options")
    budget_raw, budget_at = _option(request, "budget")
    if aggregate is None:
        aggregate = default_aggregate
        options = default_options if options is None else options
    scaling = ScalingSpec(
        rollouts=default_rollouts if rollouts is None else rollouts,
        aggregate=aggregate,
        options=options or {},
    )
    metadata = {"interface": "openai", **(request.metadata or {})}
    if request.user:
        metadata["user"] = request.user
    run = RunRequest(
        task=build_task(request.messages),
        agent=agent,
        scaling=scaling,
        budget=_budget(budget_raw, budget_at),
        metadata=metadata,
    )
    return run, {
        "scaling.rollouts": rollouts_at,
        "scaling.aggregate": aggregate_at,
        "scaling.options": options_at,
        "budget": budget_at,
        "task": "messages",
        "agent": "model",
    }


def param_for(where: str | None, fields: dict[str, str]) -> str | None:
    """The request field a manager's ``where`` (``scaling.rollouts``) names."""
    if where is None:
        return None
    for prefix, field in sorted(fields.items(), key=lambda kv: -len(kv[0])):
        if where == prefix or where.startswith(prefix + "."):
            return field + where[len(prefix) :]
    return where


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


class AssistantOut(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class ChoiceOut(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    message: AssistantOut
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class ChatCompletion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: UsageOut
    agentrt: Extension


class Delta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop"] | None = None
    logprobs: None = None


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
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChoiceOut",
    "ChunkChoice",
    "Delta",
    "ErrorBody",
    "Extension",
    "MessageIn",
    "ModelCard",
    "ModelList",
    "OpenAIError",
    "build_task",
    "decode_error",
    "decode_request",
    "extension_of",
    "param_for",
    "to_run_request",
    "usage_of",
]
