"""The ``agentrt`` command line: flags, exit codes, output, and ``run``
against a scripted backend (fast) and the embedded model (real)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt import __version__
from agentrt.protocols import RunResult, decode
from agentrt.runtime.cli import main
from agentrt.runtime.log import reset_logging


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    # main() configures logging against the current (captured) stderr.
    reset_logging()
    yield
    reset_logging()


def _config(tmp_path: Path, body: str, name: str = "agentrt.toml") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


SCRIPTED = """
[models]
default = "fake"

[models.backends.fake]
kind = "scripted"
models = ["fake-1"]
replies = ["Paris", "  Paris ", "Lyon"]
"""


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"agentrt {__version__}"


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
        ("models = 3\n", "c.toml", "must be a table"),
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


def test_run_prints_each_answer_the_plurality_and_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED)
    assert main(["run", "Capital of France?", "--rollouts", "3", "--config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines[:3]) == ["[rollout-0] Paris", "[rollout-1] Paris", "[rollout-2] Lyon"]
    assert lines[3] == "answer: Paris"
    assert lines[4].startswith("usage: ")
    assert "3 model calls" in lines[4]


def test_run_json_is_a_run_result_with_exact_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, SCRIPTED)
    assert main(["run", "Capital?", "--rollouts", "2", "--json", "--config", config]) == 0
    result = decode(capsys.readouterr().out, RunResult)
    assert result.status == "succeeded"
    assert result.answer == "Paris"
    assert [s.rollout_id for s in result.summaries] == ["rollout-0", "rollout-1"]
    assert result.cost.model_calls == 2
    # The run's usage is exactly the sum of what each call reported.
    assert result.cost.usage.prompt_tokens == sum(
        s.cost.usage.prompt_tokens for s in result.summaries
    )
    assert result.cost.usage.completion_tokens == sum(
        s.cost.usage.completion_tokens for s in result.summaries
    )
    assert result.cost.usage.prompt_tokens > 0
    assert result.aggregation_trace[0]["votes"] == 2


def test_rollouts_past_their_deadline_fail_the_run_promptly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(
        tmp_path,
        "[models.backends.slow]\nkind = 'scripted'\nreplies = ['late']\nlatency_s = 30\n",
    )
    started = time.perf_counter()
    code = main(["run", "hi", "--rollouts", "2", "--timeout", "0.2", "--config", config])
    elapsed = time.perf_counter() - started
    assert code == 1
    captured = capsys.readouterr()
    assert "[rollout-0] failed: no answer within 0.2 s" in captured.out
    assert "failed" in captured.err
    # The slow calls were cancelled with the actor system, not waited for.
    assert elapsed < 5


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
    argv = [sys.executable, "-m", "agentrt.runtime.testing.sim_server", "--port", "0"]
    argv += ["--answer", "answer", "--ttft-ms", "5", "--token-ms", "0"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("agentrt sim-server listening on "), line
            yield line.split()[-1]
        finally:
            process.terminate()
            process.wait(timeout=10)


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
    body = f"[models.backends.remote]\nkind = '{kind}'\n" + location.format(url=sim_url)
    config = _config(tmp_path, body)
    argv = ["run", "What is 2+3?", "--rollouts", "4", "--model", "sim", "--json"]
    assert main([*argv, "--config", config]) == 0
    result = decode(capsys.readouterr().out, RunResult)
    assert result.status == "succeeded"
    assert result.answer == "ANSWER: 5"
    assert result.cost.model_calls == 4
    assert result.cost.usage.completion_tokens == sum(
        s.cost.usage.completion_tokens for s in result.summaries
    )
    assert result.cost.usage.prompt_tokens > 0


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
    assert "[rollout-0] failed:" in captured.out
    assert f"127.0.0.1:{port}" in captured.out


def test_sim_server_is_delegated_with_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.runtime.testing import sim_server

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
    code = main(["run", "Say hello.", "--max-tokens", "8", "--seed", "3", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "succeeded"
    assert result["answer"]
    usage = result["cost"]["usage"]
    assert usage["prompt_tokens"] > 10
    assert 0 < usage["completion_tokens"] <= 8
    assert result["cost"]["model_calls"] == 1


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
