"""Spec files: the examples load, the forms and references resolve, and
every malformed spec is one ``SpecError`` naming the file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.agents._spec import (
    AgentSpec,
    BudgetCaps,
    PipelineLimits,
    PipelineSpec,
    SpecLimits,
    budget_slice,
    default_agent,
)
from agentrt.agents._spec_loader import SpecSet, load_spec
from agentrt.agents._spec_yaml import SpecError
from agentrt.protocols import Budget
from agentrt.runtime.kernel._errors import ConfigError

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def spec_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return caught.value


# -- what loads -----------------------------------------------------------------------


def test_the_planner_example_loads_with_a_worker_from_another_file() -> None:
    specs = load_spec(EXAMPLES / "planner_workers.yaml")
    order = [(r.file.name, r.name) for r in specs.build_order()]
    assert order == [
        ("planner_workers.yaml", "arithmetic"),
        ("writer.yaml", "writer"),
        ("planner_workers.yaml", "planner"),
    ]
    planner = specs.unit(specs.root)
    assert isinstance(planner, AgentSpec)
    assert [e.target.name for e in specs.edges[specs.root]] == ["arithmetic", "writer"]
    assert planner.limits.budget.max_tokens is not None


def test_the_pipeline_example_loads_as_a_pipeline_of_three_agents() -> None:
    specs = load_spec(EXAMPLES / "solver_verifier_corrector.yaml")
    pipeline = specs.unit(specs.root)
    assert isinstance(pipeline, PipelineSpec)
    assert [s.stage_name for s in pipeline.stages] == ["solve", "verify", "correct"]
    assert [s.variable for s in pipeline.stages] == ["solution", "review", "solution"]
    assert (pipeline.repeat_from, pipeline.max_rounds, pipeline.answer_variable) == (
        "verify",
        2,
        "solution",
    )
    assert [e.target.name for e in specs.edges[specs.root]] == ["solver", "verifier", "corrector"]


def test_a_one_agent_file_is_named_after_its_file_and_entries_pick_agents(tmp_path: Path) -> None:
    write(tmp_path, "team.yaml", "agents:\n  lead: {sub_agents: [solo.yaml]}\n  second: {}\n")
    write(tmp_path, "solo.yaml", "instructions: alone\nsub_agents: ['team.yaml#second']\n")
    specs = load_spec(tmp_path / "team.yaml")
    assert [r.name for r in specs.build_order()] == ["second", "solo", "lead"]
    assert specs.unit(specs.build_order()[1]).instructions == "alone"
    assert load_spec(f"{tmp_path / 'team.yaml'}#second").root.name == "second"
    assert load_spec(tmp_path / "team.yaml", entry="second").root.name == "second"


def test_tool_shorthands_become_bindings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "a.yaml",
        "mcp_servers:\n  web: {url: 'http://127.0.0.1:9/mcp'}\n"
        "tools:\n  - calculator\n  - pkg.mod:fn\n  - {builtin: read_file, root: data}\n"
        "  - {mcp: web}\n",
    )
    specs = load_spec(path)
    unit = specs.unit(specs.root)
    kinds = [type(t).__name__ for t in unit.tools]
    assert kinds == ["BuiltinTool", "PythonTool", "BuiltinTool", "McpTools"]
    assert specs.servers["web"].transport == "http"


def test_the_default_agent_is_small() -> None:
    agent = default_agent(max_steps=2)
    assert agent.limits.max_steps == 2
    assert agent.limits.max_tokens_per_step <= 256
    assert [t.builtin for t in agent.tools] == ["calculator"]  # type: ignore[union-attr]
    assert SpecSet.single(agent).root.name == "assistant"


# -- malformed files -----------------------------------------------------------------------

ERRORS = [
    pytest.param(
        "name: a\ntools: [calculator\ninstructions: x\n",
        3,
        "",
        "invalid YAML, column",
        id="yaml-syntax",
    ),
    pytest.param(
        "agents:\n  p:\n    limits:\n      max_stepz: 3\n",
        4,
        "agents.p.limits.max_stepz",
        "unknown key 'max_stepz' (did you mean 'max_steps'?)",
        id="unknown-key",
    ),
    pytest.param(
        "name: a\ninstructoins: hi\n",
        2,
        "instructoins",
        "unknown key 'instructoins' (did you mean 'instructions'?)",
        id="unknown-top-key",
    ),
    pytest.param(
        "name: a\ncontext:\n  budget_tokenz: 9\n",
        3,
        "context.budget_tokenz",
        "unknown key 'budget_tokenz'",
        id="unknown-key-in-a-shared-model",
    ),
    pytest.param(
        "name: a\nlimits: {budget_share: 1.5}\n",
        2,
        "limits.budget_share",
        "less than or equal to 1",
        id="bad-value",
    ),
    pytest.param(
        "name: a\ntools:\n  - calculator\n  - calculater\n",
        4,
        "tools[1]",
        "'calculator', 'python', 'read_file', 'list_directory', 'shell' or 'editor'",
        id="unknown-builtin",
    ),
    pytest.param(
        "name: a\ntools:\n  - {bogus: 1}\n",
        3,
        "tools[0]",
        "a tool is a built-in name, a Python binding",
        id="unknown-tool-kind",
    ),
    pytest.param(
        "name: a\ntools: ['pkg.mod:']\n",
        2,
        "tools[0]",
        "should match pattern",
        id="malformed-binding",
    ),
    pytest.param(
        "name: a\ntools:\n  - calculator\n  - builtin: shell\n    approval: {timeout: 60}\n",
        5,
        "tools[1].approval.timeout",
        "unknown key 'timeout' (did you mean 'timeout_s'?)",
        id="approval-unknown-key",
    ),
    pytest.param(
        "name: a\ntools:\n  - builtin: shell\n    approval: {timeout_s: 0}\n",
        4,
        "tools[0].approval.timeout_s",
        "greater than 0",
        id="approval-bad-timeout",
    ),
    pytest.param(
        "agents:\n  p:\n    sub_agents:\n      - {agent: w, approval: soon}\n  w: {}\n",
        4,
        "agents.p.sub_agents[0].approval",
        "valid dictionary",
        id="approval-not-a-mapping",
    ),
    pytest.param(
        "name: a\nname: b\n",
        2,
        "name",
        "duplicate key 'name' (first at line 1)",
        id="duplicate-key",
    ),
    pytest.param(
        "name: a\nmodel: m\nrouting: {policy: fixed, tier: s, tiers: [{name: s, model: m}]}\n",
        3,
        "routing",
        "set `model` or `routing`, not both",
        id="model-and-routing",
    ),
    pytest.param(
        "agents:\n  p: {sub_agents: [wroker]}\n  worker: {}\n",
        2,
        "agents.p.sub_agents[0]",
        "no agent named 'wroker' in this file (defined: p, worker)",
        id="unknown-sub-agent",
    ),
    pytest.param(
        "agents:\n  p:\n    sub_agents: [missing/w.yaml]\n",
        3,
        "agents.p.sub_agents[0]",
        "spec file 'missing/w.yaml' not found",
        id="missing-file",
    ),
    pytest.param(
        "agents:\n  p: {kind: pipline}\n",
        2,
        "agents.p",
        "`kind` is `agent` (default) or `pipeline`",
        id="unknown-kind",
    ),
    pytest.param(
        "agents:\n  p: {name: q}\n",
        2,
        "agents.p.name",
        "differs from its key 'p'",
        id="name-mismatch",
    ),
    pytest.param(
        "entry: x\nagents:\n  p: {}\n",
        1,
        "entry",
        "names 'x'; the agents are p",
        id="unknown-entry",
    ),
    pytest.param(
        "name: a\ntools: [{mcp: files}]\n",
        2,
        "tools[0].mcp",
        "no MCP server named 'files' in this file's `mcp_servers` (defined: none) or the "
        "configuration's [mcp] (configured: none)",
        id="unknown-mcp-server",
    ),
    pytest.param(
        "name: a\nmcp_servers:\n  files: {args: [x]}\n",
        3,
        "mcp_servers.files.command",
        "missing required key",
        id="bad-mcp-server",
    ),
    pytest.param(
        "kind: pipeline\nname: p\nstages:\n  - {agent: p, task: '{solution}'}\n",
        4,
        "stages[0].task",
        "uses {solution}, which no earlier stage defines (defined: previous, task)",
        id="pipeline-undefined-variable",
    ),
    pytest.param(
        "kind: pipeline\nname: p\nstages: [{agent: s}]\nmax_rounds: 2\n",
        4,
        "max_rounds",
        "more than one round needs `repeat_from`",
        id="pipeline-rounds",
    ),
    pytest.param(
        "kind: pipeline\nname: p\nstages:\n  - {agent: s, stop_if: '(unclosed'}\n",
        4,
        "stages[0].stop_if",
        "not a valid regular expression",
        id="pipeline-bad-regex",
    ),
    pytest.param(
        "kind: pipeline\nname: p\nstages: [{agent: s}, {agent: s}]\n",
        3,
        "stages[1]",
        "a second stage named 's'; set `name`",
        id="pipeline-repeated-stage",
    ),
    pytest.param(
        "kind: pipeline\nname: p\nstages: [{agent: s}]\nrepeat_from: t\nanswer: out\n",
        5,
        "answer",
        "names 'out', which no stage outputs (outputs: s)",
        id="pipeline-answer",
    ),
    pytest.param("", 1, "", "the spec file is empty", id="empty"),
    pytest.param("- a\n- b\n", 1, "", "a spec is a mapping", id="not-a-mapping"),
]


@pytest.mark.parametrize(("text", "line", "key", "message"), ERRORS)
def test_a_malformed_spec_names_file_line_and_key(
    tmp_path: Path, text: str, line: int, key: str, message: str
) -> None:
    path = write(tmp_path, "spec.yaml", text)
    error = spec_error(path)
    assert isinstance(error, ConfigError)
    problem = error.problems[0]
    assert (problem.file, problem.line, problem.key) == (str(path), line, key)
    assert message in problem.message
    where = f"{path}:{line}: {key}" if key else f"{path}:{line}"
    assert str(error).startswith(f"{where}: ")


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "spec.yaml",
        "agents:\n  a:\n    limits: {max_steps: 0}\n  b:\n    temperature: hot\n",
    )
    error = spec_error(path)
    assert [(p.line, p.key) for p in error.problems] == [
        (3, "agents.a.limits.max_steps"),
        (5, "agents.b.temperature"),
    ]
    assert f"also: {path}:5: agents.b.temperature:" in str(error)


def test_an_error_in_a_referenced_file_names_that_file(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sub_agents: [workers/w.yaml]\n")
    worker = write(tmp_path, "workers/w.yaml", "instructions: hi\nmax_steps: 3\n")
    error = spec_error(tmp_path / "main.yaml")
    assert str(error).startswith(f"{worker}:2: max_steps: unknown key 'max_steps'")


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert str(spec_error(missing)).startswith(f"{missing}: cannot read the spec file")


# -- cycles and shared servers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cycle", "line"),
    [
        ("agents:\n  a: {sub_agents: [a]}\n", "a -> a", 2),
        (
            "agents:\n  a: {sub_agents: [b]}\n  b:\n    sub_agents: [c]\n  c: {sub_agents: [a]}\n",
            "a -> b -> c -> a",
            5,
        ),
        (
            "agents:\n  p: {kind: pipeline, stages: [{agent: s}]}\n  s: {sub_agents: [p]}\n",
            "p -> s -> p",
            3,
        ),
    ],
    ids=["self", "three", "through-a-pipeline"],
)
def test_cycles_are_errors_naming_the_cycle(
    tmp_path: Path, text: str, cycle: str, line: int
) -> None:
    path = write(tmp_path, "spec.yaml", text)
    error = spec_error(path)
    assert error.problems[0].line == line
    assert error.problems[0].message == f"sub-agent cycle: {cycle}"


def test_a_cycle_across_files_names_the_files(tmp_path: Path) -> None:
    first = write(tmp_path, "one.yaml", "sub_agents: [two.yaml]\n")
    write(tmp_path, "two.yaml", "sub_agents: [one.yaml]\n")
    message = spec_error(first).problems[0].message
    assert message == f"sub-agent cycle: {first}#one -> {tmp_path / 'two.yaml'}#two -> {first}#one"


def test_one_mcp_server_name_with_two_settings_is_an_error(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.yaml",
        "mcp_servers:\n  fs: {command: npx}\ntools: [{mcp: fs}]\nsub_agents: [b.yaml]\n",
    )
    b = write(tmp_path, "b.yaml", "tools:\n  - mcp: {name: fs, command: uvx}\n")
    error = spec_error(tmp_path / "a.yaml")
    text = str(error)
    assert "MCP server 'fs' is also defined, with other settings, at" in text
    assert str(b) in text or str(tmp_path / "a.yaml") in text


def test_an_agent_may_name_an_mcp_server_of_the_configuration(tmp_path: Path) -> None:
    from agentrt.tools.mcp._mcp_config import StdioServerConfig

    path = write(tmp_path, "a.yaml", "name: a\ntools: [{mcp: files}]\n")
    files = StdioServerConfig(name="files", command="npx", args=["-y", "pkg"])
    specs = load_spec(path, servers={"files": files, "unused": files.model_copy()})
    assert specs.servers == {"files": files}
    # The file's own definition wins over the configuration's.
    own = write(
        tmp_path,
        "b.yaml",
        "name: b\nmcp_servers:\n  files: {command: uvx}\ntools: [{mcp: files}]\n",
    )
    mine = load_spec(own, servers={"files": files}).servers["files"]
    assert isinstance(mine, StdioServerConfig)
    assert mine.command == "uvx"


# -- budget slices -------------------------------------------------------------------------


def test_a_budget_slice_is_a_share_of_what_is_left_tightened_by_caps() -> None:
    left = Budget(max_tokens=10_000, max_usd=2.0, max_model_calls=9, max_wall_seconds=None)
    limits = SpecLimits(budget_share=0.25, budget=BudgetCaps(max_tokens=2_000))
    assert budget_slice(limits, left) == Budget(
        max_tokens=2_000, max_usd=0.5, max_model_calls=2, max_wall_seconds=None
    )
    # No share and no caps: no slice of its own (the caller's caps still apply).
    assert budget_slice(PipelineLimits(), left) == Budget()
    assert budget_slice(SpecLimits(budget_share=0.5), Budget()) == Budget()
    caps = PipelineLimits(budget=BudgetCaps(max_wall_seconds=5.0))
    assert budget_slice(caps, Budget()) == Budget(max_wall_seconds=5.0)
