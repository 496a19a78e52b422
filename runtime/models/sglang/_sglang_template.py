"""The chat template of the SGLang-native backend: ChatML with Hermes-style
``<tool_call>`` tags (the layout Qwen models are trained on), rendered for
``/generate`` and parsed back out of generated text.

Pure functions over protocol types: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

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

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
#: Stop strings for ``/generate`` so generation ends at the turn boundary.
STOP = [IM_END]

TOOLS_PREAMBLE = (
    "\n\n# Tools\n"
    "Call a tool by answering with a <tool_call></tool_call> block holding a "
    'JSON object {"name": ..., "arguments": {...}}. Available tools:\n<tools>\n'
)

_encoder = msgspec.json.Encoder()
_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]*)"')
_ARGS_RE = re.compile(r'"arguments"\s*:\s*(.*)\Z', re.S)


def _text(content: str | list[Any] | None) -> str:
    if type(content) is str:
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def tools_block(tools: list[ToolSpec]) -> str:
    """The tools section appended to the system text."""
    lines = [_encoder.encode(t.to_openai()).decode() for t in tools]
    return TOOLS_PREAMBLE + "\n".join(lines) + "\n</tools>"


def _call_text(call: ToolCall) -> str:
    args = call.function.arguments.strip() or "{}"
    name = _encoder.encode(call.function.name).decode()
    return f'{TOOL_CALL_OPEN}\n{{"name": {name}, "arguments": {args}}}\n{TOOL_CALL_CLOSE}'


def render_assistant(content: str | None, tool_calls: list[ToolCall]) -> str:
    """The body of an assistant turn: its text, then one block per tool call."""
    parts = [content or ""]
    parts.extend(_call_text(c) for c in tool_calls)
    return "\n".join(p for p in parts if p)


def _turn(role: str, body: str) -> str:
    return f"{IM_START}{role}\n{body}{IM_END}"


#: The text that asks the model to answer (appended after the last turn).
GENERATION_PROMPT = f"\n{IM_START}assistant\n"


def tools_turn(tools: list[ToolSpec]) -> str:
    """The system turn offering ``tools`` when the conversation has no
    system message of its own."""
    return _turn("system", tools_block(tools).lstrip("\n"))


def render_turn(message: ChatMessage, tools_text: str = "") -> str:
    """One message as one turn (without the newline that separates turns).
    ``tools_text`` (``tools_block``) is appended to a system message's text."""
    kind = type(message)
    if kind is UserMessage:
        assert isinstance(message, UserMessage)
        return _turn("user", _text(message.content))
    if kind is AssistantMessage:
        assert isinstance(message, AssistantMessage)
        if message.tool_calls:
            return _turn("assistant", render_assistant(message.content, message.tool_calls))
        return _turn("assistant", message.content or "")
    if kind is ToolMessage:
        assert isinstance(message, ToolMessage)
        return _turn("user", f"<tool_response>\n{message.content}\n</tool_response>")
    assert isinstance(message, SystemMessage)
    return _turn("system", message.content + tools_text)


def render_chat(
    messages: list[ChatMessage],
    tools: list[ToolSpec] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """Render a conversation (and offered tools) as one prompt string.

    One ``<|im_start|>role ... <|im_end|>`` turn per message (a tool result is
    its own ``user`` turn in ``<tool_response>`` tags), joined by newlines, so
    a growing conversation's prompt extends its previous one (prefix caches
    hit).  The tools section goes into the system turn (a bare one is added
    when there is none) only when ``tools`` are offered.  Image parts are not
    rendered."""
    turns: list[str] = []
    tools_text = tools_block(tools) if tools else ""
    if tools_text and not (messages and type(messages[0]) is SystemMessage):
        turns.append(_turn("system", tools_text.lstrip("\n")))
        tools_text = ""
    for message in messages:
        if tools_text and type(message) is SystemMessage:
            turns.append(render_turn(message, tools_text))
            tools_text = ""
        else:
            turns.append(render_turn(message))
    prompt = "\n".join(turns)
    if add_generation_prompt:
        return prompt + GENERATION_PROMPT if prompt else GENERATION_PROMPT[1:]
    return prompt


def _parse_block(block: str, index: int, call_id_prefix: str) -> ToolCall:
    call_id = f"{call_id_prefix}{index}"
    try:
        obj = msgspec.json.decode(block)
    except msgspec.DecodeError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        args = obj.get("arguments", {})
        arguments = args if isinstance(args, str) else _encoder.encode(args).decode()
        return ToolCall(id=call_id, function=FunctionCall(name=obj["name"], arguments=arguments))
    # Malformed: keep what can be read so the failure is visible downstream.
    name_match = _NAME_RE.search(block)
    args_match = _ARGS_RE.search(block)
    raw_args = args_match.group(1).strip() if args_match else block
    if raw_args.endswith("}"):
        raw_args = raw_args[:-1].rstrip()  # the outer object's closing brace
    name = name_match.group(1) if name_match else ""
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=raw_args))


def parse_tool_calls(
    text: str, *, call_id_prefix: str = "call_"
) -> tuple[str | None, list[ToolCall]]:
    """Split generated text into its plain content and its tool calls
    (``<tool_call>`` blocks).  A block whose JSON does not parse still yields
    a call, with the raw argument text, so the agent loop reports it."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return (text or None), []
    content = text[:start].strip()
    calls = [
        _parse_block(m.group(1), i, call_id_prefix)
        for i, m in enumerate(_TOOL_CALL_RE.finditer(text, start))
    ]
    return (content or None), calls


def held_back(text: str) -> int:
    """How many trailing characters of streamed ``text`` may be the start of
    a ``<tool_call>`` tag and must not be emitted as content yet."""
    for k in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-k:]):
            return k
    return 0
