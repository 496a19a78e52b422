"""``message_tokens``: the inlined path for ``CharEstimator`` (the two
messages every step adds) counts exactly what the generic path counts with
the same estimator called as a function."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentrt.protocols import AssistantMessage, FunctionCall, ToolCall, ToolMessage
from agentrt.runtime.models._prompt_estimate import MESSAGE_OVERHEAD, CharEstimator, message_tokens

texts = st.text(max_size=400)
calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text(min_size=1, max_size=8),
        function=st.builds(FunctionCall, name=st.text(max_size=20), arguments=texts),
    ),
    max_size=4,
)
messages = st.one_of(
    st.builds(AssistantMessage, content=st.none() | texts, tool_calls=calls),
    st.builds(ToolMessage, content=texts, tool_call_id=st.text(min_size=1, max_size=8)),
)


@given(message=messages, per=st.floats(min_value=0.5, max_value=8.0))
def test_char_estimator_path_counts_what_the_generic_path_counts(
    message: AssistantMessage | ToolMessage, per: float
) -> None:
    estimator = CharEstimator(per)

    def as_function(text: str) -> int:  # not a CharEstimator: the generic path
        return estimator(text)

    assert message_tokens(message, estimator) == message_tokens(message, as_function)


def test_an_assistant_message_counts_each_call() -> None:
    estimator = CharEstimator(3.0)
    bare = AssistantMessage(content="abcdef")
    called = AssistantMessage(
        content="abcdef",
        tool_calls=[ToolCall(id="c1", function=FunctionCall(name="add", arguments='{"a":1}'))],
    )
    # the call adds its own overhead plus ceil(len("add" + '{"a":1}') / 3) = 4
    assert message_tokens(called, estimator) - message_tokens(bare, estimator) == (
        MESSAGE_OVERHEAD + 4
    )
