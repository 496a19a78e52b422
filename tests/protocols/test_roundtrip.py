"""Every wire type survives a JSON round trip unchanged."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agentrt import protocols as p

_USAGE = p.Usage(prompt_tokens=12, completion_tokens=5, cached_prompt_tokens=8)
_COST = p.Cost(usd=0.0123, usage=_USAGE, model_calls=2, wall_seconds=1.5)
_CALLS = [
    p.ToolCall(id="call_1", function=p.FunctionCall(name="add", arguments='{"a": 1, "b": 2}')),
    p.ToolCall(id="call_2", function=p.FunctionCall(name="mul", arguments='{"a": 3')),
]
_MESSAGES: list[p.ChatMessage] = [
    p.SystemMessage(content="You are terse."),
    p.UserMessage(content=[p.TextPart(text="look"), p.ImagePart(image_url={"url": "data:,"})]),
    p.AssistantMessage(content=None, tool_calls=_CALLS),
    p.ToolMessage(content="3", tool_call_id="call_1", name="add"),
    p.ToolMessage(content="error: bad json", tool_call_id="call_2", name="mul"),
    p.AssistantMessage(content="The answer is 3.", reasoning_content="1+2"),
]
_REPLY = p.ModelReply(
    model="smol",
    choices=[
        p.Choice(
            message=p.AssistantMessage(content="hi"),
            finish_reason="stop",
            logprobs=[p.TokenLogprob(token="hi", logprob=-0.1, top=[p.TopLogprob("ho", -2.0)])],
        )
    ],
    usage=_USAGE,
    latency_s=0.2,
    backend="vllm",
)
_STEP = p.Step(
    index=0,
    messages=tuple(_MESSAGES),
    reply=_REPLY,
    tool_results=(p.ToolResult(call_id="call_1", name="add", content="3"),),
    routing=p.RoutingDecision(model="smol", policy="cascade", reason="start small"),
)
_SUMMARY = p.TrajectorySummary(
    rollout_id="r1",
    answer="3",
    facts=[p.Fact(claim="1+2=3", evidence="add tool", source_step=0, verified=True)],
    uncertainties=["none"],
    cost=_COST,
)

SAMPLES: list[Any] = [
    _USAGE,
    _COST,
    *_MESSAGES,
    p.ToolSpec(name="add", description="Add", parameters={"type": "object"}),
    p.ModelRequest(messages=_MESSAGES, tools=[p.ToolSpec(name="add")], n=4, logprobs=True),
    _REPLY,
    _STEP,
    p.Trajectory(
        run_id="run",
        rollout_id="r1",
        agent="a",
        task="t",
        steps=[_STEP],
        answer="3",
        status="finished",
        stop_reason="final answer",
    ),
    _SUMMARY,
    p.RunRequest(task="t", scaling=p.ScalingSpec(rollouts=8, aggregate="rtv", options={"g": 2})),
    p.RunResult(run_id="run", status="succeeded", answer="3", summaries=[_SUMMARY], cost=_COST),
    p.RunStarted(run_id="run", seq=1, agent="a", task="t", rollouts=8),
    p.RunFinished(run_id="run", status="succeeded", answer="3", cost=_COST),
    p.RolloutStarted(run_id="run", rollout_id="r1"),
    p.RolloutFinished(run_id="run", rollout_id="r1", status="finished", answer="3"),
    p.StepRecorded(run_id="run", rollout_id="r1", step=_STEP),
    p.ToolCalled(run_id="run", rollout_id="r1", call_id="c", tool="add", arguments="{}"),
    p.ToolProgress(
        run_id="run", rollout_id="r1", call_id="c", tool="slow", kind="progress", progress=1.0
    ),
    p.SummaryWritten(run_id="run", summary=_SUMMARY),
    p.VoteCast(run_id="run", aggregator="rtv", round=1, candidates=["r1", "r2"], winner="r1"),
    p.BudgetUpdated(run_id="run", spent=_COST, left_tokens=100),
    p.SignalRaised(
        run_id="run", rollout_id="r1", signal="loop", step=3, detail="search x3", value=3.0
    ),
    p.ErrorRaised(run_id="run", where="backend vllm", message="503", fatal=False),
]


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_json_round_trip(value: Any) -> None:
    data = p.encode(value)
    assert p.decode(data, type(value)) == value


@pytest.mark.parametrize(
    "event", [s for s in SAMPLES if hasattr(s, "seq")], ids=lambda v: type(v).__name__
)
def test_events_decode_through_the_union(event: Any) -> None:
    assert p.decode_event(p.encode(event)) == event


def test_messages_decode_through_the_union() -> None:
    data = p.encode(_MESSAGES)
    assert p.decode(data, list[p.ChatMessage]) == _MESSAGES


def test_persisted_types_carry_a_schema_version() -> None:
    for value in (
        _STEP,
        _SUMMARY,
        p.RunRequest(task="t"),
        p.RunStarted(run_id="r", agent="a", task="t"),
    ):
        assert msgspec.to_builtins(value)["schema_version"] == p.SCHEMA_VERSION


def test_bad_input_names_the_path() -> None:
    bad = b'{"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": 3}}]}'
    with pytest.raises(msgspec.ValidationError, match=r"tool_calls\[0\]\.function\.name"):
        p.decode(bad, p.AssistantMessage)


def test_unknown_event_type_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="type"):
        p.decode_event(b'{"type": "nope", "run_id": "r"}')


def test_usage_and_cost_add_up() -> None:
    assert (_USAGE + _USAGE).total_tokens == 34
    total = _COST + _COST
    assert total.model_calls == 4
    assert total.usage.cached_prompt_tokens == 16
    assert total.usd == pytest.approx(0.0246)


def test_rollout_ids_read_back_as_they_were_made() -> None:
    from agentrt.protocols import RolloutId, sub_rollout_id

    top = RolloutId("run-1a", "r3")
    assert str(top) == "run-1a-r3"
    again = top.restarted(2)
    assert str(again) == "run-1a-r3~2"
    sub = RolloutId.parse(
        "run-1a", sub_rollout_id(sub_rollout_id(str(again), "planner-4"), "coder-7")
    )
    assert sub == RolloutId("run-1a", "r3", 2, ("planner-4", "coder-7"))
    assert sub.top == again
    assert sub.call_numbers() == [4, 7]
    assert RolloutId.parse("run-1a", str(sub)) == sub
    import pytest

    with pytest.raises(ValueError, match="not a rollout id of run"):
        RolloutId.parse("run-2", "run-1a-r3")
    with pytest.raises(ValueError, match="incarnation"):
        RolloutId.parse("run-1a", "run-1a-r3~x")
    with pytest.raises(ValueError, match="free of"):
        RolloutId("run-1a", "r.3")
    with pytest.raises(ValueError, match="free of"):
        sub_rollout_id("run-1a-r3", "a.b")


def test_to_builtins_gives_lists_for_a_steps_tuples() -> None:
    plain = p.to_builtins(_STEP)
    assert isinstance(plain["messages"], list)
    assert plain["tool_results"] == [
        {
            "call_id": "call_1",
            "name": "add",
            "content": "3",
            "is_error": False,
            "duration_s": 0.0,
            "for_user": "",
            "approval": None,
        }
    ]
