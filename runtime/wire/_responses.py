"""The Responses wire (``/v1/responses``), as the daemon serves it.

The request as the daemon decodes and validates it (``ResponseRequest`` and
its ``...In`` parts: every field the Responses API defines, a field it does
not is refused), the ``Response`` object it returns (``ResponseObject``) and
the typed events of a streamed response (``StreamEvent``, each numbered by
its ``sequence_number``).  The OpenAPI document is built from these types.

Pure data: no I/O.  Imports only msgspec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from agentrt.runtime.wire._common import Extension, ScalingIn

__all__ = [
    "LOGPROBS_INCLUDE",
    "ArgumentsDelta",
    "ArgumentsDone",
    "ContentPartAdded",
    "ContentPartDone",
    "ConversationCreate",
    "ConversationDeleted",
    "ConversationObject",
    "ConversationRef",
    "FormatIn",
    "FormatOut",
    "FunctionCallItem",
    "FunctionToolIn",
    "FunctionToolOut",
    "InputDetails",
    "InputItem",
    "InputPart",
    "LogprobOut",
    "NamedChoice",
    "OutputDetails",
    "OutputItem",
    "OutputItemAdded",
    "OutputItemDone",
    "OutputMessage",
    "OutputText",
    "OutputTextDelta",
    "OutputTextDone",
    "ReasoningItem",
    "ResponseCompleted",
    "ResponseCreated",
    "ResponseError",
    "ResponseFailed",
    "ResponseInProgress",
    "ResponseObject",
    "ResponseRequest",
    "ResponseStatus",
    "ResponseStreamOptions",
    "ResponseTopLogprob",
    "ResponseUsage",
    "StreamEvent",
    "SummaryPartAdded",
    "SummaryPartDone",
    "SummaryText",
    "SummaryTextDelta",
    "SummaryTextDone",
    "TextIn",
    "TextOut",
]

# -- the request ----------------------------------------------------------------


class InputPart(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A content part of an input message; text only."""

    type: str
    text: str | None = None
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None
    image_url: Any = None
    file_id: Any = None
    file_data: Any = None
    file_url: Any = None
    filename: Any = None
    detail: Any = None


