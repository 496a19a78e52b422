"""The layering rule, checked on the source: imports point downward only.

- ``protocols/`` imports nothing from agentrt but itself;
- the runtime floor (everything in ``runtime/`` but the roof modules listed
  below) never imports agents, tools or aggregators;
- tools never import agents or aggregators; agents never import aggregators;
- nothing below the roof imports the roof.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The roof of runtime/: the only modules allowed to wire every layer together.
ROOF = {
    "runtime/cli",
    "runtime/engine",
    "runtime/serve",
    "runtime/run_demo.py",
}

FORBIDDEN = {
    "protocols": ("agentrt.runtime", "agentrt.tools", "agentrt.agents", "agentrt.aggregators"),
    "runtime-floor": ("agentrt.tools", "agentrt.agents", "agentrt.aggregators"),
    "tools": ("agentrt.agents", "agentrt.aggregators"),
    "agents": ("agentrt.aggregators",),
    "aggregators": (),
}
ROOF_MODULES = (
    "agentrt.runtime.cli",
    "agentrt.runtime.cli.run",
    "agentrt.runtime.engine",
    "agentrt.runtime.serve",
)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append((node.lineno, "<relative import>"))
    return found


def _layer(rel: str) -> str | None:
    top = rel.split("/", 1)[0]
    if top == "runtime":
        is_roof = any(rel == r or rel.startswith(r + "/") for r in ROOF)
        return None if is_roof else "runtime-floor"
    return top if top in FORBIDDEN else None


def _sources() -> list[Path]:
    return sorted(
        p
        for top in ("protocols", "runtime", "tools", "agents", "aggregators")
        for p in (ROOT / top).rglob("*.py")
    )


def test_there_is_something_to_check() -> None:
    assert len(_sources()) >= 10


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_downward(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    layer = _layer(rel)
    if layer is None:
        pytest.skip(f"{rel} is in the roof")
    banned = FORBIDDEN[layer] + ROOF_MODULES
    bad = [
        f"{rel}:{line}: {name}"
        for line, name in _imports(path)
        if name == "<relative import>" or any(name == b or name.startswith(b + ".") for b in banned)
    ]
    if layer == "protocols":
        bad += [
            f"{rel}:{line}: {name}"
            for line, name in _imports(path)
            if name.startswith("agentrt") and not name.startswith("agentrt.protocols")
        ]
    assert not bad, f"layer {layer!r} must not import these (use absolute imports): {bad}"


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "mod.py"
    bad.write_text("from agentrt.agents.loop import Agent\nimport agentrt.tools\n")
    names = [n for _, n in _imports(bad)]
    assert "agentrt.agents.loop.Agent" in names
    assert "agentrt.tools" in names
    assert _layer("runtime/actors/system.py") == "runtime-floor"
    assert _layer("runtime/cli/run.py") is None
    assert _layer("runtime/engine/runtime.py") is None
