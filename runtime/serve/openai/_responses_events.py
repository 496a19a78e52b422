"""The typed events of a streamed ``/v1/responses`` (``StreamEvent``),
each numbered by its ``sequence_number``.

Pure wire types; part of the daemon (``agentrt.runtime.serve``).
"""

from __future__ import annotations

import msgspec

from agentrt.runtime.serve.openai._responses_wire import (
    LogprobOut,
    OutputItem,
    OutputText,
    ResponseObject,
)


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
)


__all__ = [
    "ArgumentsDelta",
    "ArgumentsDone",
    "ContentPartAdded",
    "ContentPartDone",
    "OutputItemAdded",
    "OutputItemDone",
    "OutputTextDelta",
    "OutputTextDone",
    "ResponseCompleted",
    "ResponseCreated",
    "ResponseFailed",
    "ResponseInProgress",
    "StreamEvent",
]
