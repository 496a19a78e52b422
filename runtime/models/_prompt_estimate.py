"""Prompt-token estimates: how many tokens a request's prompt is, before a
server says.

Owns the ``TokenEstimator`` protocol, ``CharEstimator`` (characters divided
by a deliberately small ``chars_per_token``) and the per-message, per-tool
and per-request estimates that budget reservations are made on (the agent
loop and ``MeteredBackend`` use the same ones); and the calibration of
``chars_per_token`` from a backend's own tokenizer (``TokenCounter``), made
once per backend so that no request pays for tokenizing.  Must not import
agents, tools or aggregators.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Final, Protocol, final, runtime_checkable

import anyio
import msgspec

from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._tools import ToolSpec

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


@functools.lru_cache(maxsize=64)
def char_estimator(chars_per_token: float) -> CharEstimator:
    """One ``CharEstimator`` per ratio, shared (every rollout of an agent
    estimates with the same one)."""
    return CharEstimator(chars_per_token)


@runtime_checkable
class TokenCounter(Protocol):
    """A backend that can count tokens with the model's own tokenizer (the
    embedded model's llama.cpp vocabulary, a vLLM server's ``/tokenize``)."""

    async def count_tokens(self, text: str) -> int:
        """The number of tokens ``text`` is, without any template."""
        ...


#: Text tokenized once per backend to measure its characters per token: the
#: mix an agent's prompt holds (prose, a tool's JSON, code, numbers, a path).
CALIBRATION_TEXT: Final = (
    "You are a careful assistant. Use the tools when they help, and answer "
    "briefly once you know. The user asked how many files in the project "
    "import the logging module, and whether any of them configure it at "
    "import time, which a library should never do.\n"
    '{"name": "read_file", "arguments": {"path": "src/app/config.py", '
    '"start_line": 1, "end_line": 120}}\n'
    "def load(path: str) -> dict[str, object]:\n"
    "    with open(path, encoding='utf-8') as handle:\n"
    "        return json.load(handle)  # raises ValueError on bad input\n"
    "Result: 17 * 23 = 391; 2 ** 10 = 1024; 3.14159 rounds to 3.14.\n"
    "Traceback (most recent call last): FileNotFoundError: [Errno 2] "
    "No such file or directory: '/tmp/agentrt-7f3a/workspace/notes.txt'\n"
)
#: The calibrated ratio is scaled by this, so estimates stay a little generous
#: (a prompt's mix differs from the sample's).
CALIBRATION_MARGIN: Final = 0.9


async def calibrate_chars_per_token(counter: TokenCounter, *, timeout_s: float = 5.0) -> float:
    """Characters per token of ``counter``'s tokenizer on ``CALIBRATION_TEXT``,
    times ``CALIBRATION_MARGIN``.  Raises what the counter raises (or
    ``TimeoutError`` past ``timeout_s``), and ``ValueError`` for a count
    that cannot be right."""
    with anyio.fail_after(timeout_s):
        tokens = await counter.count_tokens(CALIBRATION_TEXT)
    if not 0 < tokens <= len(CALIBRATION_TEXT):
        raise ValueError(f"the tokenizer counted {tokens} tokens in {len(CALIBRATION_TEXT)} chars")
    return round(len(CALIBRATION_TEXT) / tokens * CALIBRATION_MARGIN, 3)


def message_tokens(message: ChatMessage, estimate: TokenEstimator) -> int:
    """Estimated tokens of one message, template overhead included."""
    if type(estimate) is CharEstimator:
        # ``CharEstimator.__call__``, written out: this runs twice a step.
        per = estimate.chars_per_token
        if type(message) is ToolMessage:
            return MESSAGE_OVERHEAD + math.ceil(len(message.content) / per)
        if type(message) is AssistantMessage:
            total = MESSAGE_OVERHEAD + math.ceil(len(message.content or "") / per)
            for call in message.tool_calls:
                function = call.function
                total += MESSAGE_OVERHEAD + math.ceil(
                    (len(function.name) + len(function.arguments)) / per
                )
            return total
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


def utf8_bytes(text: str) -> int:
    """The UTF-8 bytes of ``text``: no tokenizer makes more tokens of it
    (a byte-level BPE token covers one byte or more)."""
    return len(text.encode())


def prompt_token_bound(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> int:
    """The most tokens a request's prompt can be: ``estimate_request_tokens``
    with a token per UTF-8 byte of every text.  Several times the prompt
    served for ordinary text; what a call cancelled before any reply of its
    model measured a prompt is charged (``Reservation.prompt_bound``)."""
    return estimate_request_tokens(messages, tools, utf8_bytes)


__all__ = [
    "CALIBRATION_MARGIN",
    "CALIBRATION_TEXT",
    "MESSAGE_OVERHEAD",
    "REQUEST_OVERHEAD",
    "TOOLS_PREAMBLE",
    "TOOL_OVERHEAD",
    "CharEstimator",
    "TokenCounter",
    "TokenEstimator",
    "calibrate_chars_per_token",
    "estimate_request_tokens",
    "message_tokens",
    "prompt_token_bound",
    "tools_tokens",
    "utf8_bytes",
]
