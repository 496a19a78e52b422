"""Hierarchies built from the example specs, end to end on the scripted
backend: the planner delegating to two workers in parallel (budget slices,
events), the solver -> verifier -> corrector pipeline, and build errors."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentrt.agents import EventLog, RolloutContext
from agentrt.agents._delegation import RolloutScopes, SubAgentTool
from agentrt.agents._hierarchy import build_hierarchy
from agentrt.agents._pipeline import PipelineNode
from agentrt.agents._spec import AgentSpec
from agentrt.agents._spec_loader import SpecSet, load_spec
from agentrt.protocols import (
    ModelRequest,
    RolloutFinished,
    RolloutStarted,
    StepRecorded,
    ToolCalled,
    ToolMessage,
    Usage,
)
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools import ToolContext

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def tool_names(request: ModelRequest) -> set[str]:
    return {t.name for t in request.tools}


def tool_results(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def user_text(request: ModelRequest) -> str:
    return str(request.messages[1].content)


def writer_slice(specs: SpecSet, planner_first_call_tokens: int) -> int:
    """The writer's token cap, from the example's numbers: its share of
    what the planner's budget had left after the planner's first call."""
    planner = specs.unit(specs.root)
    writer = next(specs.unit(r) for r in specs.build_order() if r.name == "writer")
    cap = planner.limits.budget.max_tokens
    return int((cap - planner_first_call_tokens) * writer.limits.budget_share)


async def test_the_planner_delegates_to_two_workers_in_parallel_with_budget_slices() -> None:
    specs = load_spec(EXAMPLES / "planner_workers.yaml")
    planner_cap = specs.unit(specs.root).limits.budget.max_tokens
    share = next(
        specs.unit(r) for r in specs.build_order() if r.name == "writer"
    ).limits.budget_share
    # Each writer call reports 60% of its slice: the second call crosses it.
    writer_call_tokens = int(planner_cap * share * 0.6)

    def script(request: ModelRequest) -> ReplySpec:
        names, results = tool_names(request), tool_results(request)
        if names == {"arithmetic", "writer"}:  # the planner
            if not results:
                return [
                    ScriptedToolCall("arithmetic", {"task": "Compute 17 * 23."}),
                    ScriptedToolCall("writer", {"task": "A haiku about the number 391."}),
                ]
            by_tool = {m.name: m.content for m in results}
            computed = str(by_tool["arithmetic"]).splitlines()[0]
            return f"17 * 23 = {computed}; the writer ran out of budget."
        if names == {"calculator"}:  # the arithmetic worker
            if not results:
                return ScriptedToolCall("calculator", {"expression": "17 * 23"})
            return str(results[-1].content)
        # The writer: keeps checking its draft, each call reporting a lot of tokens.
        assert names == {"word_count"}
        return ScriptedReply(
            tool_calls=[ScriptedToolCall("word_count", {"text": "three nine one"})],
            usage=Usage(prompt_tokens=writer_call_tokens, completion_tokens=1),
        )

    backend = ScriptedBackend(script, latency_s=0.02)
    log = EventLog()
    hierarchy = build_hierarchy(specs, backends=[backend], events=log)
    run_ledger = BudgetLedger("run")

    result = await hierarchy.run(
        "17 * 23, and a haiku", RolloutContext.new(run_id="run-7", ledger=run_ledger)
    )

    # The planner carried on after the writer stopped, and answered with the
    # arithmetic worker's result.
    traj = result.trajectory
    assert (traj.agent, traj.status) == ("planner", "finished")
    assert traj.answer == "17 * 23 = 391; the writer ran out of budget."
    delegated = traj.steps[0].tool_results
    assert [r.name for r in delegated] == ["arithmetic", "writer"]
    arithmetic, writer = delegated
    assert not arithmetic.is_error
    assert arithmetic.content.startswith("391\n\n[arithmetic: finished after 2 steps")
    assert "calculator x1" in arithmetic.content
    assert writer.is_error
    assert "sub-agent 'writer' did not finish (budget:" in writer.content

    # Both workers ran as child rollouts of the planner, at the same time.
    started = log.of_type(RolloutStarted)
    finished = {e.rollout_id: e for e in log.of_type(RolloutFinished)}
    root_id = traj.rollout_id
    children = [e for e in started if e.parent_rollout_id == root_id]
    assert len(children) == 2
    child_ids = {e.rollout_id for e in children}
    first_child_end = min(finished[i].seq for i in child_ids)
    assert all(e.seq < first_child_end for e in children)
    statuses = {rid.rsplit(".", 1)[1].split("-")[0]: finished[rid].status for rid in child_ids}
    assert statuses == {"arithmetic": "finished", "writer": "exhausted"}
    # Every event belongs to the run; each tool call and step names its rollout.
    assert {e.run_id for e in log.events} == {"run-7"}
    rollouts = {root_id, *child_ids}
    assert {e.rollout_id for e in log.of_type(ToolCalled)} <= rollouts
    assert {e.rollout_id for e in log.of_type(StepRecorded)} == rollouts

    # The writer's slice was its share of what the planner had left, and the
    # writer stopped on it (one overrunning call), not on the run's cap.
    (planner_ledger,) = run_ledger.children
    assert planner_ledger.budget.max_tokens == planner_cap
    slices = {c.name.rsplit("/", 1)[1].split("-")[0]: c for c in planner_ledger.children}
    first_call = traj.steps[0].reply.usage.total_tokens if traj.steps[0].reply else 0
    expected = writer_slice(specs, first_call)
    assert slices["writer"].budget.max_tokens == expected
    assert slices["writer"].spent.model_calls == 2
    assert slices["writer"].spent.usage.total_tokens > expected
    assert slices["arithmetic"].budget.max_tokens == expected  # the same share of the same rest
    # The run's ledger counts the whole tree.
    total = sum(e.step.reply.usage.total_tokens for e in log.of_type(StepRecorded) if e.step.reply)
    assert run_ledger.spent.usage.total_tokens == total
    assert run_ledger.spent.model_calls == len(backend.requests) == 6


async def test_the_solver_verifier_corrector_pipeline_iterates_until_verified() -> None:
    specs = load_spec(EXAMPLES / "solver_verifier_corrector.yaml")
    verdicts = iter(
        ["The step 25 - 7 is wrong.\nVERDICT: INCORRECT", "All steps hold.\nVERDICT: CORRECT"]
    )

    def script(request: ModelRequest) -> str | ScriptedToolCall:
        task = user_text(request)
        if task.startswith("Problem:") and "Review:" in task:  # the corrector
            return "3x = 18, so x = 6"
        if task.startswith("Problem:"):  # the verifier
            if not tool_results(request):
                return ScriptedToolCall("calculator", {"expression": "3 * 6 + 7"})
            return next(verdicts)
        return "3x = 19, so x = 19/3"  # the solver

    backend = ScriptedBackend(script)
    log = EventLog()
    hierarchy = build_hierarchy(specs, backends={"scripted": backend}, events=log)
    pipeline = hierarchy.root
    assert isinstance(pipeline, PipelineNode)

    outcome = await pipeline.run_stages("Solve 3x + 7 = 25.", RolloutContext.new(run_id="run-p"))

    assert [(s.stage, s.round) for s in outcome.stages] == [
        ("solve", 1),
        ("verify", 1),
        ("correct", 1),
        ("verify", 2),
    ]
    result = outcome.result.trajectory
    assert (result.status, result.answer) == ("finished", "3x = 18, so x = 6")
    assert result.stop_reason == "stage verify (round 2) matched stop_if"
    # Outputs flowed into later stages' tasks.
    solve, verify1, correct, verify2 = outcome.stages
    assert solve.task == "Solve 3x + 7 = 25."
    assert "Proposed solution:\n3x = 19, so x = 19/3" in verify1.task
    assert "Review:\nThe step 25 - 7 is wrong." in correct.task
    assert "Proposed solution:\n3x = 18, so x = 6" in verify2.task
    # The pipeline is one rollout; its stages are its children.
    started = {e.rollout_id: e for e in log.of_type(RolloutStarted)}
    assert started[result.rollout_id].parent_rollout_id is None
    stage_ids = [s.result.trajectory.rollout_id for s in outcome.stages]
    assert all(started[i].parent_rollout_id == result.rollout_id for i in stage_ids)
    # Its cost is what its stages were charged.
    assert result.cost.model_calls == len(backend.requests) == 6
    assert result.cost.usage.total_tokens == sum(s.cost.usage.total_tokens for s in outcome.stages)


async def test_a_stage_that_does_not_finish_ends_the_pipeline_with_its_status() -> None:
    specs = load_spec(EXAMPLES / "solver_verifier_corrector.yaml")
    # The solver never stops calling its tool: it runs out of steps.
    backend = ScriptedBackend(
        lambda request: ScriptedToolCall(
            "calculator", {"expression": f"{len(request.messages)} + 1"}
        )
    )
    hierarchy = build_hierarchy(specs, backends=[backend])
    result = await hierarchy.run("Solve it.")
    assert result.status == "exhausted"
    assert result.answer is None
    assert (result.trajectory.stop_reason or "").startswith(
        "stage solve (round 1) exhausted: max steps"
    )


async def test_a_sub_agent_called_outside_a_hierarchy_rollout_is_a_tool_error() -> None:
    specs = SpecSet.single(AgentSpec(name="solo"))
    node = build_hierarchy(specs, backends=[ScriptedBackend(["hi"])]).root
    tool = SubAgentTool(node, scopes=RolloutScopes())
    with pytest.raises(ToolError, match="which no hierarchy node runs"):
        await tool.call({"task": "x"}, ToolContext(rollout_id="stray"))


async def test_a_zero_budget_slice_stops_the_sub_agent_before_any_call(tmp_path: Path) -> None:
    (tmp_path / "pair.yaml").write_text(
        "agents:\n"
        "  boss: {sub_agents: [helper]}\n"
        "  helper: {limits: {budget: {max_model_calls: 0}}}\n"
    )
    backend = ScriptedBackend([ScriptedToolCall("helper", {"task": "go"}), "done alone"])
    result = await build_hierarchy(load_spec(tmp_path / "pair.yaml"), backends=[backend]).run("t")
    assert (result.status, result.answer) == ("finished", "done alone")
    report = result.trajectory.steps[0].tool_results[0]
    assert report.is_error
    assert "helper: exhausted after 0 steps" in report.content
    assert len(backend.requests) == 2  # the helper never reached the model


async def test_cancelling_the_run_cancels_the_sub_agents(tmp_path: Path) -> None:
    (tmp_path / "pair.yaml").write_text("agents:\n  boss: {sub_agents: [helper]}\n  helper: {}\n")

    def script(request: ModelRequest) -> ScriptedReply | ScriptedToolCall:
        if tool_names(request) == {"helper"}:
            return ScriptedToolCall("helper", {"task": "take your time"})
        return ScriptedReply(content="late", delay_s=30)

    backend = ScriptedBackend(script)
    log = EventLog()
    hierarchy = build_hierarchy(load_spec(tmp_path / "pair.yaml"), backends=[backend], events=log)
    with anyio.move_on_after(0.5):
        await hierarchy.run("t")
    assert backend.in_flight == 0
    assert [e.status for e in log.of_type(RolloutFinished)] == ["cancelled", "cancelled"]


def test_a_binding_that_does_not_import_names_the_file_line_and_reason(tmp_path: Path) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text("name: a\ntools:\n  - calculator\n  - 'no_such_module_xyz.tools:lookup'\n")
    specs = load_spec(spec)
    with pytest.raises(ConfigError) as caught:
        build_hierarchy(specs, backends=[ScriptedBackend(["x"])])
    message = str(caught.value)
    assert message.startswith(f"{spec}:4: tools[1]: tool binding 'no_such_module_xyz.tools:lookup'")
    assert "No module named 'no_such_module_xyz'" in message


def test_a_binding_whose_module_raises_on_import_says_what_it_raised(tmp_path: Path) -> None:
    (tmp_path / "broken_tools_mod.py").write_text("raise RuntimeError('missing API key')\n")
    (tmp_path / "agent.yaml").write_text("name: a\ntools: ['broken_tools_mod:f']\n")
    with pytest.raises(
        ConfigError, match=r"agent.yaml:2: tools\[0\]: .*raised RuntimeError: missing API key"
    ):
        build_hierarchy(load_spec(tmp_path / "agent.yaml"), backends=[ScriptedBackend(["x"])])


def test_a_binding_to_a_missing_attribute_suggests_close_names(tmp_path: Path) -> None:
    (tmp_path / "near_tools_mod.py").write_text("def word_count(text: str) -> int:\n    return 1\n")
    (tmp_path / "agent.yaml").write_text("name: a\ntools: ['near_tools_mod:word_cout']\n")
    with pytest.raises(
        ConfigError, match=r"has no attribute 'word_cout' \(did you mean word_count\?\)"
    ):
        build_hierarchy(load_spec(tmp_path / "agent.yaml"), backends=[ScriptedBackend(["x"])])


def test_a_model_no_backend_serves_is_placed_in_the_spec(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text("name: a\nmodel: gpt-nothing\n")
    with pytest.raises(
        ConfigError, match=r"agent.yaml:1: .*'gpt-nothing', which no backend serves"
    ):
        build_hierarchy(load_spec(tmp_path / "agent.yaml"), backends=[ScriptedBackend(["x"])])


async def test_a_routing_policy_in_the_spec_picks_each_steps_model(tmp_path: Path) -> None:
    (tmp_path / "routed.yaml").write_text(
        "name: routed\n"
        "routing:\n"
        "  policy: fixed\n"
        "  tier: big\n"
        "  tiers: [{name: small, model: small-1}, {name: big, model: large-1}]\n"
    )
    backend = ScriptedBackend(["ok"], models=["small-1", "large-1"])
    result = await build_hierarchy(load_spec(tmp_path / "routed.yaml"), backends=[backend]).run("t")
    assert result.answer == "ok"
    routing = result.trajectory.steps[0].routing
    assert routing is not None
    assert (routing.tier, routing.model) == ("big", "large-1")
    assert backend.requests[0].model == "large-1"
