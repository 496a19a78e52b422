"""The OpenAI Responses wire of the daemon's ``/v1/responses``.

Owns the request as clients send it (``ResponseRequest``: every field the
Responses API defines, each honoured or refused with a 400 naming it), the
conversation its ``input`` items make (as chat messages, for the task) and
the ``Response`` object (its stream events: ``responses_events``).

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only ``responses`` imports it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from agentrt.protocols._messages import ToolCall
from agentrt.protocols._model import TokenLogprob
from agentrt.runtime.serve.openai._chat_wire import (
    ContentPart,
    Extension,
    FunctionCallIn,
    MessageIn,
    OpenAIError,
    ScalingIn,
    ToolCallIn,
    decode_error,
)
from agentrt.runtime.serve.openai._openai_options import (
    FunctionTool,
    Requested,
    Sampling,
    refuse,
    refuse_set,
    requested,
    response_schema,
)

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
    ``function_call`` the model made earlier, or its ``function_call_output``."""

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
    conversation: Any = None
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


def decode_response_request(body: bytes) -> ResponseRequest:
    try:
        return msgspec.json.decode(body, type=ResponseRequest)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None


def _part_text(parts: str | list[InputPart] | None, param: str) -> str:
    if parts is None or isinstance(parts, str):
        return parts or ""
    texts: list[str] = []
    for j, part in enumerate(parts):
        if part.type not in ("input_text", "output_text", "text") or part.text is None:
            raise refuse(f"{param}[{j}]", f"only text content is supported, got {part.type!r}")
        texts.append(part.text)
    return "\n".join(texts)


