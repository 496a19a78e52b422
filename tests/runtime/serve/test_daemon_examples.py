"""The daemon's examples stay true: ``examples/agentrt.toml`` loads as the
daemon reads it, and ``examples/openai_client.py`` and
``examples/rest_client.py`` get an answer from ``agentrt serve``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.runtime.config._config_file import load_config
from tests._support.configs import scripted_models
from tests._support.daemon import serving
from tests._support.examples import run_example

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]


def test_the_example_configuration_loads() -> None:
    config = load_config(ROOT / "examples" / "agentrt.toml")
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8765
    assert config.runtime.default_agent == "solver"
    assert "solver" in config.runtime.agents
    assert config.store.path == ROOT / "examples" / "agentrt-runs.db"


TOKEN = "example-token-0123456789"


@contextmanager
def _serving(tmp_path: Path, daemon_kit: Any) -> Iterator[int]:
    """``agentrt serve`` on a scripted model that answers "391", for as long as
    the block runs; yields its port."""
    port = daemon_kit.free_port()
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f"""
[server]
port = {port}
token = "{TOKEN}"

[store]
path = "runs.db"

{scripted_models(["391"], backend="s")}
[agents.solver]
instructions = "Solve the task."
"""
    )
    with serving(config, port, tmp_path / "daemon.log"):
        yield port


def _run_example(example: str, url: str) -> subprocess.CompletedProcess[str]:
    return run_example(example, env={"AGENTRT_URL": url, "AGENTRT_TOKEN": TOKEN})


@pytest.mark.slow
def test_the_openai_client_example_talks_to_agentrt_serve(tmp_path: Path, daemon_kit: Any) -> None:
    with _serving(tmp_path, daemon_kit) as port:
        out = _run_example("openai_client.py", f"http://127.0.0.1:{port}/v1")
        answer, usage = out.stdout.splitlines()
        assert answer == "391"
        # One token per rollout (four); no prefix warm-up by default.
        assert "completion_tokens=4" in usage
        runs = httpx.get(
            f"http://127.0.0.1:{port}/v1/runs",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=5,
        ).json()["runs"]
        assert [(r["rollouts"], r["status"]) for r in runs] == [(4, "succeeded")]


@pytest.mark.slow
def test_the_rest_client_example_follows_a_run_of_agentrt_serve(
    tmp_path: Path, daemon_kit: Any
) -> None:
    with _serving(tmp_path, daemon_kit) as port:
        out = _run_example("rest_client.py", f"http://127.0.0.1:{port}")
        lines = out.stdout.splitlines()
        assert sorted(line for line in lines if " step " in line) == [
            f"{run}-r{i} step 0" for run in [lines[-2].split()[0]] for i in range(3)
        ]
        assert "succeeded: 391" in lines
        assert lines[-2].endswith("cost 3 model calls")
        assert lines[-1] == "not found: run_id"
