"""Summaries of real trajectories from the agent loop, rule-based and by a
model (with its fallback on malformed output)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from agentrt.agents import Agent, AgentConfig, AgentLimits, RolloutContext
from agentrt.agents._summary import ModelSummarizer, RuleBasedSummarizer
from agentrt.protocols import ModelRequest, ToolSpec, Trajectory
from agentrt.runtime.kernel._errors import ToolError
from agentrt.testing import ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput

pytestmark = pytest.mark.anyio


class Lookup:
    spec = ToolSpec(
        name="lookup",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    )

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        if arguments["q"] == "broken":
            raise ToolError("index offline")
        return ToolOutput.of_text(f"Paris is the capital of France (source: {arguments['q']})")


async def trajectory() -> Trajectory:
    backend = ScriptedBackend(
        [
            ScriptedReply(
                content="Maybe the atlas knows. Is it Lyon?",
                tool_calls=[ScriptedToolCall("lookup", {"q": "broken"})],
            ),
            ScriptedReply(
                content="Try the encyclopedia.",
                tool_calls=[ScriptedToolCall("lookup", {"q": "encyclopedia"})],
            ),
            "ANSWER: Paris",
        ]
    )
    agent = Agent(AgentConfig(name="geo"), backends=[backend], tools=[Lookup()])
    return (
        await agent.run("capital of France?", RolloutContext(run_id="run-1", rollout_id="r1"))
    ).trajectory


async def test_rule_based_summary_of_a_real_trajectory() -> None:
    traj = await trajectory()
    summary = await RuleBasedSummarizer().summarize(traj)
    assert (summary.rollout_id, summary.answer) == ("r1", "ANSWER: Paris")
    (fact,) = summary.facts
    assert fact.verified
    assert fact.source_step == 1
    assert fact.claim.startswith("Paris is the capital")
    assert "lookup" in fact.evidence
    assert any("index offline" in f and "step 0" in f for f in summary.failure_modes)
    assert [h.split(":")[0] for h in summary.hypotheses] == ["step 0", "step 1"]
    assert "Is it Lyon?" in summary.uncertainties
    assert summary.cost == traj.cost
    assert summary.cost.model_calls == 3


async def test_an_unfinished_rollout_has_no_answer_and_says_why() -> None:
    backend = ScriptedBackend([ScriptedToolCall("lookup", {"q": "x"})], on_exhausted="repeat_last")
    agent = Agent(
        AgentConfig(name="geo", limits=AgentLimits(max_steps=2), stop_on=[]),
        backends=[backend],
        tools=[Lookup()],
    )
    traj = (await agent.run("loop forever")).trajectory
    summary = await RuleBasedSummarizer().summarize(traj)
    assert summary.answer is None
    assert any(f.startswith("rollout exhausted") for f in summary.failure_modes)
    assert "no final answer was reached" in summary.uncertainties


async def test_model_summary_is_validated_and_falls_back_on_malformed_output() -> None:
    traj = await trajectory()
    good = (
        'Here: {"answer": "Paris", "facts": [{"claim": "Paris is the capital", '
        '"evidence": "step 1", "source_step": 1, "verified": true}], '
        '"uncertainties": ["none"], "failure_modes": ["lookup broke once"]}'
    )
    backend = ScriptedBackend([good, '{"answer": "Paris", "facts": "not a list"}', "no json"])
    summarizer = ModelSummarizer(backend, max_tokens=200)
    summary = await summarizer.summarize(traj)
    assert summary.answer == "ANSWER: Paris"  # the rollout's own, never the model's
    assert summary.facts[0].verified  # step 1 has a tool result that shows it
    assert summary.failure_modes == ["lookup broke once"]
    assert summary.cost.model_calls == traj.cost.model_calls + 1
    request = backend.requests[0]
    assert request.sampling.max_tokens == 200
    assert "capital of France?" in str(request.messages)
    for _ in range(2):
        fallback = await summarizer.summarize(traj)
        assert fallback.answer == "ANSWER: Paris"  # rule-based
        assert fallback.failure_modes[-1].startswith("summary model output was malformed")
        assert fallback.facts[0].verified


async def test_a_summary_the_budget_refuses_falls_back_and_costs_nothing() -> None:
    from agentrt.protocols import Budget
    from agentrt.runtime.budget._ledger import BudgetLedger
    from agentrt.runtime.models._metered import MeteredBackend

    traj = await trajectory()
    backend = ScriptedBackend(['{"answer": "Paris"}'], on_exhausted="repeat_last")
    ledger = BudgetLedger("run", Budget(max_model_calls=1))
    summarizer = ModelSummarizer(MeteredBackend(backend, ledger), max_tokens=200)
    written = await summarizer.summarize(traj)
    assert written.answer == "ANSWER: Paris"
    assert ledger.spent.model_calls == 1  # the call is on the run's ledger
    refused = await summarizer.summarize(traj)
    assert refused.answer == "ANSWER: Paris"  # rule-based
    assert refused.failure_modes[-1] == (
        "summary model call skipped: budget cap reached (max_model_calls)"
    )
    assert len(backend.requests) == 1 == ledger.spent.model_calls


async def test_a_tool_result_is_verified_only_when_it_supports_the_answer() -> None:
    traj = await trajectory()
    other = msgspec.structs.replace(traj, answer="ANSWER: Lyon")
    assert (await RuleBasedSummarizer().summarize(traj)).facts[0].verified
    assert not (await RuleBasedSummarizer().summarize(other)).facts[0].verified


async def test_a_summary_never_invents_or_replaces_an_answer() -> None:
    traj = await trajectory()
    claims = (
        '{"answer_seen": "99", "conclusions": ["the answer is 99"], '
        '"facts": [{"claim": "99 is right", "source_step": 0, "verified": true}]}'
    )
    backend = ScriptedBackend([claims], on_exhausted="repeat_last")
    summarizer = ModelSummarizer(backend)
    summary = await summarizer.summarize(traj)
    assert summary.answer == "ANSWER: Paris"
    assert any("'99'" in u and "'ANSWER: Paris', is kept" in u for u in summary.uncertainties)
    assert not summary.facts[0].verified  # step 0's only tool call failed
    unanswered = msgspec.structs.replace(traj, answer=None, status="exhausted")
    none = await summarizer.summarize(unanswered)
    assert none.answer is None
    assert any("the rollout reached none" in u for u in none.uncertainties)
    agreeing = '{"answer_seen": "paris", "progress": ["found it"]}'
    same = await ModelSummarizer(ScriptedBackend([agreeing])).summarize(traj)
    assert same.answer == "ANSWER: Paris"
    assert not any("summarizer read" in u for u in same.uncertainties)


async def test_a_long_trajectory_is_summarized_whole_in_chunks() -> None:
    steps = [
        ScriptedReply(
            content=f"Idea {i}: look up part {i}.",
            tool_calls=[ScriptedToolCall("lookup", {"q": f"part-{i}-" + "x" * 300})],
        )
        for i in range(12)
    ]
    backend = ScriptedBackend([*steps, "ANSWER: Paris"])
    agent = Agent(
        AgentConfig(name="geo", limits=AgentLimits(max_steps=20), stop_on=[]),
        backends=[backend],
        tools=[Lookup()],
    )
    traj = (
        await agent.run("capital of France?", RolloutContext(run_id="run-9", rollout_id="r9"))
    ).trajectory
    parts = iter(range(100))

    def part(request: ModelRequest) -> str:
        k = next(parts)
        return f'{{"hypotheses": ["idea from part {k}"], "answer_seen": null}}'

    summarizer = ModelSummarizer(ScriptedBackend(part), chunk_chars=1_500, max_items=50)
    requests = summarizer.requests(traj)
    assert len(requests) > 3
    record = "".join(str(r.messages[1].content) for r in requests)
    for i in range(12):
        assert f"[step {i}]" in record
        assert f"part-{i}-" in record
    assert "final answer: ANSWER: Paris" in str(requests[-1].messages[1].content)
    summary = await summarizer.summarize(traj)
    assert summary.hypotheses == [f"idea from part {k}" for k in range(len(requests))]
    assert summary.cost.model_calls == traj.cost.model_calls + len(requests)
    assert summary.answer == "ANSWER: Paris"
