"""The public surfaces, pinned: what a user may import, and nothing else.

Each surface's ``__all__`` is pinned in ``public_surface.toml`` (like httpx's
``test_exported_members`` and anyio's ``test_all_attributes``): a public name
added to a surface without being listed, or listed without being meant, fails
until that file says so.  Every other module is private: its file name starts
with ``_``, and the ``__init__`` of a private package holds only its
docstring, so no name is reachable from a path that is not a surface.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import tomllib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: surface -> its public names, sorted (``public_surface.toml``).
PINNED: dict[str, tuple[str, ...]] = {
    name: tuple(table["names"])
    for name, table in tomllib.loads((ROOT / "tests" / "public_surface.toml").read_text()).items()
}
#: Top-level files: the surfaces, ``python -m agentrt`` and the version.
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "_version.py",
    "actors.py",
    "client.py",
    "models.py",
    "testing.py",
}
#: Packages whose ``__init__`` is a surface (the rest hold a docstring only).
SURFACE_PACKAGES = {"protocols", "agents", "aggregators", "tools"}
LAYERED = ("protocols", "runtime", "tools", "agents", "aggregators")


def surface_problems(module: types.ModuleType, pinned: tuple[str, ...]) -> list[str]:
    """What is wrong with one surface: names defined but not listed, listed but
    not pinned (or pinned but not listed), listed twice, or that do not resolve."""
    problems = []
    listed = list(module.__all__)
    if len(set(listed)) != len(listed):
        problems.append(f"{module.__name__}.__all__ lists a name twice")
    for name in sorted(set(listed) - set(pinned)):
        problems.append(f"{module.__name__}.{name} is listed but not pinned as public")
    for name in sorted(set(pinned) - set(listed)):
        problems.append(f"{module.__name__}.{name} is pinned but not listed")
    for name in listed:
        if not hasattr(module, name):
            problems.append(f"{module.__name__}.{name} is listed but does not resolve")
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or name in listed or isinstance(value, types.ModuleType):
            continue
        if getattr(value, "__module__", None) == "typing" or name == "TYPE_CHECKING":
            continue  # typing helpers the surface itself uses
        problems.append(f"{module.__name__}.{name} is public but not in __all__")
    return problems


@pytest.mark.parametrize("name", sorted(PINNED))
def test_surface_is_pinned(name: str) -> None:
    module = importlib.import_module(name)
    for member in module.__all__:
        getattr(module, member)  # lazy names load, so vars() below sees them
    assert surface_problems(module, PINNED[name]) == []


def test_a_surface_violation_is_caught() -> None:
    fake = types.ModuleType("fake")
    fake.__all__ = ["listed", "ghost", "listed"]  # type: ignore[attr-defined]
    fake.listed = 1  # type: ignore[attr-defined]
    fake.stray = 2  # type: ignore[attr-defined]
    fake.helper = inspect  # type: ignore[attr-defined]  # a module is not a name
    problems = surface_problems(fake, ("listed", "pinned"))
    assert problems == [
        "fake.__all__ lists a name twice",
        "fake.ghost is listed but not pinned as public",
        "fake.pinned is pinned but not listed",
        "fake.ghost is listed but does not resolve",
        "fake.stray is public but not in __all__",
    ]


def module_problems(rel: str, text: str) -> list[str]:
    """A module that is neither a surface nor private, or a private package's
    ``__init__`` that holds more than its docstring."""
    parts = rel.split("/")
    if len(parts) == 1:
        return [] if rel in TOP_LEVEL or rel.startswith("_") else [f"{rel} is public"]
    if parts[-1] == "__init__.py":
        if len(parts) == 2 and parts[0] in SURFACE_PACKAGES:
            return []
        body = ast.parse(text).body
        is_doc = len(body) == 1 and isinstance(body[0], ast.Expr)
        return [] if is_doc else [f"{rel}: a private package's __init__ holds its docstring only"]
    return [] if parts[-1].startswith("_") else [f"{rel}: private modules are named _name.py"]


def test_every_other_module_is_private() -> None:
    sources = [p for top in LAYERED for p in (ROOT / top).rglob("*.py")]
    sources += list(ROOT.glob("*.py"))
    assert len(sources) > 200
    problems = [
        problem
        for p in sources
        for problem in module_problems(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
    ]
    assert problems == []


def test_a_public_module_is_caught() -> None:
    assert module_problems("runtime/kernel/cell.py", "") != []
    assert module_problems("runtime/kernel/__init__.py", '"""Doc."""\nfrom x import y\n') != []
    assert module_problems("helpers.py", "") != []
    assert module_problems("runtime/kernel/_cell.py", "x = 1") == []
    assert module_problems("tools/__init__.py", "from x import y") == []
