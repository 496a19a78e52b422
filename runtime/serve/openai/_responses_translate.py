"""The daemon's reading of a Responses request and its writing of the
``Response``: the request decoded (``decode_response_request``), the
conversation its ``input`` items make (``responses_asked``: native
messages, instructions, the task), what it asks of the run (``responses_requested``), and
the parts of a ``Response`` (``echo``, ``output_items``, ``logprobs_out``).
The wire types themselves: ``agentrt.runtime.wire``.

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only ``responses`` imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from agentrt.protocols._messages import ChatMessage, ToolCall
from agentrt.protocols._model import TokenLogprob
from agentrt.runtime.serve.openai._chat_translate import Asked, Tagged, asked_of, logprob_entries
from agentrt.runtime.serve.openai._openai_error import OpenAIError, decode_error
from agentrt.runtime.serve.openai._openai_options import (
    ClientTool,
    Defaults,
    Requested,
    Sampling,
    client_tool,
    named_choice,
    refuse,
    refuse_set,
    refuse_stream_options,
    refuse_unsupported,
    requested,
    response_schema,
    tool_choice_of,
)
from agentrt.runtime.wire._chat import ContentPart, FunctionCallIn, MessageIn, ToolCallIn
from agentrt.runtime.wire._responses import (
    LOGPROBS_INCLUDE,
    ConversationRef,
    FormatOut,
    FunctionCallItem,
    FunctionToolOut,
    InputItem,
    InputPart,
    LogprobOut,
    NamedChoice,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponseRequest,
    ResponseTopLogprob,
    TextOut,
)

__all__ = [
    "conversation_ref",
    "decode_response_request",
    "echo",
    "input_messages",
    "logprobs_out",
    "output_items",
    "responses_asked",
    "responses_requested",
]


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


def _add_item(messages: list[Tagged], item: InputItem, param: str) -> None:
    match item.type:
        case "message":
            if item.role is None:
                raise OpenAIError(400, "a message needs its `role`", param=f"{param}.role")
            text = _part_text(item.content, f"{param}.content")
            messages.append((param, MessageIn(role=item.role, content=text)))
        case "function_call":
            if not item.call_id or not item.name:
                raise OpenAIError(400, "a function_call needs `call_id` and `name`", param=param)
            call = ToolCallIn(
                id=item.call_id,
                function=FunctionCallIn(name=item.name, arguments=item.arguments or ""),
            )
            last = messages[-1][1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append((param, MessageIn(role="assistant", tool_calls=[call])))
        case "function_call_output":
            if not item.call_id:
                raise OpenAIError(
                    400, "a function_call_output needs `call_id`", param=f"{param}.call_id"
                )
            text = _part_text(item.output, f"{param}.output")
            messages.append(
                (
                    param,
                    MessageIn(
                        role="tool",
                        content=[ContentPart(type="text", text=text)],
                        tool_call_id=item.call_id,
                    ),
                )
            )
        case "reasoning":
            pass  # progress agentrt streamed (a reasoning summary), sent back: not the model's
        case _:
            raise refuse(
                f"{param}.type",
                f"input items of type {item.type!r} are not supported (messages, "
                "function_call, function_call_output and reasoning are)",
            )


def input_messages(request: ResponseRequest) -> list[Tagged]:
    """The conversation the request's ``instructions`` and ``input`` make, as
    chat messages, each with the field it came from (a function call joins
    the assistant message before it)."""
    messages: list[Tagged] = []
    if request.instructions:
        messages.append(("instructions", MessageIn(role="system", content=request.instructions)))
    if isinstance(request.input, str):
        messages.append(("input", MessageIn(role="user", content=request.input)))
        return messages
    for i, item in enumerate(request.input):
        _add_item(messages, item, f"input[{i}]")
    return messages


def conversation_ref(request: ResponseRequest) -> ConversationRef | None:
    """The conversation the request names (with ``previous_response_id`` too: a 400)."""
    named = request.conversation
    if named is not None and request.previous_response_id is not None:
        raise OpenAIError(
            400, "give `conversation` or `previous_response_id`, not both", param="conversation"
        )
    return ConversationRef(id=named) if isinstance(named, str) else named


def responses_asked(request: ResponseRequest, before: Sequence[ChatMessage] = ()) -> Asked:
    """What a Responses request's ``instructions`` and ``input`` ask, after
    the turns ``before`` them (its previous response's; ``asked_of``)."""
    return asked_of(input_messages(request), "input", "call_id", before)


_RESPONSES_UNSUPPORTED: Final = (
    "background prompt max_tool_calls context_management prompt_cache_retention "
    "prompt_cache_options moderation access_programs background_options image store service_tier"
)


def responses_requested(request: ResponseRequest, defaults: Defaults) -> Requested:
    """What a Responses request asks of its run; fields agentrt cannot
    honour with the value given are refused (a 400 naming the field)."""
    refuse_unsupported(request, _RESPONSES_UNSUPPORTED)
    if request.reasoning and any(v is not None for v in request.reasoning.values()):
        raise refuse("reasoning", "agentrt does not support `reasoning` options; leave them out")
    refuse_stream_options(request.stream_options, request.stream)
    include = request.include or []
    for j, name in enumerate(include):
        if name != LOGPROBS_INCLUDE:
            raise refuse(f"include[{j}]", f"only {LOGPROBS_INCLUDE!r} can be included")
    logprobs = LOGPROBS_INCLUDE in include
    if request.top_logprobs and not logprobs:
        raise OpenAIError(
            400, f"top_logprobs needs include=[{LOGPROBS_INCLUDE!r}]", param="top_logprobs"
        )
    tools = [
        client_tool(
            index,
            tool.type,
            ClientTool(
                name=tool.name, description=tool.description or "", parameters=tool.parameters
            )
            if tool.name is not None
            else None,
        )
        for index, tool in enumerate(request.tools or [])
    ]
    choice = request.tool_choice
    named = None
    if isinstance(choice, NamedChoice):
        named = named_choice(choice.type, choice.name or None, "{'type': 'function', 'name': ...}")
    tool_choice = tool_choice_of(choice, named, tools, "tool_choice.name")
    schema = None
    if request.text is not None:
        refuse_set("text.verbosity", request.text.verbosity)
        fmt = request.text.format
        if fmt is not None:
            schema = response_schema(fmt.type, fmt.schema, "text.format.schema")
    sampling = Sampling(
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_output_tokens,
        logprobs=logprobs,
        top_logprobs=request.top_logprobs,
    )
    return requested(request, sampling, tools, tool_choice, schema=schema, defaults=defaults)


def echo(request: ResponseRequest) -> dict[str, Any]:
    """The request's settings a ``Response`` repeats."""
    fmt = request.text.format if request.text is not None else None
    return {
        "instructions": request.instructions,
        "previous_response_id": request.previous_response_id,
        "conversation": conversation_ref(request),
        "tools": [
            FunctionToolOut(
                name=t.name or "",
                description=t.description,
                parameters=t.parameters,
                strict=t.strict,
            )
            for t in request.tools or []
        ],
        "tool_choice": request.tool_choice or "auto",
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
    return logprob_entries(logprobs or [], LogprobOut, ResponseTopLogprob)


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