def _add_item(messages: list[MessageIn], item: InputItem, param: str) -> None:
    match item.type:
        case "message":
            if item.role is None:
                raise OpenAIError(400, "a message needs its `role`", param=f"{param}.role")
            text = _part_text(item.content, f"{param}.content")
            messages.append(MessageIn(role=item.role, content=text))
        case "function_call":
            if not item.call_id or not item.name:
                raise OpenAIError(400, "a function_call needs `call_id` and `name`", param=param)
            call = ToolCallIn(
                id=item.call_id,
                function=FunctionCallIn(name=item.name, arguments=item.arguments or ""),
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(MessageIn(role="assistant", tool_calls=[call]))
        case "function_call_output":
            if not item.call_id:
                raise OpenAIError(
                    400, "a function_call_output needs `call_id`", param=f"{param}.call_id"
                )
            text = _part_text(item.output, f"{param}.output")
            messages.append(
                MessageIn(
                    role="tool",
                    content=[ContentPart(type="text", text=text)],
                    tool_call_id=item.call_id,
                )
            )
        case _:
            raise refuse(
                f"{param}.type",
                f"input items of type {item.type!r} are not supported (messages, "
                "function_call and function_call_output are)",
            )


def input_messages(request: ResponseRequest) -> list[MessageIn]:
    """The conversation the request's ``instructions`` and ``input`` make, as
    chat messages (a function call joins the assistant message before it)."""
    messages: list[MessageIn] = []
    if request.instructions:
        messages.append(MessageIn(role="system", content=request.instructions))
    if isinstance(request.input, str):
        messages.append(MessageIn(role="user", content=request.input))
        return messages
    for i, item in enumerate(request.input):
        _add_item(messages, item, f"input[{i}]")
    if not any(m.role == "user" for m in messages):
        raise OpenAIError(400, "the input needs at least one user message", param="input")
    return messages


def responses_requested(
    request: ResponseRequest,
    *,
    default_rollouts: int,
    default_aggregate: str,
    default_options: dict[str, Any],
) -> Requested:
    """What a Responses request asks of its run; fields agentrt cannot
    honour with the value given are refused (a 400 naming the field)."""
    refuse_set("previous_response_id", request.previous_response_id)
    refuse_set("conversation", request.conversation)
    refuse_set("background", request.background, (None, False))
    refuse_set("prompt", request.prompt)
    refuse_set("max_tool_calls", request.max_tool_calls)
    refuse_set("context_management", request.context_management)
    refuse_set("prompt_cache_retention", request.prompt_cache_retention)
    refuse_set("prompt_cache_options", request.prompt_cache_options)
    refuse_set("moderation", request.moderation)
    refuse_set("access_programs", request.access_programs)
    refuse_set("background_options", request.background_options)
    refuse_set("image", request.image)
    refuse_set("store", request.store, (None, True))
    refuse_set("service_tier", request.service_tier, (None, "auto", "default"))
    if request.reasoning and any(v is not None for v in request.reasoning.values()):
        raise refuse("reasoning", "agentrt does not support `reasoning` options; leave them out")
    if request.stream_options is not None and not request.stream:
        raise OpenAIError(400, "stream_options needs `stream: true`", param="stream_options")
    include = request.include or []
    for j, name in enumerate(include):
        if name != LOGPROBS_INCLUDE:
            raise refuse(f"include[{j}]", f"only {LOGPROBS_INCLUDE!r} can be included")
    logprobs = LOGPROBS_INCLUDE in include
    if request.top_logprobs and not logprobs:
        raise OpenAIError(
            400, f"top_logprobs needs include=[{LOGPROBS_INCLUDE!r}]", param="top_logprobs"
        )
    tools: list[FunctionTool] = []
    for index, tool in enumerate(request.tools or []):
        if tool.type != "function" or tool.name is None:
            raise refuse(
                f"tools[{index}].type", f"only function tools are supported, got {tool.type!r}"
            )
        tools.append(
            FunctionTool(
                name=tool.name, description=tool.description or "", parameters=tool.parameters
            )
        )
    choice = request.tool_choice
    if choice is not None and not isinstance(choice, str):
        raise refuse(
            "tool_choice", "a named tool choice is not supported; use 'auto', 'none' or 'required'"
        )
    if choice == "required" and not tools:
        raise OpenAIError(400, "tool_choice 'required' needs `tools`", param="tool_choice")
    schema = None
    if request.text is not None:
        refuse_set("text.verbosity", request.text.verbosity)
        fmt = request.text.format
        if fmt is not None:
            schema = response_schema(fmt.type, fmt.schema, "text.format.schema")
    return requested(
        request,
        Sampling(
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_output_tokens,
            logprobs=logprobs,
            top_logprobs=request.top_logprobs,
        ),
        tools=tools,
        tools_param="tools",
        tool_choice=choice or "auto",
        schema=schema,
        parallel_tool_calls=request.parallel_tool_calls,
        default_rollouts=default_rollouts,
        default_aggregate=default_aggregate,
        default_options=default_options,
    )


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


OutputItem = OutputMessage | FunctionCallItem


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
    tools: list[FunctionToolOut] = []
    tool_choice: str = "auto"
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


def echo(request: ResponseRequest) -> dict[str, Any]:
    """The request's settings a ``Response`` repeats."""
    fmt = request.text.format if request.text is not None else None
    return {
        "instructions": request.instructions,
        "tools": [
            FunctionToolOut(
                name=t.name or "",
                description=t.description,
                parameters=t.parameters,
                strict=t.strict,
            )
            for t in request.tools or []
        ],
        "tool_choice": request.tool_choice if isinstance(request.tool_choice, str) else "auto",
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "text": TextOut(
            format=FormatOut(type=fmt.type, name=fmt.name, schema=fmt.schema, strict=fmt.strict)
            if fmt is not None
            else FormatOut()
        ),
        "truncation": request.truncation or "disabled",
        "metadata": request.metadata or {},
    }


def logprobs_out(logprobs: list[TokenLogprob] | None) -> list[LogprobOut]:
    return [
        LogprobOut(
            token=t.token,
            logprob=t.logprob,
            bytes=list(t.token.encode()),
            top_logprobs=[
                ResponseTopLogprob(token=a.token, logprob=a.logprob, bytes=list(a.token.encode()))
                for a in t.top
            ],
        )
        for t in logprobs or []
    ]


def output_items(
    run_id: str, text: str, calls: list[ToolCall], logprobs: list[TokenLogprob] | None
) -> list[OutputItem]:
    """A message with the answer's text (unless it ended on client calls with
    none), then one ``function_call`` per client tool call."""
    items: list[OutputItem] = []
    if text or not calls:
        items.append(
            OutputMessage(
                id=f"msg_{run_id}",
                content=[OutputText(text=text, logprobs=logprobs_out(logprobs))],
            )
        )
    items.extend(
        FunctionCallItem(
            id=f"fc_{c.id}", call_id=c.id, name=c.function.name, arguments=c.function.arguments
        )
        for c in calls
    )
    return items


__all__ = [
    "LOGPROBS_INCLUDE",
    "FunctionCallItem",
    "InputItem",
    "OutputItem",
    "OutputMessage",
    "OutputText",
    "ResponseError",
    "ResponseObject",
    "ResponseRequest",
    "ResponseUsage",
    "decode_response_request",
    "echo",
    "input_messages",
    "logprobs_out",
    "output_items",
    "responses_requested",
]
