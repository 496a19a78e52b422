"""The tooling says one thing once: the version lives in ``_version.py`` only,
and the pre-commit hooks run what ``make lint`` runs."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml

import agentrt

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project
    assert project["dynamic"] == ["version"]
    assert importlib.metadata.version("agentrt") == agentrt.__version__


def _lint_recipe() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    return [line.strip().replace("$(BIN)/", ".venv/bin/") for line in recipe.group(1).splitlines()]


def test_pre_commit_runs_what_make_lint_runs() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook["entry"] + " ." for repo in config["repos"] for hook in repo["hooks"]]
    assert hooks == _lint_recipe()
