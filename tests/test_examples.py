"""The embedding examples run (scripted backends: fast and deterministic)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentrt.runtime.config._config_file import load_config
from agentrt.runtime.models._model_registry import ModelRegistry
from tests._support.examples import run_example

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "embed_app.py": ["rollout r3 answered 42", "round 2: winner", "answer: 42 (5 model calls"],
    "custom_aggregator.py": ["answer: Paris", "'Paris' scored 2 over 3"],
    "custom_tool.py": ["answer: One apple costs 0.50 EUR.", "model calls: 2"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    out = run_example(name)
    for line in EXPECTED[name]:
        assert line in out.stdout, out.stdout


@pytest.mark.embedded
def test_the_embedded_runtime_example_runs() -> None:
    out = run_example("embed_runtime.py", timeout=300)
    status, calls = out.stdout.splitlines()[0], out.stdout.splitlines()[-1]
    assert status.startswith("succeeded ")
    assert "model calls" in calls
    assert int(calls.split()[0]) >= 4  # every rollout made at least one call


def test_the_openai_client_example_asks_for_an_agent_of_the_example_config() -> None:
    """``examples/openai_client.py`` (and the README's copy of it) names a
    model the README's daemon configuration, ``examples/agentrt.toml``, serves."""
    config = load_config(ROOT / "examples" / "agentrt.toml")
    for text in (
        (ROOT / "examples" / "openai_client.py").read_text(),
        (ROOT / "README.md").read_text(),
    ):
        models = re.findall(r'model="agentrt/([^"]+)"', text)
        assert models
        assert all(m in config.runtime.agents for m in models), models


def test_the_sglang_gpu_example_parses_and_names_its_backends() -> None:
    """``examples/sglang_gpu.toml`` (docs/swe-bench.md's ``gpu.toml``) loads;
    its SGLang backend takes the server's model name (it gives none).  A
    real SGLang server runs it: tests/integration/test_sglang.py."""
    config = load_config(ROOT / "examples" / "sglang_gpu.toml")
    registry = ModelRegistry(config.runtime.models)
    assert registry.backend_names() == ["coder", "coder-openai"]
    assert registry.default == "coder"
    assert registry.models_of("coder") == []  # read from the server on opening
    assert registry.resolve("coder-openai") == ("coder-openai", "coder")
