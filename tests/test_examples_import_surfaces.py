"""Examples, the README and the docs import agentrt only from its public
surfaces (``tests/test_public_surface.py`` pins them), so that what users copy
keeps working when a private module moves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_public_surface import PINNED

ROOT = Path(__file__).resolve().parents[1]
SURFACES = set(PINNED)


def private_imports(source: str, where: str) -> list[str]:
    """Each import of an agentrt module that is not a surface, as ``where:line``."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "agentrt" and name not in SURFACES:
                bad.append(f"{where}:{node.lineno}: {name}")
    return bad


def _documents() -> list[tuple[str, str]]:
    found = [(str(p.relative_to(ROOT)), p.read_text()) for p in (ROOT / "examples").rglob("*.py")]
    # docs/api/ is generated: its blocks are signatures, not programs.
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.parent != ROOT / "docs" / "api"]
    for page in [ROOT / "README.md", *pages]:
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        found += [(f"{page.relative_to(ROOT)} block {i}", b) for i, b in enumerate(blocks, 1)]
    return found


def test_there_are_examples() -> None:
    assert len(_documents()) >= 10


@pytest.mark.parametrize(("where", "source"), _documents(), ids=[w for w, _ in _documents()])
def test_imports_only_surfaces(where: str, source: str) -> None:
    assert private_imports(source, where) == []


def test_a_private_import_is_caught() -> None:
    planted = (
        "import agentrt\n"
        "from agentrt.tools import tool\n"
        "from agentrt.runtime.observe._log import configure_logging\n"
        "import agentrt.runtime.engine._runtime as engine\n"
        "from agentrt.agents._agent import Agent\n"
    )
    assert private_imports(planted, "x.py") == [
        "x.py:3: agentrt.runtime.observe._log",
        "x.py:4: agentrt.runtime.engine._runtime",
        "x.py:5: agentrt.agents._agent",
    ]
