"""Tool calls carried as text: rendering, parsing, and the streaming gate
that keeps streamed content equal to the final content."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import InvalidRequestError
from agentrt.runtime.models._text_tools import (
    ToolCallStreamGate,
    parse_tool_calls,
    render_tool_calls,
    render_tool_prompt,
    render_tool_result,
    template_messages,
)

NAMES = ["add", "search"]


def test_prompt_lists_every_tool_with_its_schema() -> None:
    tools = [
        ToolSpec(name="add", description="Add two numbers", parameters={"type": "object"}),
        ToolSpec(name="search"),
    ]
    prompt = render_tool_prompt(tools, required=True)
    assert "- add: Add two numbers" in prompt
    assert '{"type":"object"}' in prompt
    assert "- search" in prompt
    assert "must call one of the tools" in prompt
    assert "must call" not in render_tool_prompt(tools)


def test_block_call_is_parsed_and_removed_from_content() -> None:
    text = 'Let me add.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    content, calls = parse_tool_calls(text, NAMES)
    assert content == "Let me add.\n"
    assert [c.function.name for c in calls] == ["add"]
    assert json.loads(calls[0].function.arguments) == {"a": 1, "b": 2}
    assert calls[0].id.startswith("call_")


def test_parallel_calls_and_an_unterminated_last_block() -> None:
    text = (
        '<tool_call>{"name": "add", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": {"q": "x"}}'
    )
    content, calls = parse_tool_calls(text, NAMES)
    assert content is None
    assert [c.function.name for c in calls] == ["add", "search"]
    assert len({c.id for c in calls}) == 2


def test_bare_json_and_code_fenced_json_count_as_a_call() -> None:
    for text in (
        '{"name": "search", "arguments": {"q": "cats"}}',
        '```json\n{"name": "search", "arguments": {"q": "cats"}}\n```',
    ):
        content, calls = parse_tool_calls(text, NAMES)
        assert content is None
        assert json.loads(calls[0].function.arguments) == {"q": "cats"}


@pytest.mark.parametrize(
    "text",
    [
        "just an answer",
        '<tool_call>{"name": "add", "arguments": </tool_call>',  # malformed JSON
        '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',  # not offered
        '{"name": 3}',
        "[1, 2]",
        "",
    ],
)
def test_anything_else_is_plain_text(text: str) -> None:
    assert parse_tool_calls(text, NAMES) == (text, [])


def test_string_arguments_are_kept_as_the_models_raw_text() -> None:
    _, calls = parse_tool_calls('{"name": "add", "arguments": "{\\"a\\": 1"}', NAMES)
    assert calls[0].function.arguments == '{"a": 1'


def test_history_rendering_round_trips_through_the_parser() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="add", arguments='{"a": 1}'))
    text = render_tool_calls("thinking", [call])
    content, calls = parse_tool_calls(text, NAMES)
    assert content == "thinking\n"
    assert calls[0].function == call.function
    assert render_tool_result("add", "3") == '<tool_response name="add">\n3\n</tool_response>'


def _stream(text: str, cuts: list[int], names: list[str]) -> tuple[str, str | None, list[str]]:
    gate = ToolCallStreamGate(names)
    shown = ""
    previous = 0
    for cut in [*sorted(c % (len(text) + 1) for c in cuts), len(text)]:
        shown += gate.feed(text[previous:cut])
        previous = max(previous, cut)
    tail, content, calls = gate.finish()
    return shown + tail, content, [c.function.name for c in calls]


@pytest.mark.parametrize(
    "text",
    [
        'Sure. <tool_call>{"name": "add", "arguments": {}}</tool_call> done',
        '{"name": "add", "arguments": {}}',
        "no tools here, just <tool_ca text",
        '  \n<tool_call>{"name": "add", "arguments": {}}</tool_call>',
    ],
)
def test_streamed_content_equals_final_content(text: str) -> None:
    shown, content, _ = _stream(text, [1, 5, 9, 14, 30], NAMES)
    assert shown == (content or "")


@given(
    st.text(alphabet=st.sampled_from(list('ab <>/{}":_toolcaname,')), max_size=60),
    st.lists(st.integers(min_value=0, max_value=80), max_size=6),
)
def test_streamed_content_never_disagrees_with_the_final_content(
    text: str, cuts: list[int]
) -> None:
    for names in (NAMES, []):
        shown, content, calls = _stream(text, cuts, names)
        assert shown == (content or "")
        if not names:
            assert (shown, calls) == (text, [])


def test_streaming_without_tools_passes_text_through_immediately() -> None:
    gate = ToolCallStreamGate([])
    assert gate.feed("<tool_") == "<tool_"
    assert gate.finish() == ("", "<tool_", [])


def test_a_conversation_with_tools_flattens_to_plain_turns() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="add", arguments='{"a": 1}'))
    messages: list[ChatMessage] = [
        SystemMessage(content="Be brief."),
        UserMessage(content=[TextPart(text="Add "), TextPart(text="things")]),
        AssistantMessage(content=None, tool_calls=[call, call]),
        ToolMessage(content="1", tool_call_id="c1", name="add"),
        ToolMessage(content="2", tool_call_id="c1", name="add"),
        AssistantMessage(content="3"),
    ]
    turns = template_messages(messages, "TOOLS")
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user", "assistant"]
    assert turns[0]["content"] == "Be brief.\n\nTOOLS"
    assert turns[1]["content"] == "Add things"
    assert turns[2]["content"].count("<tool_call>") == 2
    # Consecutive results share one user turn.
    assert turns[3]["content"].count("<tool_response") == 2
    assert template_messages([UserMessage(content="hi")], "TOOLS")[0] == {
        "role": "system",
        "content": "TOOLS",
    }


def test_images_are_refused_by_a_text_only_template() -> None:
    image = ImagePart(image_url={"url": "data:image/png;base64,AAAA"})
    with pytest.raises(InvalidRequestError, match="text only"):
        template_messages([UserMessage(content=[image])], None)
