"""Packaging: every package folder ships, under ``agentrt.`` and nowhere else."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".venv", "tests", "bench", "examples", "build", ".typecheck", ".git", ".ci"}


def _declared() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages: list[str] = config["tool"]["setuptools"]["packages"]
    assert config["tool"]["setuptools"]["package-dir"] == {"agentrt": "."}
    return packages


def _on_disk() -> set[str]:
    found = {"agentrt"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and (rel.parts[0] in SKIP or rel.parts[0].startswith(".")):
            continue
        if rel.parts:
            found.add("agentrt." + ".".join(rel.parts))
    return found


def test_every_package_folder_is_declared() -> None:
    assert set(_declared()) == _on_disk()


def test_subpackages_live_under_agentrt_only() -> None:
    for name in _declared():
        assert name == "agentrt" or name.startswith("agentrt.")
        module = importlib.import_module(name)
        assert module.__doc__, f"{name} needs a docstring saying what it owns"


def test_no_top_level_agents_or_tools_package() -> None:
    import importlib.util

    for name in ("agents", "tools", "protocols", "runtime", "aggregators"):
        spec = importlib.util.find_spec(name)
        assert spec is None or "agentrt" not in str(spec.origin), name
