"""``agentrt.toml`` for the daemon: valid files load, bad ones say file, key and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.agents import AgentConfig
from agentrt.runtime.errors import ConfigError
from agentrt.runtime.serve.config import load_daemon_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentrt.toml"
    path.write_text(text)
    return path


def test_a_full_file_loads_with_paths_resolved_against_it(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    path = _write(
        tmp_path,
        """
rollouts = 4
aggregate = "rtv"
aggregate_options = { g = 2, v = 3 }

[server]
host = "0.0.0.0"
port = 9000
token_env = "AGENTRT_TEST_TOKEN"
allowed_hosts = ["agents.internal:9000"]

[store]
path = "state/runs.db"

[tools]
files_root = "docs"

[models.backends.local]
kind = "scripted"
replies = ["x"]

[agents.solver]
instructions = "Solve it."
tools = ["calculator"]

[agents]
planner = "specs/planner.yaml"
""",
    )
    config = load_daemon_config(path)
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 9000
    assert config.store.path == tmp_path / "state" / "runs.db"
    assert config.tools.files_root == tmp_path / "docs"
    assert config.runtime.rollouts == 4
    assert config.runtime.aggregate_options == {"g": 2, "v": 3}
    solver = config.runtime.agents["solver"]
    assert isinstance(solver, AgentConfig)
    assert solver.name == "solver"
    assert config.runtime.agents["planner"] == str(tmp_path / "specs" / "planner.yaml")
    assert load_daemon_config(None).server.port == 8765


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ("[server]\nport = 'high'\n", "server.port", "valid integer"),
        ("[server]\nport = 70000\n", "server.port", "less than or equal to 65535"),
        ("[server]\nhots = 'x'\n", "server.hots", "Extra inputs"),
        ("[server]\nhost = '0.0.0.0'\n", "(top level)", "requires a bearer token"),
        ("[server]\ntoken = 'short'\n", "server.token", "at least 16"),
        ("rollouts = 0\n", "rollouts", "greater than or equal to 1"),
        ("[store]\nsynchronous = 'sometimes'\n", "store.synchronous", "'normal' or 'full'"),
        ("[agents.a]\ntemperature = -1\n", "agents.a", "greater than or equal to 0"),
        ("[models.backends.m]\nkind = 'nope'\n", "models", "nope"),
        ("this is = not toml\n", "", "not valid TOML"),
    ],
)
def test_a_bad_file_names_file_key_and_reason(
    tmp_path: Path, text: str, where: str, reason: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_daemon_config(path)
    message = str(caught.value)
    assert str(path) in message
    assert where in message
    assert reason in message


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the configuration: No such file"):
        load_daemon_config(tmp_path / "absent.toml")


def test_the_token_env_must_be_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_daemon_config(_write(tmp_path, "[server]\ntoken_env = 'AGENTRT_TEST_TOKEN'\n"))
    monkeypatch.delenv("AGENTRT_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="AGENTRT_TEST_TOKEN is unset"):
        config.server.resolved_token()
    monkeypatch.setenv("AGENTRT_TEST_TOKEN", "t" * 20)
    assert config.server.resolved_token() == "t" * 20
