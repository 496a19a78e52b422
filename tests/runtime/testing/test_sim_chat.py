"""The sim-server's per-message prompt cache renders exactly like the template."""

from __future__ import annotations

import msgspec
import pytest

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.models.sglang._sglang_template import render_chat
from agentrt.runtime.testing._tokens import encode
from agentrt.runtime.testing.sim._sim_chat import ChatPromptCache
from agentrt.runtime.testing.sim._sim_model import view_from_messages

TOOLS = [ToolSpec(name="search", parameters={"type": "object", "properties": {}})]
CALL = ToolCall(id="c1", function=FunctionCall(name="search", arguments='{"q": "x"}'))
CONVERSATIONS: list[list[ChatMessage]] = [
    [UserMessage("hi")],
    [SystemMessage("sys"), UserMessage("hi")],
    [
        SystemMessage("sys"),
        UserMessage([TextPart("a "), TextPart("b")]),
        AssistantMessage(content="let me look", tool_calls=[CALL]),
        ToolMessage("found it", "c1"),
        ToolMessage("second", "c2"),
        AssistantMessage("done"),
        UserMessage("thanks "),
    ],
    [],
]


@pytest.mark.parametrize("tools", [[], TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize("messages", CONVERSATIONS, ids=lambda m: f"{len(m)}-messages")
def test_cached_prompt_equals_the_direct_rendering(
    messages: list[ChatMessage], tools: list[ToolSpec]
) -> None:
    cache = ChatPromptCache()
    raw_messages = [msgspec.Raw(msgspec.json.encode(m)) for m in messages]
    raw_tools = msgspec.Raw(msgspec.json.encode([t.to_openai() for t in tools]))
    for _ in range(2):  # cold, then from the cache
        view, prompt = cache.prompt(raw_messages, raw_tools, "auto")
        expected = view_from_messages(messages, tools)
        assert view.text == render_chat(messages, tools) == expected.text
        assert prompt.ids == encode(view.text)
        assert (view.first_user, view.tool_results) == (expected.first_user, expected.tool_results)
        assert [t.name for t in view.tools] == [t.name for t in tools]
        assert prompt.extend("Reply.<|im_end|>") == encode(view.text + "Reply.<|im_end|>")


def test_a_bad_message_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        ChatPromptCache().prompt([msgspec.Raw(b'{"role": "robot"}')], msgspec.Raw(), "auto")
