"""Chat messages and tool calls in the OpenAI chat-completions shape.

Messages are a tagged union on ``role``; an assistant message may carry
several tool calls (parallel calls), each answered by one ``ToolMessage``
whose ``tool_call_id`` names the call.
"""

from __future__ import annotations

from typing import Literal

import msgspec


# gc=False: frozen values holding no reference cycles (only other wire values,
# strings, numbers and lists of them), kept by the thousand while rollouts run;
# the cyclic collector need not track them.
class TextPart(msgspec.Struct, frozen=True, gc=False, tag="text", tag_field="type"):
    """A text segment of a multi-part message."""

    text: str


class ImagePart(msgspec.Struct, frozen=True, gc=False, tag="image_url", tag_field="type"):
    """An image, by URL or ``data:`` URI, in OpenAI's ``image_url`` shape."""

    image_url: dict[str, str]


Content = str | list[TextPart | ImagePart]


class FunctionCall(msgspec.Struct, frozen=True, gc=False):
    """The function a model asked for.  ``arguments`` is the raw JSON text as
    the model produced it: it may be malformed, and validating it is the
    agent loop's job, not the wire's."""

    name: str
    arguments: str = "{}"


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    """One tool call in an assistant message (OpenAI shape)."""

    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class SystemMessage(msgspec.Struct, frozen=True, gc=False, tag="system", tag_field="role"):
    content: str
    name: str | None = None


class UserMessage(msgspec.Struct, frozen=True, gc=False, tag="user", tag_field="role"):
    content: Content
    name: str | None = None


class AssistantMessage(msgspec.Struct, frozen=True, gc=False, tag="assistant", tag_field="role"):
    content: str | None = None
    tool_calls: list[ToolCall] = []
    reasoning_content: str | None = None
    name: str | None = None


class ToolMessage(msgspec.Struct, frozen=True, gc=False, tag="tool", tag_field="role"):
    content: str
    tool_call_id: str
    name: str | None = None


ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage
