"""Wire values a rollout keeps by the thousand are not tracked by the cyclic
garbage collector (``gc=False``): they cannot take part in a cycle."""

from __future__ import annotations

import gc

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    Choice,
    Cost,
    FunctionCall,
    ModelReply,
    ModelRequest,
    RoutingDecision,
    Step,
    ToolCall,
    ToolMessage,
    ToolResult,
    Trajectory,
    Usage,
    UserMessage,
)


def test_a_trajectory_and_what_it_holds_are_untracked() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="add", arguments='{"a": 1}'))
    message = AssistantMessage(content=None, tool_calls=[call])
    reply = ModelReply(
        model="m",
        choices=[Choice(message=message, finish_reason="tool_calls")],
        usage=Usage(prompt_tokens=3, completion_tokens=2),
        latency_s=0.1,
    )
    prompt: list[ChatMessage] = [
        UserMessage(content="hi"),
        message,
        ToolMessage(content="2", tool_call_id="c1"),
    ]
    step = Step(
        index=0,
        messages=tuple(prompt),
        reply=reply,
        tool_results=(ToolResult(call_id="c1", name="add", content="2"),),
        routing=RoutingDecision(model="m", policy="p", reason="r"),
    )
    trajectory = Trajectory(
        run_id="r", rollout_id="r-r0", agent="a", task="t", steps=[step], cost=Cost()
    )
    request = ModelRequest(messages=prompt)
    result = step.tool_results[0]
    for value in (
        call,
        message,
        reply,
        reply.choices[0],
        step,
        trajectory,
        request,
        Cost(),
        result,
    ):
        assert not gc.is_tracked(value), type(value).__name__
    # The lists inside are ordinary lists: still tracked, still freed.
    assert gc.is_tracked(message.tool_calls)
    # A step's tuples hold only untracked values: the first collection
    # drops them from the collector's lists (a list would stay, and be
    # walked at every full collection while the trajectory lives).
    gc.collect()
    assert not gc.is_tracked(step.messages)
    assert not gc.is_tracked(step.tool_results)
