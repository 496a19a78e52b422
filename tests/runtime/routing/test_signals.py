"""Signals derived from a step: confidence and repeated actions."""

from __future__ import annotations

import math

import pytest

from agentrt.protocols import (
    AssistantMessage,
    Choice,
    FunctionCall,
    ModelReply,
    TokenLogprob,
    ToolCall,
    ToolResult,
    Usage,
)
from agentrt.runtime.routing._step_signals import (
    mean_logprob,
    perplexity,
    same_action,
    signals_from_step,
)


def call(name: str, arguments: str, id_: str = "c1") -> ToolCall:
    return ToolCall(id=id_, function=FunctionCall(name=name, arguments=arguments))


def test_mean_logprob_and_perplexity() -> None:
    tokens = [TokenLogprob(token="a", logprob=-0.5), TokenLogprob(token="b", logprob=-1.5)]
    assert mean_logprob(tokens) == pytest.approx(-1.0)
    assert mean_logprob([]) is None
    assert mean_logprob(None) is None
    assert perplexity(-1.0) == pytest.approx(math.e)


def test_same_action_ignores_ids_key_order_and_spacing() -> None:
    first = [call("search", '{"q": "x", "k": 3}', "a")]
    assert same_action(first, [call("search", '{"k":3,"q":"x"}', "b")])
    assert not same_action(first, [call("search", '{"q": "y", "k": 3}')])
    assert not same_action(first, [call("fetch", '{"q": "x", "k": 3}')])
    assert not same_action([], [])
    assert not same_action(first, [*first, call("fetch", "{}")])
    # Malformed JSON compares as text.
    assert same_action([call("run", "{oops")], [call("run", " {oops ")])
    assert not same_action([call("run", "{oops")], [call("run", "{oops2")])


def test_signals_from_a_step() -> None:
    reply = ModelReply(
        model="m",
        choices=[
            Choice(
                message=AssistantMessage(tool_calls=[call("ls", '{"path": "/"}', "z")]),
                logprobs=[TokenLogprob(token="t", logprob=-2.0)],
            )
        ],
        usage=Usage(prompt_tokens=1, completion_tokens=1),
        latency_s=0.1,
    )
    failing = [ToolResult(call_id="z", name="ls", content="denied", is_error=True)]
    signals = signals_from_step(
        reply, failing, [call("ls", '{"path":"/"}')], judge_disagreement=0.25, difficulty=0.4
    )
    assert signals.last_tool_failed
    assert signals.repeated_action
    assert signals.mean_logprob == pytest.approx(-2.0)
    assert (signals.judge_disagreement, signals.difficulty) == (0.25, 0.4)
    fine = signals_from_step(reply, [ToolResult(call_id="z", name="ls", content="ok")])
    assert not fine.last_tool_failed
    assert not fine.repeated_action
