"""The ``agentrt`` command line: flags, exit codes, output, and ``run``
(the agent loop: the default agent or a spec's hierarchy) against a scripted
backend (fast), a model server in another process (real HTTP, real tool
calls) and the embedded model (real)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentrt import __version__
from agentrt.protocols import RunResult, decode
from agentrt.runtime.cli._main import main
from agentrt.testing import SimServerConfig
from tests._support.configs import scripted_models, write_config
from tests._support.sim_process import sim_server_process

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PLANNER = str(EXAMPLES / "planner_workers.yaml")
PIPELINE = str(EXAMPLES / "solver_verifier_corrector.yaml")


def _config(tmp_path: Path, body: str, name: str = "agentrt.toml") -> str:
    return str(write_config(tmp_path, body, name))


SCRIPTED = scripted_models(["Paris", "  Paris ", "Lyon"], models=["fake-1"])


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"agentrt {__version__}"


def test_help_imports_neither_the_runtime_nor_its_heavy_dependencies() -> None:
    # ``agentrt --help`` stays fast (issue 11: <= 0.5 s) when the command
    # line module loads the actor kernel, logging, pricing and the protocols
    # only once a command runs.
    probe = (
        "import sys\n"
        "from agentrt.runtime.cli._main import main\n"
        "code = main(['--help'])\n"
        "heavy = ['agentrt.runtime.kernel._system', 'agentrt.runtime.budget._pricing',\n"
        "         'agentrt.protocols', 'structlog', 'pydantic', 'msgspec', 'aiohttp']\n"
        "print(code, [m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "0 []"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no command given"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["run"], "the following arguments are required: TASK"),
        (["run", "hi", "--rollouts", "0"], "must be at least 1, got 0"),
        (["run", "hi", "--rollouts", "many"], "expected a whole number, got 'many'"),
        (["run", "hi", "--temperature", "hot"], "expected a number, got 'hot'"),
        (["run", "hi", "--temperature", "nan"], "expected a finite number"),
        (["run", "hi", "--max-tokens", "-3"], "must be at least 1"),
        (["run", "hi", "--bogus"], "unrecognized arguments: --bogus"),
        (["run", "hi", "--model", "nope"], "no configured backend is named or serves model 'nope'"),
        (["run", "hi", "--config", "/nonexistent/agentrt.toml"], "cannot read the configuration"),
        (["run", "hi", "--max-steps", "0"], "must be at least 1, got 0"),
        (["run", "hi", "--agent", "nobody"], "no agent named 'nobody' in the configuration's"),
        (["run", "hi", "--agent", "/nonexistent/a.yaml"], "cannot read the spec file"),
        (["run", "hi", "--agent", f"{PLANNER}#nobody"], "no agent named 'nobody'"),
        (["run", "hi", "--agent", PIPELINE, "--mcp", "npx x"], "the entry is a pipeline"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("agentrt")
    assert message in lines[0]


@pytest.mark.parametrize(
    ("body", "name", "message"),
    [
        ("[models\n", "bad.toml", "not valid TOML"),
        ("{", "bad.json", "not valid JSON"),
        ("[models.backends.x]\nkind = 'llamafile'\n", "a.toml", "models.backends.x.kind: unknown"),
        ("[models.backends.x]\nkind = 'scripted'\n", "b.toml", "models.backends.x.replies"),
        ("models = 3\n", "c.toml", "c.toml:1: models: Input should be a valid dictionary"),
    ],
)
def test_bad_configuration_files_exit_2_naming_where(
    tmp_path: Path, body: str, name: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, body, name)
    assert main(["run", "hi", "--config", path]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert path in err
    assert len(err.strip().splitlines()) == 1


def test_run_prints_each_answer_how_it_ended_the_plurality_and_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED)
    assert main(["run", "Capital of France?", "--rollouts", "3", "--config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    answers = sorted(line for line in lines if line.startswith("["))
    assert answers == ["[r0] Paris", "[r1] Paris", "[r2] Lyon"]
    accounts = [line for line in lines if line.startswith("  ")]
    assert (
        accounts
        == ["  assistant: finished (final answer), 1 step, 0 tool calls, 1 model calls in all"] * 3
    )
    assert lines[-2] == "answer: Paris"
    assert lines[-1].startswith("usage: ")
    assert "3 model calls, " in lines[-1]
    assert "$" not in lines[-1]  # no price for fake-1: no cost shown, rather than $0


def test_run_says_when_a_budget_cap_cut_it_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 rollouts, a token cap for about one call: the first answers, the
    # others cannot get the fewest tokens a step may have.
    config = _config(tmp_path, SCRIPTED)
    argv = ["run", "Capital?", "--rollouts", "3", "--budget-tokens", "130", "--config", config]
    code = main([*argv, "--json"])
    result = decode(capsys.readouterr().out, RunResult)
    assert result.stopped is not None, result
    assert result.stopped.limit == "max_tokens"
    assert result.stopped.rollouts == 3
    assert result.stopped.cut == 3 - result.stopped.finished >= 1
    assert code == (0 if result.answer is not None else 1)
    main(argv)
    out = capsys.readouterr().out.splitlines()
    assert f"run {result.status}, {result.stopped.describe()}" in out, out


def test_run_json_is_a_run_result_with_exact_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED)
    assert main(["run", "Capital?", "--rollouts", "2", "--json", "--config", config]) == 0
    result = decode(capsys.readouterr().out, RunResult)
    assert result.status == "succeeded"
    assert result.answer == "Paris"
    assert [s.rollout_id for s in result.summaries] == [f"{result.run_id}-r{i}" for i in (0, 1)]
    assert result.cost.model_calls == 2
    # The run's usage is exactly the sum of what each call reported.
    assert result.cost.usage.prompt_tokens == sum(
        s.cost.usage.prompt_tokens for s in result.summaries
    )
    assert result.cost.usage.completion_tokens == sum(
        s.cost.usage.completion_tokens for s in result.summaries
    )
    assert result.cost.usage.prompt_tokens > 0
    assert list(result.aggregation_trace[0]["votes"].values()) == [2]


def test_run_an_example_spec_by_path_and_by_configured_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED + f"\n[agents]\nsvc = '{PIPELINE}'\n")
    assert main(["run", "Capital?", "--agent", PLANNER, "--config", config]) == 0
    out = capsys.readouterr().out
    assert "  planner: finished (final answer), 1 step, 0 tool calls" in out
    # The pipeline (scripted text replies, cycling): solve, verify, correct,
    # verify, correct -- no reply says VERDICT, so both rounds run.
    assert main(["run", "Capital?", "--agent", "svc", "--config", config, "--json"]) == 0
    result = decode(capsys.readouterr().out, RunResult)
    assert result.status == "succeeded"
    assert result.cost.model_calls == 5
    assert result.answer == "Paris"


def test_a_run_token_budget_stops_every_rollout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED)
    assert main(["run", "hi", "--rollouts", "2", "--budget-tokens", "50", "--config", config]) == 1
    captured = capsys.readouterr()
    for index in range(2):
        assert f"[r{index}] failed: rollout exhausted: budget:" in captured.out
    assert "0 model calls" in captured.out.splitlines()[-1]
    assert "failed" in captured.err


def test_command_line_overrides_reach_every_agent_and_mcp_the_entry(tmp_path: Path) -> None:
    from agentrt.agents._spec import AgentSpec, McpTools
    from agentrt.agents._spec_loader import SpecSet
    from agentrt.runtime.cli._run_command import agent_specs
    from agentrt.runtime.config._config_file import load_config

    config = load_config(None)
    specs = agent_specs(
        PLANNER, config, max_steps=1, max_tokens=7, temperature=0.0, mcp=("uvx some-server",)
    )
    assert isinstance(specs, SpecSet)
    agents = [specs.unit(ref) for ref in specs.build_order()]
    assert len(agents) == 3
    for agent in agents:
        assert isinstance(agent, AgentSpec)
        assert (agent.limits.max_steps, agent.limits.max_tokens_per_step) == (1, 7)
        assert agent.temperature == 0.0
        assert agent.limits.agent_limits().max_steps == 1
    entry = specs.unit(specs.root)
    added = [t for t in entry.tools if isinstance(t, McpTools)]
    assert [t.server_name for t in added] == ["some-server"]
    assert "some-server" in specs.servers
    # Without overrides, the file's own values.
    plain = agent_specs(PLANNER, config)
    assert isinstance(plain, SpecSet)
    written = yaml.safe_load(Path(PLANNER).read_text())["agents"]["planner"]["limits"]
    assert plain.unit(plain.root).limits.max_steps == written["max_steps"] != 1


def test_a_malformed_spec_is_one_line_naming_file_line_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: a\nlimits:\n  max_stepz: 2\n")
    assert main(["run", "hi", "--agent", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"agentrt: {spec}:3: limits.max_stepz: unknown key 'max_stepz'")
    assert len(err.splitlines()) == 1


def test_a_required_mcp_server_that_does_not_start_fails_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED)
    code = main(["run", "hi", "--config", config, "--mcp", "/nonexistent/mcp-server --stdio"])
    assert code == 2  # the Runtime did not open: a configuration error
    captured = capsys.readouterr()
    assert "[r0] Paris" not in captured.out
    assert captured.err.strip().splitlines()[-1] == (
        "agentrt: mcp server 'mcp-server' (/nonexistent/mcp-server --stdio): "
        "command '/nonexistent/mcp-server' does not exist or is not executable"
    )


def test_rollouts_past_their_deadline_fail_the_run_promptly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(
        tmp_path,
        "[models.backends.slow]\nkind = 'scripted'\nreplies = ['late']\nlatency_s = 3600\n",
    )
    # The slow calls are cancelled with the actor system, not waited for: a
    # command that waited for them would run into the test's timeout.
    code = main(["run", "hi", "--rollouts", "2", "--timeout", "0.2", "--config", config])
    assert code == 1
    captured = capsys.readouterr()
    assert "[r0] failed: no answer within 0.2 s" in captured.out
    assert "failed" in captured.err


def test_an_unloadable_embedded_model_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.gguf"
    config = _config(
        tmp_path, f"[models.backends.local]\nkind = 'embedded'\nmodel_path = '{missing}'\n"
    )
    assert main(["run", "hi", "--config", config]) == 2
    err = capsys.readouterr().err
    assert "models.backends.local" in err
    # Without the `local` extra the message says how to install it instead.
    assert "missing.gguf does not exist" in err or "install the `local` extra" in err


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """The sim-server in its own process (as a user would run it)."""
    # Offered tools, it calls two of them at once, once; then it answers.
    config = SimServerConfig(
        answer="answer", ttft_ms=5, token_ms=0, tool_rounds=1, parallel_tool_calls=2
    )
    with sim_server_process(config) as url:
        yield url


@pytest.mark.parametrize(
    ("kind", "location"),
    [
        ("openai", "base_url = '{url}/v1'\nmodels = ['sim']"),
        ("sglang", "urls = ['{url}']\nmodel = 'sim'"),
    ],
)
def test_run_against_a_model_server_in_another_process(
    sim_url: str, kind: str, location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No early stop: a rollout cancelled mid-call is charged as reserved, and
    # this test checks that the run's cost is exactly its rollouts'.
    body = f"early_stop = false\n\n[models.backends.remote]\nkind = '{kind}'\n"
    body += location.format(url=sim_url)
    config = _config(tmp_path, body)
    argv = ["run", "What is 2+3?", "--rollouts", "4", "--model", "sim", "--json"]
    assert main([*argv, "--config", config]) == 0
    result = decode(capsys.readouterr().out, RunResult)
    assert result.status == "succeeded"
    assert result.answer == "5"  # what the vote compared
    assert result.raw_answer == "ANSWER: 5"  # what the rollout wrote
    # Each rollout: one step calling the calculator (twice), one answering.
    assert result.cost.model_calls == 4 * 2
    assert result.cost.usage.completion_tokens == sum(
        s.cost.usage.completion_tokens for s in result.summaries
    )
    assert result.cost.usage.prompt_tokens > 0
    # The rollouts share the prompt's prefix: the server's cache serves it,
    # and the text output says so beside the cost.
    assert result.cost.usage.cached_prompt_tokens > 0
    assert main(["run", "What is 2+3?", "--rollouts", "2", "--config", config]) == 0
    usage = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"usage: \d+ prompt \(\d+ cached\) \+ \d+ completion tokens, .*", usage)


def test_the_planner_delegates_to_its_workers_over_http(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(
        tmp_path,
        f"[models.backends.remote]\nkind = 'openai'\nbase_url = '{sim_url}/v1'\nmodels = ['sim']\n",
    )
    argv = ["run", "What is 17*23?", "--agent", PLANNER, "--config", config]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    # The planner called both workers at once (the server calls two offered
    # tools), each worker called its own tool and answered; then the planner.
    assert out[0] == "[r0] ANSWER: 391"
    assert out[1] == (
        "  planner: finished (final answer), 2 steps, 2 tool calls, 6 model calls in all"
    )
    assert "6 model calls" in out[2]


def test_a_refused_connection_fails_the_run_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once closed
    body = (
        "[models.backends.down]\nkind = 'openai'\n"
        f"base_url = 'http://127.0.0.1:{port}/v1'\nmodels = ['m']\n"
        "retry = {max_attempts = 1}\n"
    )
    assert main(["run", "hi", "--config", _config(tmp_path, body)]) == 1
    captured = capsys.readouterr()
    assert "[r0] failed:" in captured.out
    assert f"127.0.0.1:{port}" in captured.out


def test_sim_server_is_delegated_with_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.runtime.testing.sim import _sim_server as sim_server

    seen: list[list[str]] = []

    def fake_main(argv: list[str] | None = None) -> int:
        seen.append(list(argv or []))
        return 7

    monkeypatch.setattr(sim_server, "main", fake_main)
    assert main(["sim-server", "--port", "0", "--help"]) == 7
    assert seen == [["--port", "0", "--help"]]


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "run" in out
    assert "sim-server" in out


@pytest.mark.embedded
def test_run_on_the_embedded_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "Say hello.", "--max-tokens", "8", "--max-steps", "1", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "succeeded"
    assert result["answer"]
    usage = result["cost"]["usage"]
    # The prompt holds the instructions and the calculator's definition.
    assert usage["prompt_tokens"] > 100
    assert 0 < usage["completion_tokens"] <= 8
    assert result["cost"]["model_calls"] == 1


@pytest.mark.embedded
def test_a_hierarchy_example_runs_on_the_embedded_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "What is 6 * 7?", "--agent", PLANNER, "--max-tokens", "16", "--max-steps", "2"]
    code = main(argv)
    out = capsys.readouterr().out
    # A 135M model rarely calls tools: the run ends either way, on its limits.
    assert code in (0, 1), out
    assert out.startswith("[r0] ")
    assert "  planner: " in out
    assert out.splitlines()[-1].startswith("usage: ")


def test_frontier_prints_the_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frontier", "--simulate", "--n-tasks", "40"]) == 0
    table = capsys.readouterr().out
    for policy in ("always-small", "always-large", "cascade", "threshold"):
        assert policy in table
    assert "pareto" in table


def test_frontier_with_a_missing_task_file_is_a_user_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["frontier", "--tasks", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
