"""The chat-completions wire, every side of it.

Four groups, by direction (names say which):

- ``RawChatRequest``: the request as the model client sends it and a
  lenient server (the sim-server, like vLLM or SGLang) reads it; messages
  and tools stay raw JSON (the client encodes each once, ``EncodedParts``;
  the sim-server decodes each distinct one once), unknown fields are ignored.
- ``ChatCompletionRequest`` and its ``...In`` parts: the request as the
  daemon decodes and validates it (every field OpenAI defines, a field it
  does not is refused, bounds checked; the OpenAPI document is built from
  these types).
- ``ChatCompletion``, ``ChatCompletionChunk`` and their ``...Out`` parts:
  the reply as the daemon writes it (the sim-server writes its usage,
  logprobs and tool calls with the same types).
- ``ReplyCompletion``, ``ReplyChunk`` and their ``Reply...`` parts: the reply
  as the model client reads it from any server, leniently (vLLM, SGLang,
  llama.cpp and OpenAI each omit or add different fields).  These are
  ``gc=False`` (no cycles; spares the collector per call).

Pure data: no I/O.  Imports only msgspec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from agentrt.runtime.wire._common import Extension, ScalingIn, StreamOptions

__all__ = [
    "AssistantOut",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChoiceOut",
    "ChunkChoice",
    "ContentPart",
    "Delta",
    "FinishReasonOut",
    "FunctionCallIn",
    "FunctionCallOut",
    "FunctionDefIn",
    "JsonSchemaIn",
    "LogprobsOut",
    "MessageIn",
    "NamedFunction",
    "NamedToolChoice",
    "PromptDetails",
    "RawChatRequest",
    "ReplyChoice",
    "ReplyChunk",
    "ReplyChunkChoice",
    "ReplyCompletion",
    "ReplyDelta",
    "ReplyFunction",
    "ReplyLogprobs",
    "ReplyMessage",
    "ReplyPromptDetails",
    "ReplyTokenLogprob",
    "ReplyToolCall",
    "ReplyTopLogprob",
    "ReplyUsage",
    "ResponseFormatIn",
    "TokenLogprobOut",
    "ToolCallDelta",
    "ToolCallIn",
    "ToolCallOut",
    "ToolIn",
    "TopLogprobOut",
    "UsageOut",
    "raw_chat_decoder",
    "reply_chunk_decoder",
    "reply_decoder",
]

# -- the request as a client sends it -------------------------------------------


class RawChatRequest(msgspec.Struct, gc=False, omit_defaults=True, kw_only=True):
    """The body of ``POST /chat/completions`` as the model client sends it
    (``messages`` and ``tools`` already encoded, ``EncodedParts``) and the
    sim-server reads it (each distinct message decoded once).  Unknown fields
    are ignored, as real servers do; a request without ``model`` asks for the
    server's one model (the client always names it)."""

    model: str | None = None
    messages: list[msgspec.Raw]
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    tools: list[msgspec.Raw] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: int | None = None
    parallel_tool_calls: bool | None = None

    def tool_choice_name(self) -> str:
        """``auto``/``none``/``required`` or the name of a forced function."""
        choice = self.tool_choice
        if choice is None:
            return "auto"
        if isinstance(choice, str):
            return choice
        fn = choice.get("function")
        return str(fn.get("name", "required")) if isinstance(fn, dict) else "required"


# -- the request as the daemon validates it -------------------------------------


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


# -- the reply as the daemon writes it ------------------------------------------


class PromptDetails(msgspec.Struct, frozen=True, kw_only=True):
    cached_tokens: int = 0


class UsageOut(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptDetails


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


# -- the reply as a client reads it (from any server) ---------------------------


class ReplyTopLogprob(msgspec.Struct, gc=False):
    token: str
    logprob: float


class ReplyTokenLogprob(msgspec.Struct, gc=False):
    token: str
    logprob: float
    top_logprobs: list[ReplyTopLogprob] | None = None


class ReplyLogprobs(msgspec.Struct, gc=False):
    content: list[ReplyTokenLogprob] | None = None


class ReplyFunction(msgspec.Struct, gc=False):
    name: str | None = None
    # Some servers send parsed arguments (an object) instead of JSON text.
    arguments: str | dict[str, Any] | None = None


class ReplyToolCall(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: ReplyFunction | None = None


class ReplyMessage(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ReplyToolCall] | None = None


class ReplyChoice(msgspec.Struct, gc=False):
    index: int = 0
    message: ReplyMessage | None = None
    finish_reason: str | None = None
    logprobs: ReplyLogprobs | None = None


class ReplyPromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class ReplyUsage(msgspec.Struct, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: ReplyPromptDetails | None = None


class ReplyCompletion(msgspec.Struct, gc=False):
    """A non-streaming reply."""

    choices: list[ReplyChoice]
    id: str = ""
    model: str = ""
    usage: ReplyUsage | None = None


class ReplyDelta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ReplyToolCall] | None = None


class ReplyChunkChoice(msgspec.Struct, gc=False):
    index: int = 0
    delta: ReplyDelta | None = None
    finish_reason: str | None = None
    logprobs: ReplyLogprobs | None = None


class ReplyChunk(msgspec.Struct, gc=False):
    """One SSE event of a streaming reply.  ``error`` is set when the server
    reports a failure inside the stream (vLLM and SGLang do)."""

    id: str = ""
    model: str = ""
    choices: list[ReplyChunkChoice] = []
    usage: ReplyUsage | None = None
    error: Any = None


raw_chat_decoder = msgspec.json.Decoder(RawChatRequest)
reply_decoder = msgspec.json.Decoder(ReplyCompletion)
reply_chunk_decoder = msgspec.json.Decoder(ReplyChunk)