class InputItem(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An item of ``input``: a message (``type`` ``message`` or left out), a
    ``function_call`` the model made earlier, or its ``function_call_output``
    (a ``reasoning`` item, agentrt's progress sent back, is skipped)."""

    type: str = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[InputPart] | None = None
    id: str | None = None
    status: str | None = None
    phase: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[InputPart] | None = None
    summary: list[Any] | None = None
    """Of a ``reasoning`` item (progress a client sends back: skipped)."""
    encrypted_content: str | None = None


class FunctionToolIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: str
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    """Accepted: the schema is offered to the model; agentrt does not
    constrain decoding."""


class FormatIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    format: FormatIn | None = None
    verbosity: str | None = None


class NamedChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: str
    name: str | None = None


class ConversationRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: Annotated[str, msgspec.Meta(min_length=1)]


class ConversationCreate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/conversations``; starting ``items`` are refused (a
    conversation starts with its first response)."""

    items: list[Any] | None = None
    metadata: dict[str, str] | None = None


class ConversationObject(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str] = {}


class ConversationDeleted(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class ResponseStreamOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    include_obfuscation: bool | None = None


LOGPROBS_INCLUDE = "message.output_text.logprobs"


class ResponseRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a Responses client posts (``responses_requested`` says which
    fields are honoured and which refused); agentrt's own fields
    (``rollouts``... or an ``agentrt`` object) scale the run."""

    model: str
    input: (
        Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")]
        | Annotated[list[InputItem], msgspec.Meta(min_length=1)]
    )
    instructions: str | None = None
    stream: bool | None = None
    stream_options: ResponseStreamOptions | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None
    include: list[str] | None = None
    tools: list[FunctionToolIn] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextIn | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    store: bool | None = None
    service_tier: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    """A conversation (``POST /v1/conversations``: a daemon thread) the
    response goes on with and joins."""
    background: bool | None = None
    prompt: Any = None
    reasoning: dict[str, Any] | None = None
    max_tool_calls: int | None = None
    context_management: Any = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: Any = None
    moderation: Any = None
    access_programs: Any = None
    background_options: Any = None
    image: Any = None
    rollouts: Annotated[int, msgspec.Meta(ge=1)] | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    agentrt: ScalingIn | None = None


# -- the response ---------------------------------------------------------------


class ResponseTopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]


class LogprobOut(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[ResponseTopLogprob]


class OutputText(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[LogprobOut] = []


class OutputMessage(msgspec.Struct, frozen=True, kw_only=True, tag="message", tag_field="type"):
    id: str
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed"] = "completed"
    content: list[OutputText] = []


class FunctionCallItem(
    msgspec.Struct, frozen=True, kw_only=True, tag="function_call", tag_field="type"
):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed"] = "completed"


class SummaryText(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningItem(msgspec.Struct, frozen=True, kw_only=True, tag="reasoning", tag_field="type"):
    """agentrt's progress while several rollouts run (rollouts started and
    finished, the aggregation's rounds), as a reasoning summary a client
    shows apart from the answer; sent back in ``input``, it is skipped."""

    id: str
    summary: list[SummaryText] = []
    status: Literal["in_progress", "completed"] = "completed"


OutputItem = OutputMessage | FunctionCallItem | ReasoningItem


class FunctionToolOut(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["function"] = "function"
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class InputDetails(msgspec.Struct, frozen=True, kw_only=True):
    cached_tokens: int = 0


class OutputDetails(msgspec.Struct, frozen=True, kw_only=True):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int
    input_tokens_details: InputDetails
    output_tokens: int
    output_tokens_details: OutputDetails
    total_tokens: int


class ResponseError(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str


class FormatOut(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: str = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class TextOut(msgspec.Struct, frozen=True, kw_only=True):
    format: FormatOut = FormatOut()


ResponseStatus = Literal["in_progress", "completed", "failed", "cancelled"]


class ResponseObject(msgspec.Struct, frozen=True, kw_only=True):
    """The ``Response`` a create returns (and stream events carry)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    model: str
    output: list[OutputItem] = []
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: ConversationRef | None = None
    tools: list[FunctionToolOut] = []
    tool_choice: str | NamedChoice = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    text: TextOut = TextOut()
    truncation: str = "disabled"
    metadata: dict[str, str] = {}
    usage: ResponseUsage | None = None
    error: ResponseError | None = None
    incomplete_details: None = None
    agentrt: Extension | None = None


# -- the stream events ----------------------------------------------------------


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    sequence_number: int


class ResponseCreated(_Event, frozen=True, kw_only=True, tag="response.created"):
    response: ResponseObject


class ResponseInProgress(_Event, frozen=True, kw_only=True, tag="response.in_progress"):
    response: ResponseObject


class ResponseCompleted(_Event, frozen=True, kw_only=True, tag="response.completed"):
    response: ResponseObject


class ResponseFailed(_Event, frozen=True, kw_only=True, tag="response.failed"):
    response: ResponseObject


class OutputItemAdded(_Event, frozen=True, kw_only=True, tag="response.output_item.added"):
    output_index: int
    item: OutputItem


class OutputItemDone(_Event, frozen=True, kw_only=True, tag="response.output_item.done"):
    output_index: int
    item: OutputItem


class ContentPartAdded(_Event, frozen=True, kw_only=True, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class ContentPartDone(_Event, frozen=True, kw_only=True, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class OutputTextDelta(_Event, frozen=True, kw_only=True, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[LogprobOut] = []


class OutputTextDone(_Event, frozen=True, kw_only=True, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[LogprobOut] = []


class ArgumentsDelta(
    _Event, frozen=True, kw_only=True, tag="response.function_call_arguments.delta"
):
    item_id: str
    output_index: int
    delta: str


class ArgumentsDone(_Event, frozen=True, kw_only=True, tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    name: str
    arguments: str


class SummaryPartAdded(
    _Event, frozen=True, kw_only=True, tag="response.reasoning_summary_part.added"
):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class SummaryPartDone(
    _Event, frozen=True, kw_only=True, tag="response.reasoning_summary_part.done"
):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class SummaryTextDelta(
    _Event, frozen=True, kw_only=True, tag="response.reasoning_summary_text.delta"
):
    item_id: str
    output_index: int
    summary_index: int
    delta: str


class SummaryTextDone(
    _Event, frozen=True, kw_only=True, tag="response.reasoning_summary_text.done"
):
    item_id: str
    output_index: int
    summary_index: int
    text: str


StreamEvent = (
    ResponseCreated
    | ResponseInProgress
    | ResponseCompleted
    | ResponseFailed
    | OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputTextDelta
    | OutputTextDone
    | ArgumentsDelta
    | ArgumentsDone
    | SummaryPartAdded
    | SummaryPartDone
    | SummaryTextDelta
    | SummaryTextDone
)
