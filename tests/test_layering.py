"""The layering rule, read from the folders: imports point downward only.

The layer of a module is the folder it is in (``runtime/`` holds two layers,
so its subfolders say which).  From the bottom up::

    protocols < floor (runtime/kernel, models, budget, routing, memory,
    observe, testing, wire) < tools < agents < aggregators < roof
    (runtime/engine, placement, config, serve, cli, evaluation)

A module imports its own layer and the layers below it, never above; the
public surfaces (``agentrt``, ``agentrt.models``, ``agentrt.actors``,
``agentrt.testing`` and the subpackages' ``__init__``) re-export, and
nothing inside the package imports a top-level surface module.  A new folder
under ``runtime/`` fails here until it is given a layer below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ORDER = ("protocols", "floor", "tools", "agents", "aggregators", "roof")
#: The two layers of runtime/, by subfolder.
RUNTIME = {
    "kernel": "floor",
    "models": "floor",
    "budget": "floor",
    "routing": "floor",
    "memory": "floor",
    "observe": "floor",
    "testing": "floor",
    "wire": "floor",
    "client": "floor",
    "engine": "roof",
    "placement": "roof",
    "config": "roof",
    "serve": "roof",
    "cli": "roof",
    "evaluation": "roof",
}
TOPS = ("protocols", "runtime", "tools", "agents", "aggregators")
#: The top-level surface modules: they re-export and nothing imports them.
SURFACE_MODULES = (
    "agentrt",
    "agentrt.models",
    "agentrt.actors",
    "agentrt.testing",
    "agentrt.client",
)


def layer_of_path(rel: str) -> str:
    """The layer of a repository-relative source path (``runtime/kernel/_cell.py``)."""
    parts = rel.split("/")
    top = parts[0]
    if top == "runtime":
        if len(parts) == 2:  # runtime/__init__.py: a docstring only
            return "floor"
        sub = parts[1]
        if sub not in RUNTIME:
            raise LookupError(f"runtime/{sub}/ has no layer: add it to RUNTIME in {__file__}")
        return RUNTIME[sub]
    if top in ORDER:
        return top
    raise LookupError(f"{rel} is not in a layered folder")


def layer_of_module(name: str) -> str | None:
    """The layer of an imported ``agentrt`` module name, or None outside agentrt."""
    parts = name.split(".")
    if parts[0] != "agentrt" or len(parts) == 1:
        return None
    if parts[1] == "runtime":
        if len(parts) == 2:
            return "floor"
        return RUNTIME.get(parts[2], "roof")
    return parts[1] if parts[1] in ORDER else None


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append((node.lineno, "<relative import>"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return found


def violations(rel: str, source: Path) -> list[str]:
    layer = layer_of_path(rel)
    bad = []
    for line, name in imports(source):
        if name == "<relative import>":
            bad.append(f"{rel}:{line}: a relative import (use absolute imports)")
            continue
        if name in SURFACE_MODULES:
            bad.append(f"{rel}:{line}: {name} is a surface; import the private module")
            continue
        target = layer_of_module(name)
        if target is not None and ORDER.index(target) > ORDER.index(layer):
            bad.append(f"{rel}:{line}: {name} ({target}) is above {layer}")
    return bad


def sources() -> list[Path]:
    return sorted(p for top in TOPS for p in (ROOT / top).rglob("*.py"))


def test_there_is_something_to_check() -> None:
    assert len(sources()) >= 100


def test_every_runtime_folder_has_a_layer() -> None:
    folders = {p.name for p in (ROOT / "runtime").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(RUNTIME)


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_downward(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    bad = violations(rel, path)
    assert not bad, "\n".join(bad)


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    """A planted upward import in each layer is found; a downward one is not."""
    planted = {
        "protocols/_x.py": "from agentrt.runtime.kernel._cell import Cell\n",
        "runtime/kernel/_x.py": "import agentrt.tools._tool\n",
        "runtime/models/_x.py": "from agentrt.runtime.engine._runtime import Runtime\n",
        "tools/_x.py": "from agentrt.agents._agent import Agent\n",
        "agents/_x.py": "from agentrt.aggregators._vote import MajorityVote\n",
        "aggregators/_x.py": "from agentrt.runtime.serve._app import build_app\n",
        "runtime/serve/_x.py": "from agentrt import Runtime\n",
        "runtime/cli/_x.py": "from . import _flags\n",
    }
    for rel, text in planted.items():
        source = tmp_path / rel.replace("/", "_")
        source.write_text(text)
        assert violations(rel, source), rel
    fine = tmp_path / "fine.py"
    fine.write_text("from agentrt.protocols._messages import UserMessage\nimport msgspec\n")
    assert not violations("runtime/serve/_x.py", fine)
    assert not violations("tools/_x.py", fine)
    with pytest.raises(LookupError, match="has no layer"):
        layer_of_path("runtime/elsewhere/_x.py")
