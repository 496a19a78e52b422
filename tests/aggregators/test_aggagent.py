"""The aggregation agent reads trajectories through its tools and finishes
within its caps."""

from __future__ import annotations

import pytest

from agentrt.agents._summary import RuleBasedSummarizer
from agentrt.aggregators import AggregationAgent, AggregationContext, TrajectoryStore
from agentrt.protocols import (
    AssistantMessage,
    Choice,
    ModelReply,
    Step,
    ToolMessage,
    ToolResult,
    Trajectory,
    TrajectorySummary,
    Usage,
)
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.testing import ScriptedBackend, ScriptedToolCall

pytestmark = pytest.mark.anyio


def traj(rid: str, answer: str, found: str) -> Trajectory:
    def step(i: int, text: str, tool: str | None) -> Step:
        reply = ModelReply(
            model="m",
            choices=[Choice(message=AssistantMessage(content=text))],
            usage=Usage(prompt_tokens=50, completion_tokens=10),
            latency_s=0.0,
        )
        results = (ToolResult(call_id=f"c{i}", name="search", content=tool),) if tool else ()
        return Step(index=i, messages=(), reply=reply, tool_results=results)

    steps = [
        step(0, "search for the population of the city", f"the population is {found}"),
        step(1, "check the census table", "census table lists districts"),
        step(2, f"so the answer is {answer}", None),
    ]
    return Trajectory(
        run_id="run",
        rollout_id=rid,
        agent="a",
        task="t",
        steps=steps,
        answer=answer,
        status="finished",
    )


def population() -> tuple[list[TrajectorySummary], dict[str, Trajectory]]:
    trajs = [
        traj("r0", "2.1 million", "2.1 million"),
        traj("r1", "3 million", "unknown"),
        traj("r2", "3 million", "unknown"),
    ]
    rule = RuleBasedSummarizer()
    return [rule.summarize_now(t) for t in trajs], {t.rollout_id: t for t in trajs}


async def test_aggagent_uses_its_tools_and_finishes_within_caps() -> None:
    summaries, trajectories = population()
    backend = ScriptedBackend(
        [
            ScriptedToolCall("get_solution", {}),
            ScriptedToolCall("search_trajectory", {"id": "r0", "query": "population is", "k": 2}),
            ScriptedToolCall("get_segment", {"id": "r1", "start": 0, "end": 9}),
            ScriptedToolCall(
                "finish", {"solution": "2.1 million", "reason": "r0 step 0: the census tool"}
            ),
        ]
    )
    agent = AggregationAgent(max_turns=6, max_tokens=20_000)
    ledger = BudgetLedger("run")
    context = AggregationContext.metered(backend, ledger, trajectories=trajectories)
    result = await agent.aggregate("population?", summaries, context)

    assert (result.answer, result.winner) == ("2.1 million", "r0")
    assert "finished after 4 turns" in result.rationale
    assert result.rationale.endswith("tokens: r0 step 0: the census tool")
    assert result.cost.model_calls == 4  # under the cap of 6
    assert backend.requests[0].tool_choice == "auto"
    assert "finish" in [t.name for t in backend.requests[0].tools]
    assert 0 < result.cost.usage.total_tokens <= 20_000
    # Charged once, to the run's ledger, through the metered backend.
    assert ledger.spent.model_calls == 4
    assert ledger.spent.usage == result.cost.usage
    first = backend.requests[0]
    assert "r1: 3 steps, 180 tokens, 2 tool calls" in str(first.messages)
    tools = [m.content for m in backend.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "[r2] answer: 3 million" in tools[0]
    ranked = tools[1].split("\n\n")
    assert len(ranked) == 2
    assert ranked[0].startswith("[r0 step 0] (ROUGE-L recall 1.00)")
    assert "[r1 step 2]" in tools[2]
    assert "[r1 step 3]" not in tools[2]


async def test_aggagent_at_its_turn_cap_is_forced_to_finish() -> None:
    summaries, trajectories = population()
    backend = ScriptedBackend(
        [
            ScriptedToolCall("get_solution", {"id": "r1"}),
            ScriptedToolCall("get_solution", {"id": "r0"}),
            ScriptedToolCall("finish", {"solution": "2.1 million", "reason": "r0 read it"}),
        ]
    )
    agent = AggregationAgent(max_turns=3)
    failed = TrajectorySummary(rollout_id="crashed", answer=None)
    context = AggregationContext.metered(backend, BudgetLedger("run"), trajectories=trajectories)
    result = await agent.aggregate("p?", [*summaries, failed], context)
    assert result.cost.model_calls == 3 == len(backend.requests)
    assert (result.answer, result.winner) == ("2.1 million", "r0")  # not the majority's
    assert "was forced to finish after 3 turns" in result.rationale
    assert "r0 read it" in result.rationale
    assert result.excluded == ["crashed"]
    forced = backend.requests[-1]
    assert [t.name for t in forced.tools] == ["finish"]
    assert forced.tool_choice == "required"
    assert "no turns left" in str(forced.messages[-1].content)


async def test_aggagent_falls_back_to_majority_only_when_the_forced_finish_fails() -> None:
    summaries, trajectories = population()
    backend = ScriptedBackend(
        [ScriptedToolCall("get_solution", {"id": "r1"}), "I would rather not."]
    )
    context = AggregationContext.metered(backend, BudgetLedger("run"), trajectories=trajectories)
    result = await AggregationAgent(max_turns=2).aggregate("p?", summaries, context)
    assert result.cost.model_calls == 2 == len(backend.requests)
    assert result.answer == "3 million"
    assert "agent gave no usable finish, forced at turn 2; majority fallback" in result.rationale


def test_store_search_and_unknown_ids() -> None:
    summaries, trajectories = population()
    store = TrajectoryStore(summaries, trajectories)
    hits = store.search("r1", "census table districts", role="tool", k=1)
    assert hits.startswith("[r1 step 1] (ROUGE-L recall 1.00)")
    assert "assistant:" not in hits
    with pytest.raises(Exception, match="unknown trajectory id 'zz'; known: r0, r1, r2"):
        store.get_solution("zz")
