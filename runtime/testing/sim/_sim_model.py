"""The sim-server's "model" (``SimModel``): what it answers, deterministically.

Pure logic; imports protocols, the template and the fakes' tokenizer.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import msgspec

from agentrt.protocols._messages import ChatMessage, TextPart, ToolMessage, UserMessage
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.models.sglang._sglang_template import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    render_chat,
)
from agentrt.runtime.testing._tokens import WORDS, tokenize
from agentrt.runtime.testing.sim._sim_config import SimServerConfig

_encoder = msgspec.json.Encoder()
_TURN_RE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.S)
_TOOLS_RE = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)
_EXPR_RE = re.compile(r"(-?\d+)\s*([+*-])\s*(-?\d+)")
_WORD_RE = re.compile(r"[A-Za-z0-9_]+")


class PromptView(msgspec.Struct, frozen=True, kw_only=True):
    """What the model sees of a prompt."""

    text: str
    first_user: str
    tools: list[ToolSpec] = []
    tool_results: int = 0
    tool_choice: str = "auto"
    chat: bool = False


class SimChoice(msgspec.Struct, frozen=True, kw_only=True):
    """One generated sample: the text in template form, its parsed parts."""

    output_text: str
    content: str | None
    tool_calls: list[tuple[str, str, str]]  # (call id, name, arguments JSON)
    finish_reason: str
    pieces: list[str]


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.text for p in content if isinstance(p, TextPart))
    return ""


def view_from_messages(
    messages: list[ChatMessage], tools: list[ToolSpec], tool_choice: str = "auto"
) -> PromptView:
    """The view of a chat request, computed directly: the reference that the
    sim-server's per-message cache (``sim_chat.ChatPromptCache``) equals."""
    first_user = next((_text(m.content) for m in messages if isinstance(m, UserMessage)), "")
    return PromptView(
        text=render_chat(messages, tools),
        first_user=first_user,
        tools=tools,
        tool_results=sum(isinstance(m, ToolMessage) for m in messages),
        tool_choice=tool_choice,
        chat=True,
    )


def _tools_from_block(block: str) -> list[ToolSpec]:
    tools: list[ToolSpec] = []
    for line in block.splitlines():
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        fn = obj.get("function", obj)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            tools.append(
                ToolSpec(
                    name=fn["name"],
                    parameters=params if isinstance(params, dict) else {"type": "object"},
                )
            )
    return tools


def view_from_text(text: str) -> PromptView:
    """The view of a text prompt (ChatML turns are parsed when present)."""
    if "<|im_start|>" not in text:
        return PromptView(text=text, first_user=text)
    first_user = ""
    tools: list[ToolSpec] = []
    results = 0
    for role, body in _TURN_RE.findall(text):
        if role == "system" and not tools:
            found = _TOOLS_RE.search(body)
            if found:
                tools = _tools_from_block(found.group(1))
        elif role == "tool":
            results += 1
        elif role == "user":
            count = body.count("<tool_response>")
            results += count
            if not count and not first_user:
                first_user = body
    return PromptView(
        text=text, first_user=first_user, tools=tools, tool_results=results, chat=True
    )


_SIMPLE_VALUES: dict[str, Any] = {"integer": 1, "number": 1, "boolean": True, "null": None}


