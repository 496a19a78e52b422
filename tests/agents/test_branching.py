"""Partial-rollout branching (ParallelMuse): per-step uncertainty from
logprobs, the choice of branch steps, continuations that resume from the
parent's exact prefix, the budget, and prefix-cache reuse on the sim-server.
These check the mechanics and the tokens saved; whether branching keeps the
accuracy is measured on a population with real uncertainty in
``bench/branching.py``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import pytest

from agentrt.agents import Agent, AgentConfig, RolloutContext
from agentrt.agents._branching import BranchingConfig, PartialRolloutBrancher
from agentrt.agents._uncertainty import (
    UncertaintyKind,
    perplexity,
    split_logprobs,
    step_uncertainty,
)
from agentrt.protocols import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    TokenLogprob,
    ToolCall,
    Trajectory,
)
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import (
    ScriptedBackend,
    ScriptedReply,
    ScriptedToolCall,
    SimServer,
    SimServerConfig,
)
from agentrt.tools import tool
from tests._support.backends import sim_backend

pytestmark = pytest.mark.anyio


@tool(name="lookup", description="look a key up")
async def lookup(key: str) -> str:
    """A tool answering with its argument."""
    return f"value of {key}"


def _lps(pairs: Sequence[tuple[str, float]]) -> list[TokenLogprob]:
    return [TokenLogprob(token=t, logprob=lp) for t, lp in pairs]


# -- uncertainty ---------------------------------------------------------------


def test_perplexity_split_by_tool_call_markers() -> None:
    message = AssistantMessage(
        content="I think",
        tool_calls=[ToolCall(id="c1", function=FunctionCall(name="lookup", arguments="{}"))],
    )
    tokens = _lps(
        [
            ("I", -0.1),
            (" think", -0.3),
            ("\n", -0.2),
            ("<tool_call>", -0.05),
            ('\n{"name": "lookup"}', -1.5),
            ("\n</tool_call>", -0.25),
        ]
    )
    reasoning, tool = split_logprobs(message, tokens)
    assert reasoning == [-0.1, -0.3, -0.2]
    assert tool == [-0.05, -1.5, -0.25]
    assert perplexity(reasoning) == pytest.approx(math.exp(0.6 / 3))
    assert perplexity(tool) == pytest.approx(math.exp(1.8 / 3))
    assert perplexity([]) is None


def test_perplexity_split_without_markers_and_without_logprobs() -> None:
    with_call = AssistantMessage(
        content="ab",
        tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments='{"k":1}'))],
    )
    tokens = _lps([("a", -1.0), ("b", -2.0), ('{"k"', -0.5), (":1}", -0.1)])
    assert split_logprobs(with_call, tokens) == ([-1.0, -2.0], [-0.5, -0.1])
    # No tool calls: every token is reasoning.
    text_only = AssistantMessage(content="ab{x")
    assert split_logprobs(text_only, tokens) == ([-1.0, -2.0, -0.5, -0.1], [])


async def test_steps_without_logprobs_are_unknown_and_never_branched() -> None:
    backend = ScriptedBackend([ScriptedToolCall("lookup", {"key": "a"}), "done"])
    agent = Agent(AgentConfig(name="plain"), backends=[backend], tools=[lookup])
    result = await agent.run("task")
    unc = step_uncertainty(result.trajectory.steps[0])
    assert (unc.reasoning, unc.tool, unc.combined) == (None, None, None)
    brancher = PartialRolloutBrancher(agent)
    assert brancher.pick([result.trajectory]) == []
    branched = await brancher.branch("task", [result.trajectory])
    assert branched.continuations == []
    assert len(backend.requests) == 2


# -- scripted rollouts with known logprobs --------------------------------------

STEPS = 3  # two tool steps then an answer


def _script(
    tables: Mapping[str, Sequence[tuple[float, float]]],
) -> Callable[[ModelRequest], ScriptedReply]:
    """Replies keyed by the task (the second message) and the step (assistant
    messages so far); ``tables[task][step]`` = (reasoning, tool) logprob."""

    def reply(request: ModelRequest) -> ScriptedReply:
        task = str(request.messages[1].content)
        step = sum(isinstance(m, AssistantMessage) for m in request.messages)
        r_lp, t_lp = tables[task][step]
        if step == STEPS - 1:
            return ScriptedReply(
                content="answer 42", logprobs=_lps([("answer", r_lp), (" 42", r_lp)])
            )
        return ScriptedReply(
            content=f"step {step}",
            tool_calls=[ScriptedToolCall("lookup", {"key": f"k{step}"})],
            logprobs=_lps(
                [("step", r_lp), (f" {step}", r_lp), ("<tool_call>", t_lp), ("</tool_call>", t_lp)]
            ),
        )

    return reply


def _scripted(tables: Mapping[str, Sequence[tuple[float, float]]]) -> ScriptedBackend:
    return ScriptedBackend(_script(tables), latency_s=0.005)


TABLES = {
    # (reasoning logprob, tool logprob) per step
    "task": [(-0.1, -0.1), (-1.2, -0.2), (-0.3, -0.3)],
}


async def _parent(backend: ScriptedBackend, agent: Agent, task: str = "task") -> Trajectory:
    result = await agent.run(task, RolloutContext(run_id="run-1", rollout_id=f"parent-{task}"))
    assert result.status == "finished"
    assert len(result.trajectory.steps) == STEPS
    return result.trajectory


def _agent(backend: ScriptedBackend) -> Agent:
    return Agent(AgentConfig(name="brancher", logprobs=True), backends=[backend], tools=[lookup])


async def test_picks_the_most_uncertain_steps_by_kind() -> None:
    tables = {
        "task": [(-0.1, -0.1), (-1.2, -0.2), (-0.3, -0.3)],
        "other": [(-0.2, -2.0), (-0.5, -0.4), (-0.9, -0.9)],
    }
    backend = _scripted(tables)
    agent = _agent(backend)
    a = await _parent(backend, agent, "task")
    b = await _parent(backend, agent, "other")
    unc = step_uncertainty(b.steps[0])
    assert unc.reasoning == pytest.approx(math.exp(0.2))
    assert unc.tool == pytest.approx(math.exp(2.0))
    assert unc.combined == pytest.approx(math.exp((0.2 * 2 + 2.0 * 2) / 4))
    assert (unc.reasoning_tokens, unc.tool_tokens) == (2, 2)

    def picked(kind: UncertaintyKind) -> list[tuple[str, int]]:
        config = BranchingConfig(uncertainty=kind)
        points = PartialRolloutBrancher(agent, config).pick([a, b])
        return [(p.parent.rollout_id, p.step) for p in points]

    # reasoning: a1 (1.2), then b2 (0.9); tool: b0 (2.0), then b1 (0.4).
    assert picked("reasoning") == [("parent-task", 1), ("parent-other", 2)]
    assert picked("tool") == [("parent-other", 0), ("parent-other", 1)]
    # combined: b0 = mean 1.1, then b2 = 0.9 (a1 = 0.7).
    assert picked("combined") == [("parent-other", 0), ("parent-other", 2)]


async def test_answer_steps_can_be_left_out_of_the_branch_points() -> None:
    """Step 2 is the answer (no tool call): with ``answer_steps=False`` the
    second point is the next most uncertain tool step instead."""
    backend = _scripted(TABLES)
    agent = _agent(backend)
    parent = await _parent(backend, agent)
    every = PartialRolloutBrancher(agent, BranchingConfig(uncertainty="reasoning"))
    tools_only = PartialRolloutBrancher(
        agent, BranchingConfig(uncertainty="reasoning", answer_steps=False)
    )
    assert [p.step for p in every.pick([parent])] == [1, 2]
    assert [p.step for p in tools_only.pick([parent])] == [1, 0]


async def test_continuations_resume_from_the_exact_prefix() -> None:
    backend = _scripted(TABLES)
    agent = _agent(backend)
    parent = await _parent(backend, agent)
    config = BranchingConfig(budget=1 + 4, branch_steps=2, continuations=2, concurrency=2)
    brancher = PartialRolloutBrancher(agent, config)
    before = len(backend.requests)
    result = await brancher.branch("task", [parent])

    # Step 1 (reasoning 1.2) then step 2 (0.3): step 0 is the most certain.
    assert [(p.step, round(p.perplexity, 6)) for p in result.points] == [
        (1, round(math.exp((1.2 * 2 + 0.2 * 2) / 4), 6)),
        (2, round(math.exp(0.3), 6)),
    ]
    assert len(result.continuations) == 4
    assert sorted(c.branch_step or 0 for c in result.continuations) == [1, 1, 2, 2]
    by_id = {r.request_id: r for r in backend.requests[before:]}
    for child in result.continuations:
        k = child.branch_step
        assert k is not None
        assert child.parent_rollout_id == parent.rollout_id
        assert child.status == "finished"
        # The parent's steps before the branch are copied, not re-run.
        assert child.steps[:k] == parent.steps[:k]
        assert [s.index for s in child.steps] == list(range(STEPS))
        assert child.cost.model_calls == STEPS - k
        first = by_id[f"{child.rollout_id}-{k}"]
        # The request's list, the step record's tuple: the same messages.
        assert tuple(first.messages) == parent.steps[k].messages
        earlier = parent.steps[k - 1].messages
        assert tuple(first.messages[: len(earlier)]) == earlier
        assert not any(f"{child.rollout_id}-{i}" in by_id for i in range(k))
    # Only the re-sampled steps and those after them were requested.
    assert len(backend.requests) - before == 2 * (STEPS - 1) + 2 * (STEPS - 2)


async def test_budget_deals_continuations_round_robin() -> None:
    backend = _scripted(TABLES)
    agent = _agent(backend)
    parent = await _parent(backend, agent)
    brancher = PartialRolloutBrancher(agent, BranchingConfig(budget=4))  # 3 continuations fit
    result = await brancher.branch("task", [parent])
    assert sorted(c.branch_step or 0 for c in result.continuations) == [1, 1, 2]
    nothing = await PartialRolloutBrancher(agent, BranchingConfig(budget=1)).branch(
        "task", [parent]
    )
    assert nothing.continuations == []
    assert len(nothing.points) == 2


async def test_run_uses_the_whole_budget_within_the_concurrency_limit() -> None:
    peak = 0
    inner = _script(TABLES)

    def reply(request: ModelRequest) -> ScriptedReply:
        nonlocal peak
        peak = max(peak, backend.in_flight)
        return inner(request)

    backend = ScriptedBackend(reply, latency_s=0.01)
    agent = _agent(backend)
    result = await PartialRolloutBrancher(agent, BranchingConfig(concurrency=3)).run("task")
    assert len(result.initial) == 2  # budget 8 - 2 steps x 3 continuations
    assert len(result.continuations) == 6
    assert len(result.trajectories) == 8
    assert {c.parent_rollout_id for c in result.continuations} <= {
        t.rollout_id for t in result.initial
    }
    assert len({t.rollout_id for t in result.trajectories}) == 8
    assert peak == 3


async def test_resume_rejects_steps_out_of_order() -> None:
    backend = _scripted(TABLES)
    agent = _agent(backend)
    parent = await _parent(backend, agent)
    with pytest.raises(ConfigError, match="resume steps"):
        await agent.run(
            "task", RolloutContext(run_id="run-1", rollout_id="r0", resume=tuple(parent.steps[1:]))
        )


# -- against the sim-server: prefix-cache reuse -----------------------------------


async def _sim_run(
    kind: UncertaintyKind, *, branch: bool
) -> tuple[dict[str, Any], list[Trajectory], list[Trajectory]]:
    """Eight rollouts on a fresh sim-server: branched (2 initial + 6
    continuations) or from scratch on the same schedule (2, then 6, at most 4
    at a time)."""
    config = SimServerConfig(ttft_ms=0, token_ms=0, tool_rounds=3)
    async with SimServer(config) as server:
        async with sim_backend(server, models=["sim"]) as backend:
            agent = Agent(
                AgentConfig(name="sim-brancher", logprobs=True, stop_on=[]),
                backends=[backend],
                tools=[lookup],
            )
            task = "Look a key up three times, then answer."
            brancher = PartialRolloutBrancher(agent, BranchingConfig(uncertainty=kind))
            if branch:
                result = await brancher.run(task)
                first, second = result.initial, result.continuations
            else:
                limiter = anyio.CapacityLimiter(brancher.config.concurrency)
                done: list[Trajectory] = []

                async def fresh() -> None:
                    async with limiter:
                        done.append((await agent.run(task)).trajectory)

                for count in (2, 6):
                    async with anyio.create_task_group() as tg:
                        for _ in range(count):
                            tg.start_soon(fresh)
                first, second = done[:2], done[2:]
        return server.stats(), first, second


@pytest.mark.parametrize("kind", ["combined", "reasoning"])
async def test_continuations_hit_the_servers_prefix_cache(kind: UncertaintyKind) -> None:
    branched, initial, children = await _sim_run(kind, branch=True)
    fresh, fresh_first, fresh_rest = await _sim_run(kind, branch=False)
    fresh_rollouts = [*fresh_first, *fresh_rest]
    assert len(initial) + len(children) == len(fresh_rollouts) == 8
    assert all(t.status == "finished" for t in [*initial, *children, *fresh_rollouts])
    parents = {t.rollout_id: t for t in initial}
    fresh_step0 = [t.steps[0].reply for t in fresh_rollouts]
    fresh_first_cached = max(r.usage.cached_prompt_tokens for r in fresh_step0 if r is not None)
    resumed = 0
    for child in children:
        k = child.branch_step
        assert k is not None
        assert child.parent_rollout_id in parents
        first = child.steps[k]
        assert first.reply is not None
        parent = parents[child.parent_rollout_id]
        assert first.messages == parent.steps[k].messages
        assert child.cost.model_calls == len(child.steps) - k
        if k > 0:
            resumed += 1
            # The parent's history up to the branch comes from the cache: more
            # than any fresh rollout's first request can hit.
            previous = parent.steps[k - 1].reply
            assert previous is not None
            assert first.reply.usage.cached_prompt_tokens >= previous.usage.prompt_tokens
            assert first.reply.usage.cached_prompt_tokens > fresh_first_cached
    assert resumed >= 3
    # Versus eight rollouts from scratch: fewer requests and tokens processed.
    assert branched["requests_total"] < fresh["requests_total"]
    assert branched["tokens"]["prompt"] < fresh["tokens"]["prompt"]
    assert branched["tokens"]["completion"] < fresh["tokens"]["completion"]
