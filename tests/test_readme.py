"""The README stays true: it opens with the two set-up commands, and its
example is the file the tests run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._support.examples import run_example

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_opens_with_the_two_setup_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]
    assert README.index("```sh") < README.index("```python")


def _example_body(name: str) -> str:
    example = (ROOT / "examples" / name).read_text(encoding="utf-8")
    return example.split('"""', 2)[2].lstrip("\n")


def test_the_first_readme_example_is_examples_embedded_model() -> None:
    block = re.search(r"```python\n(.*?)```", README, re.S)
    assert block is not None
    body = _example_body("embedded_model.py")
    assert block.group(1) == body
    assert len([line for line in body.splitlines() if line.strip()]) <= 12


def test_every_readme_python_block_is_an_example_file() -> None:
    bodies = {p.name: _example_body(p.name) for p in (ROOT / "examples").glob("*.py")}
    for block in re.findall(r"```python\n(.*?)```", README, re.S):
        assert block in bodies.values(), f"README block not in examples/: {block[:80]!r}"


def test_the_actor_example_runs() -> None:
    assert run_example("actors_counter.py").stdout.strip() == "2"


@pytest.mark.embedded
def test_the_readme_example_runs() -> None:
    out = run_example("embedded_model.py", timeout=120, env={"PYTHONWARNINGS": "error"})
    assert "prompt_tokens=" in out.stdout
    assert "completion_tokens=" in out.stdout