def _example(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "x"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "array":
        return []
    if kind == "object":
        return fill_arguments(schema)
    return _SIMPLE_VALUES.get(kind, "x")


def fill_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a simple JSON schema's required properties."""
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    names = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    return {name: _example(props.get(name, {})) for name in names}


def answer_value(first_user: str) -> str:
    """The value ``answer`` mode derives from the first user message."""
    expr = _EXPR_RE.search(first_user)
    if expr:
        a, op, b = int(expr.group(1)), expr.group(2), int(expr.group(3))
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    words = _WORD_RE.findall(first_user)
    return words[-1].lower() if words else "none"


def _wrong(value: str) -> str:
    try:
        return str(int(value) + 1)
    except ValueError:
        return value + "?"


class _Rng:
    """splitmix64: a tiny deterministic generator (seeding ``random.Random``
    costs more than a whole simulated reply)."""

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = seed & 0xFFFFFFFFFFFFFFFF

    def bits(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def random(self) -> float:
        return (self.bits() >> 11) / float(1 << 53)

    def words(self, count: int) -> list[str]:
        """``count`` words from ``WORDS`` (several per 64 random bits)."""
        out: list[str] = []
        size = len(WORDS)
        while len(out) < count:
            bits = self.bits()
            for _ in range(min(12, count - len(out))):
                out.append(WORDS[bits % size])
                bits //= size
        return out


def _filler(words: list[str]) -> list[str]:
    """Filler text as tokens, one per word: a capitalised first word,
    " word"s, and a full stop in place of the last word."""
    pieces = [words[0].capitalize()] + [" " + w for w in words[1:-1]]
    if len(words) > 1:
        pieces.append(".")
    return pieces


class SimModel:
    """Deterministic replies for the sim-server: a reply depends only on
    the prompt text, the request and server seeds and the sample index
    (ignored at temperature 0).  With tools offered and ``tool_choice`` not
    ``none``, while the conversation holds fewer than ``tool_rounds`` tool
    results (always, with ``required``), it calls the offered tools
    (``parallel_tool_calls`` of them; a named ``tool_choice`` once) with
    ``fill_arguments``; otherwise it answers text per
    ``SimServerConfig.answer``.  No reply is longer than ``max_tokens``
    (cut there, ``finish_reason`` ``length``; a tool call cut short comes
    back as the text generated so far).  Text prompts in the ChatML layout of
    ``sglang_template`` are parsed back into turns, so chat and text routes
    behave alike; generated text uses the same layout."""

    def __init__(self, config: SimServerConfig) -> None:
        self._config = config
        # Tool-call replies depend only on the tools called (ids aside).
        self._tool_outputs: dict[
            tuple[tuple[tuple[str, bytes], ...], bool], tuple[str, list[str], list[tuple[str, str]]]
        ] = {}

    def _rng(self, view: PromptView, seed: int | None, index: int) -> _Rng:
        salt = zlib.crc32(f"{self._config.seed}|{seed or 0}|{index}|".encode())
        return _Rng(zlib.crc32(view.text.encode("utf-8", "surrogatepass"), salt))

    def _length(self, rng: _Rng) -> int:
        """A final reply's length: ``reply_tokens``, or drawn up to
        ``reply_tokens_max``."""
        low, high = self._config.reply_tokens, self._config.reply_tokens_max
        if high is None or high == low:
            return low
        return low + rng.bits() % (high - low + 1)

    def wants_tools(self, view: PromptView) -> bool:
        """Whether the reply to ``view`` calls tools."""
        if not view.tools or view.tool_choice == "none":
            return False
        if view.tool_choice == "auto":
            return view.tool_results < self._config.tool_rounds
        return True  # "required" or a named tool

    def reply(
        self,
        view: PromptView,
        *,
        seed: int | None = None,
        index: int = 0,
        temperature: float = 1.0,
        max_tokens: int = 512,
        parallel: bool = True,
        bad_json: bool = False,
    ) -> SimChoice:
        """One sample for ``view``; ``bad_json`` corrupts tool arguments."""
        rng = self._rng(view, seed, index if temperature > 0 else 0)
        if not self.wants_tools(view):
            return self._text_reply(view, rng, temperature=temperature, max_tokens=max_tokens)
        choice = self._tool_reply(view, rng, parallel=parallel, bad_json=bad_json)
        if len(choice.pieces) <= max_tokens:
            return choice
        # Cut at max_tokens like a real server: a call cut short is no call,
        # only the text generated so far.
        pieces = choice.pieces[: max(max_tokens, 0)]
        text = "".join(pieces)
        return SimChoice(
            output_text=text, content=text, tool_calls=[], finish_reason="length", pieces=pieces
        )

    def _tool_reply(
        self, view: PromptView, rng: _Rng, *, parallel: bool, bad_json: bool
    ) -> SimChoice:
        named = [t for t in view.tools if t.name == view.tool_choice]
        if named:
            chosen = named[:1]
        else:
            k = self._config.parallel_tool_calls if parallel else 1
            chosen = [view.tools[i % len(view.tools)] for i in range(k)]
        tag = f"{rng.bits() & 0xFFFFFFFF:08x}"
        key = (tuple((t.name, _encoder.encode(t.parameters)) for t in chosen), bad_json)
        shape = self._tool_outputs.get(key)
        if shape is None:
            shape = self._tool_output(chosen, bad_json)
            if len(self._tool_outputs) >= 4096:
                self._tool_outputs.clear()
            self._tool_outputs[key] = shape
        output, pieces, names_args = shape
        return SimChoice(
            output_text=output,
            content=None,
            tool_calls=[(f"call_{tag}_{i}", n, a) for i, (n, a) in enumerate(names_args)],
            finish_reason="tool_calls",
            pieces=pieces,
        )

    @staticmethod
    def _tool_output(
        chosen: list[ToolSpec], bad_json: bool
    ) -> tuple[str, list[str], list[tuple[str, str]]]:
        """The generated text, its tokens and (name, arguments) per call."""
        names_args: list[tuple[str, str]] = []
        blocks: list[str] = []
        for tool in chosen:
            args = _encoder.encode(fill_arguments(tool.parameters)).decode()
            if bad_json:
                args = args[:-1]  # drop the closing brace: never parseable
            names_args.append((tool.name, args))
            name = _encoder.encode(tool.name).decode()
            blocks.append(
                f'{TOOL_CALL_OPEN}\n{{"name": {name}, "arguments": {args}}}\n{TOOL_CALL_CLOSE}'
            )
        output = "\n".join(blocks)
        return output, tokenize(output), names_args

    def _text_reply(
        self, view: PromptView, rng: _Rng, *, temperature: float, max_tokens: int
    ) -> SimChoice:
        config = self._config
        if config.answer == "answer":
            value = answer_value(view.first_user)
            if temperature > 0 and rng.random() < config.answer_noise:
                value = _wrong(value)
            pieces = tokenize(f"ANSWER: {value}")
            if config.reply_tokens_max is not None:
                # Filler first, so the reply is as long as drawn (at least
                # the ANSWER line) and still ends with the answer.
                tail = tokenize(f"\nANSWER: {value}")
                filler = self._length(rng) - len(tail)
                if filler > 0:
                    pieces = [*_filler(rng.words(filler)), *tail]
        else:
            # A capitalised first word, " word"s, a full stop.
            pieces = _filler(rng.words(self._length(rng)))
        finish = "stop"
        if len(pieces) > max_tokens:
            pieces = pieces[: max(max_tokens, 0)]
            finish = "length"
        text = "".join(pieces)
        return SimChoice(
            output_text=text,
            content=text,
            tool_calls=[],
            finish_reason=finish,
            pieces=pieces,
        )
