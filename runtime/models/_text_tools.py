"""Tool calls carried as plain text, for models whose server has no tool API
(runtime floor): rendering tools, calls and results into chat text and
parsing calls back out (Hermes-style ``<tool_call>`` JSON, or a bare JSON
object naming an offered tool).  Used by the embedded llama.cpp backend.

Pure functions, no I/O.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import InvalidRequestError

_OPEN = "<tool_call>"
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

_INSTRUCTIONS = (
    "You can call tools. To call a tool, reply with nothing but one line per call:\n"
    '<tool_call>{"name": "TOOL_NAME", "arguments": {ARGUMENTS AS JSON}}</tool_call>\n'
    "Otherwise answer in plain text.\n"
    "Available tools:"
)
_REQUIRED = "You must call one of the tools; do not answer in plain text."


def render_tool_prompt(tools: Sequence[ToolSpec], *, required: bool = False) -> str:
    """The system-prompt section that offers ``tools`` to the model."""
    lines = [_INSTRUCTIONS]
    for tool in tools:
        schema = json.dumps(tool.parameters, separators=(",", ":"), sort_keys=True)
        description = f": {tool.description}" if tool.description else ""
        lines.append(f"- {tool.name}{description}\n  arguments (JSON Schema): {schema}")
    if required:
        lines.append(_REQUIRED)
    return "\n".join(lines)


def render_tool_calls(content: str | None, calls: Sequence[ToolCall]) -> str:
    """An assistant turn that made ``calls``, as the text the model would
    have produced under this convention (for replaying history)."""
    parts = [content] if content else []
    for call in calls:
        try:
            arguments: Any = json.loads(call.function.arguments)
        except json.JSONDecodeError:
            # Replay what the model said, even if it was malformed.
            arguments = call.function.arguments
        payload = json.dumps({"name": call.function.name, "arguments": arguments})
        parts.append(f"<tool_call>{payload}</tool_call>")
    return "\n".join(parts)


def render_tool_result(name: str | None, content: str) -> str:
    """A tool's result as a user-turn text block."""
    label = f' name="{name}"' if name else ""
    return f"<tool_response{label}>\n{content}\n</tool_response>"


def parse_tool_calls(text: str, tool_names: Sequence[str]) -> tuple[str | None, list[ToolCall]]:
    """Split generated ``text`` into (remaining content, tool calls).

    Never raises: only calls naming an offered tool count; anything
    unparseable stays in the content.  With no calls found the text is
    returned unchanged; with calls, a content of only whitespace becomes
    ``None``.
    """
    rest, calls = _split_calls(text, set(tool_names))
    if not calls:
        return text, []
    return (rest if rest.strip() else None), calls


class ToolCallStreamGate:
    """Streams a reply's text while holding back whatever may turn out to be
    a tool call, so that the streamed content always equals the final
    content.  ``feed`` returns what may be shown now; ``finish`` parses the
    whole text and returns (text still to show, final content, calls)."""

    def __init__(self, tool_names: Sequence[str]) -> None:
        self._offered = set(tool_names)
        self._text = ""
        self._shown = 0

    def feed(self, piece: str) -> str:
        self._text += piece
        if not self._offered:
            self._shown = len(self._text)
            return piece
        safe = self._safe_length()
        if safe <= self._shown:
            return ""
        out = self._text[self._shown : safe]
        self._shown = safe
        return out

    def finish(self) -> tuple[str, str | None, list[ToolCall]]:
        rest, calls = _split_calls(self._text, self._offered)
        if not calls:
            return self._text[self._shown :], self._text, []
        content = rest if rest.strip() else None
        return (rest[self._shown :] if content else ""), content, calls

    def _safe_length(self) -> int:
        text = self._text
        stripped = text.lstrip()
        if not stripped or stripped[0] in "{`":
            return 0  # may be a bare JSON call: show nothing until the end
        marker = text.find(_OPEN)
        if marker == -1:
            marker = len(text) - _partial_suffix(text, _OPEN)
        return marker if text[:marker].strip() else 0


def _split_calls(text: str, offered: set[str]) -> tuple[str, list[ToolCall]]:
    """(text outside well-formed call blocks, the calls); bare JSON counts
    as a call only when it is the whole text."""
    if not offered or not text.strip():
        return text, []
    calls: list[ToolCall] = []
    kept: list[str] = []
    cursor = 0
    for block in _TOOL_CALL_BLOCK.finditer(text):
        call = _parse_call(block.group(1), offered)
        if call is None:
            continue  # stays in the content: the next kept slice covers it
        calls.append(call)
        kept.append(text[cursor : block.start()])
        cursor = block.end()
    if calls:
        kept.append(text[cursor:])
        return "".join(kept), calls
    call = _parse_call(text, offered)
    if call is not None:
        return "", [call]
    return text, []


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


def _parse_call(raw: str, offered: set[str]) -> ToolCall | None:
    try:
        data = json.loads(_strip_code_fence(raw))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("name")
    if not isinstance(name, str) or name not in offered:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    # Some models double-encode the arguments; keep their string as the raw text.
    arguments_text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(
        id=f"call_{uuid.uuid4().hex[:16]}",
        function=FunctionCall(name=name, arguments=arguments_text),
    )


def _strip_code_fence(raw: str) -> str:
    stripped = raw.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        body = stripped[3:-3]
        # Drop a language tag such as ``json`` on the opening fence.
        first_newline = body.find("\n")
        if first_newline != -1 and body[:first_newline].strip().isalpha():
            body = body[first_newline + 1 :]
        return body.strip()
    return stripped


def template_messages(messages: list[ChatMessage], tool_prompt: str | None) -> list[dict[str, str]]:
    """Messages as plain role/content dicts any chat template can render.

    Tool calls and results become text (many templates know no ``tool``
    role), consecutive tool results merge into one user turn, and the tool
    offer joins the system prompt."""
    out: list[dict[str, str]] = []
    for message in messages:
        match message:
            case SystemMessage(content=content):
                out.append({"role": "system", "content": content})
            case UserMessage(content=content):
                out.append({"role": "user", "content": _text_of(content)})
            case AssistantMessage(content=content, tool_calls=calls):
                text = render_tool_calls(content, calls) if calls else (content or "")
                out.append({"role": "assistant", "content": text})
            case ToolMessage(content=content, name=name):
                block = render_tool_result(name, content)
                if (
                    out
                    and out[-1]["role"] == "user"
                    and out[-1]["content"].startswith("<tool_response")
                ):
                    out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + block}
                else:
                    out.append({"role": "user", "content": block})
    if tool_prompt is not None:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + tool_prompt}
        else:
            out.insert(0, {"role": "system", "content": tool_prompt})
    return out


def _text_of(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if not isinstance(part, TextPart):
            raise InvalidRequestError("the model reads text only: drop the image parts")
        texts.append(part.text)
    return "".join(texts)
