"""The sim-server's chat prompts, rendered and tokenized once per message.

A rollout re-sends its whole conversation at every step, so the sim-server
keeps, per message (keyed by the message's raw JSON bytes and its
position), the rendered turn (``sglang_template.render_turn``), its token
ids and what the simulated model needs to know about it.  A request then
costs one dictionary lookup per old message; only new messages are
decoded, validated, rendered and tokenized.  The joined turns equal
``render_chat`` of the decoded messages exactly, and the joined ids equal
``tokens.encode`` of that text (every turn after the first starts with a
newline, where the tokenizer cuts anyway).

Bounded: at most ``capacity`` messages are remembered (the oldest half is
dropped when full).  Imports protocols, the template and the tokenizer.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.models.sglang._sglang_template import (
    GENERATION_PROMPT,
    render_turn,
    tools_block,
    tools_turn,
)
from agentrt.runtime.testing._tokens import EncodedPrompt, encode
from agentrt.runtime.testing.sim._sim_model import PromptView
from agentrt.runtime.wire._chat_parts import ToolDef

_message_decoder = msgspec.json.Decoder(ChatMessage)
_tools_decoder = msgspec.json.Decoder(list[ToolDef])
_GEN_IDS = tuple(encode(GENERATION_PROMPT))


class _Turn(NamedTuple):
    text: str  # with its leading newline unless it is the first turn
    ids: tuple[int, ...]
    role: str
    user_text: str | None  # a user message's text, else None


class _Tools(NamedTuple):
    specs: list[ToolSpec]
    block: str
    turn: _Turn  # the bare system turn, when the conversation has no system message


def _role(message: ChatMessage) -> str:
    if isinstance(message, UserMessage):
        return "user"
    if isinstance(message, ToolMessage):
        return "tool"
    return "assistant" if isinstance(message, AssistantMessage) else "system"


class ChatPromptCache:
    """Per-message render/token cache for chat requests (see module docstring)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._turns: dict[tuple[bytes, bytes, bool], _Turn] = {}
        self._tools: dict[bytes, _Tools] = {}

    def _tools_for(self, raw: bytes) -> _Tools:
        found = self._tools.get(raw)
        if found is None:
            specs = [
                ToolSpec(
                    name=d.function.name,
                    description=d.function.description,
                    parameters=d.function.parameters,
                )
                for d in _tools_decoder.decode(raw)
            ]
            text = tools_turn(specs) if specs else ""
            turn = _Turn(text, tuple(encode(text)), "system", None)
            found = _Tools(specs, tools_block(specs) if specs else "", turn)
            if len(self._tools) >= 1024:
                self._tools.clear()
            self._tools[raw] = found
        return found

    def _turn(self, raw: bytes, tools: tuple[bytes, _Tools] | None, first: bool) -> _Turn:
        key = (raw, tools[0] if tools is not None else b"", first)
        turn = self._turns.get(key)
        if turn is None:
            message = _message_decoder.decode(raw)
            text = render_turn(message, tools[1].block if tools is not None else "")
            if not first:
                text = "\n" + text
            user_text = None
            if isinstance(message, UserMessage):
                content = message.content
                user_text = (
                    content
                    if isinstance(content, str)
                    else "".join(p.text for p in content if isinstance(p, TextPart))
                )
            turn = _Turn(text, tuple(encode(text)), _role(message), user_text)
            if len(self._turns) >= self._capacity:
                for old in list(self._turns)[: self._capacity // 2]:
                    del self._turns[old]
            self._turns[key] = turn
        return turn

    def prompt(
        self, messages: list[msgspec.Raw], tools_raw: msgspec.Raw, tool_choice: str
    ) -> tuple[PromptView, EncodedPrompt]:
        """The view and token ids of a chat request (``tools_raw`` empty or
        ``null`` when none are offered).  Raises ``msgspec.ValidationError``
        / ``DecodeError`` for a bad message or tool."""
        raws = [bytes(m) for m in messages]
        tools: tuple[bytes, _Tools] | None = None
        key = bytes(tools_raw)
        if key and key != b"null":
            found = self._tools_for(key)
            tools = (key, found) if found.specs else None
        turns: list[_Turn] = []
        if raws:
            head = self._turn(raws[0], None, first=True)
            if tools is not None and head.role == "system":
                head = self._turn(raws[0], tools, first=True)
            elif tools is not None:
                turns.append(tools[1].turn)
                head = self._turn(raws[0], None, first=False)
            turns.append(head)
        elif tools is not None:
            turns.append(tools[1].turn)
        turns.extend([self._turn(raw, None, first=False) for raw in raws[1:]])
        ids: list[int] = []
        texts: list[str] = []
        first_user: str | None = None
        results = 0
        for turn in turns:
            ids.extend(turn.ids)
            texts.append(turn.text)
            if turn.role == "tool":
                results += 1
            elif first_user is None and turn.user_text is not None:
                first_user = turn.user_text
        tail = GENERATION_PROMPT if turns else GENERATION_PROMPT[1:]
        head_len = len(ids)
        ids.extend(_GEN_IDS if turns else encode(tail))
        texts.append(tail)
        view = PromptView(
            text="".join(texts),
            first_user=first_user or "",
            tools=tools[1].specs if tools is not None else [],
            tool_results=results,
            tool_choice=tool_choice,
            chat=True,
        )
        return view, EncodedPrompt(ids, head_len, tail)
