"""Prompt-token estimates: how many tokens a request's prompt is, before a
server says.

Owns the ``TokenEstimator`` protocol, ``CharEstimator`` (characters divided
by a deliberately small ``chars_per_token``) and the per-message, per-tool
and per-request estimates that budget reservations are made on (the agent
loop and ``MeteredBackend`` use the same ones).  Pure computation; must not
import agents, tools or aggregators.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Protocol, final

import msgspec

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    TextPart,
    ToolMessage,
    ToolSpec,
    UserMessage,
)

#: Tokens a chat template adds around each message (role markers, separators).
MESSAGE_OVERHEAD: Final = 4
#: Tokens a chat template adds once when a request offers tools: the
#: instructions around the definitions (Hermes/Qwen-style templates write
#: about 100).  Generous on purpose: reservations are worst cases.
TOOLS_PREAMBLE: Final = 128
#: Tokens a template adds around each tool definition.
TOOL_OVERHEAD: Final = 8
#: Tokens a template adds once per request (the generation prompt).
REQUEST_OVERHEAD: Final = 8

_encoder = msgspec.json.Encoder()


class TokenEstimator(Protocol):
    """Estimates how many tokens a text is."""

    def __call__(self, text: str) -> int: ...


@final
class CharEstimator:
    """``ceil(len(text) / chars_per_token)``: cheap and, with a small divisor,
    generous."""

    __slots__ = ("chars_per_token",)

    def __init__(self, chars_per_token: float = 3.0) -> None:
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token}")
        self.chars_per_token = chars_per_token

    def __call__(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


def message_tokens(message: ChatMessage, estimate: TokenEstimator) -> int:
    """Estimated tokens of one message, template overhead included."""
    total = MESSAGE_OVERHEAD
    match message:
        case AssistantMessage(content=content, tool_calls=calls):
            total += estimate(content or "")
            for call in calls:
                total += MESSAGE_OVERHEAD + estimate(call.function.name + call.function.arguments)
        case UserMessage(content=str() as text) | SystemMessage(content=text):
            total += estimate(text)
        case UserMessage(content=list() as parts):
            for part in parts:
                # An image costs what the server says; count its URL as text.
                total += estimate(part.text if isinstance(part, TextPart) else str(part.image_url))
        case ToolMessage(content=text):
            total += estimate(text)
    return total


def tools_tokens(tools: Sequence[ToolSpec], estimate: TokenEstimator) -> int:
    """Estimated tokens of the tool definitions, template included."""
    if not tools:
        return 0
    text = _encoder.encode(list(tools)).decode()
    return TOOLS_PREAMBLE + TOOL_OVERHEAD * len(tools) + estimate(text)


def estimate_request_tokens(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], estimate: TokenEstimator
) -> int:
    """Estimated prompt tokens of a request (messages plus tools)."""
    messages_total = sum(message_tokens(m, estimate) for m in messages)
    return REQUEST_OVERHEAD + messages_total + tools_tokens(tools, estimate)


__all__ = [
    "MESSAGE_OVERHEAD",
    "REQUEST_OVERHEAD",
    "TOOLS_PREAMBLE",
    "TOOL_OVERHEAD",
    "CharEstimator",
    "TokenEstimator",
    "estimate_request_tokens",
    "message_tokens",
    "tools_tokens",
]
