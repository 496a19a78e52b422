"""Context management: a byte-identical shared prefix, an append-only
history between compactions, and prompts that stay within the budget."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from agentrt.agents import (
    Agent,
    AgentConfig,
    AgentLimits,
    CharEstimator,
    ContextConfig,
    ContextWindow,
    RolloutContext,
)
from agentrt.agents._context import NOTES_HEADER, estimate_request_tokens
from agentrt.protocols import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSpec,
    UserMessage,
    encode,
)
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput


class Page:
    """Returns a different ~400-character page per key."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=f"fetch a page ({self.name})",
            parameters={
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
            },
        )

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        key = arguments["key"]
        return ToolOutput.of_text(" ".join(f"{key}-word{i}" for i in range(40)))


def prefix_bytes(request: ModelRequest) -> bytes:
    return encode(request.messages[:2]) + encode(request.tools)


def explorer(steps: int) -> ScriptedBackend:
    """Calls a tool with a new key each step; answers after ``steps`` calls."""
    count = 0

    def script(request: ModelRequest) -> ScriptedToolCall | str:
        nonlocal count
        count = 1 if len(request.messages) == 2 else count + 1  # a new rollout starts
        if count > steps:
            return "done"
        return ScriptedToolCall("zeta" if count % 2 else "alpha", {"key": f"k{count}"})

    return ScriptedBackend(script)


@pytest.mark.anyio
async def test_the_prefix_is_byte_identical_across_steps_and_rollouts() -> None:
    backend = explorer(steps=4)
    # Tools are given out of order: the definitions must still be sorted.
    agent = Agent(
        AgentConfig(name="reader", instructions="Read pages, then answer."),
        backends=[backend],
        tools=[Page("zeta"), Page("alpha")],
    )
    first = await agent.run("Summarise the pages.", RolloutContext(run_id="run-1", rollout_id="r1"))
    second = await agent.run(
        "Summarise the pages.", RolloutContext(run_id="run-1", rollout_id="r2")
    )

    assert first.status == second.status == "finished"
    requests = backend.requests
    assert len(requests) >= 6
    assert [t.name for t in requests[0].tools] == ["alpha", "zeta"]
    assert len({prefix_bytes(r) for r in requests}) == 1
    # Within a rollout, each prompt extends the previous one (cache-friendly).
    steps = first.trajectory.steps
    for before, after in itertools.pairwise(steps):
        assert encode(after.messages[: len(before.messages)]) == encode(before.messages)


@pytest.mark.anyio
async def test_the_prompt_stays_under_budget_on_a_long_run() -> None:
    budget = 1_200
    backend = explorer(steps=30)
    config = AgentConfig(
        name="long",
        instructions="Read many pages.",
        limits=AgentLimits(max_steps=40),
        context=ContextConfig(budget_tokens=budget, keep_recent_turns=2),
        stop_on=[],
    )
    agent = Agent(config, backends=[backend], tools=[Page("alpha"), Page("zeta")])
    result = await agent.run("Read thirty pages, then say done.")

    assert (result.status, result.answer) == ("finished", "done")
    assert len(result.trajectory.steps) == 31
    estimate = CharEstimator(config.context.chars_per_token)
    sizes = [estimate_request_tokens(r.messages, r.tools, estimate) for r in backend.requests]
    assert max(sizes) <= budget
    # Without compaction the tool results alone would have outgrown it by far.
    results = [r.content for s in result.trajectory.steps for r in s.tool_results]
    assert sum(map(estimate, results)) > 3 * budget
    last = backend.requests[-1]
    notes = [m for m in last.messages if isinstance(m, UserMessage) and m is not last.messages[1]]
    assert notes
    assert isinstance(notes[0].content, str)
    assert notes[0].content.startswith(NOTES_HEADER)
    assert len({prefix_bytes(r) for r in backend.requests}) == 1
    # Compaction is rare: most steps extend the previous prompt.
    extended = sum(
        encode(b.messages) == encode(a.messages[: len(b.messages)])
        for b, a in itertools.pairwise(backend.requests)
    )
    assert extended >= len(backend.requests) * 2 // 3


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def test_corrected_failures_are_pruned_and_old_turns_folded_into_notes() -> None:
    window = ContextWindow(
        ContextConfig(budget_tokens=600, keep_recent_turns=1, note_chars=40),
        instructions="sys",
        task="task",
        tools=[ToolSpec(name="read")],
    )
    bad = AssistantMessage(tool_calls=[call("c0", "read", "{}")])
    window.add_turn(
        0, bad, [ToolResult(call_id="c0", name="read", content="error: path", is_error=True)]
    )
    mixed = AssistantMessage(
        content="trying two", tool_calls=[call("c1", "read", '{"path": "a"}'), call("c2", "ls", "")]
    )
    window.add_turn(
        1,
        mixed,
        [
            ToolResult(call_id="c1", name="read", content="A" * 1500),
            ToolResult(call_id="c2", name="ls", content="error: no ls", is_error=True),
        ],
    )
    good = AssistantMessage(tool_calls=[call("c3", "read", '{"path": "b"}')])
    window.add_turn(2, good, [ToolResult(call_id="c3", name="read", content="B")])
    before = window.estimate()
    assert before > 600

    messages = window.messages()  # over budget: compacts first
    assert window.pruned_calls == 1  # only the corrected read; the ls error was never fixed
    assert window.folded_turns == 1
    assert window.compactions == 1
    assert window.estimate() <= 600 * 0.6
    assert messages[:2] == window.prefix
    notes = messages[2]
    assert isinstance(notes, UserMessage)
    assert notes.content == "\n".join(
        [
            NOTES_HEADER,
            "- step 1: noted: trying two",
            '- step 1: read({"path": "a"}) -> ok: ' + "A" * 37 + "...",
            "- step 1: ls() -> error: error: no ls",
        ]
    )
    assert messages[3:] == [good, ToolMessage(content="B", tool_call_id="c3", name="read")]


def test_long_tool_results_are_clipped_in_the_prompt_only() -> None:
    window = ContextWindow(
        ContextConfig(max_tool_result_tokens=20, chars_per_token=3.0),
        instructions="sys",
        task="task",
    )
    text = "x" * 1_000
    msg = AssistantMessage(tool_calls=[call("c", "read", "{}")])
    window.add_turn(0, msg, [ToolResult(call_id="c", name="read", content=text)])
    tool_message = window.messages()[-1]
    assert isinstance(tool_message, ToolMessage)
    assert len(tool_message.content) <= 60
    assert "characters omitted" in tool_message.content
