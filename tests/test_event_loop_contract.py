"""The event-loop contract (docs/design/event-loop.md): ordinary code uses
anyio; only the named seams import asyncio itself, each for a stated reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "design" / "event-loop.md"
TOPS = ("protocols", "runtime", "tools", "agents", "aggregators")


def imports_asyncio(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "asyncio" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            return True
    return False


def seams() -> set[str]:
    """The modules the contract's table names (``runtime/kernel/_mailbox.py``,
    ``_ref.py`` after it in the same cell: the same folder)."""
    named: set[str] = set()
    for row in DOC.read_text(encoding="utf-8").splitlines():
        if not row.startswith("| `"):
            continue
        folder = ""
        for path in re.findall(r"`([\w/]+\.py)`", row.split("|")[1]):
            if "/" in path:
                folder = path.rsplit("/", 1)[0]
                named.add(path)
            else:
                named.add(f"{folder}/{path}")
    return named


def test_only_the_seams_import_asyncio() -> None:
    found = {
        str(p.relative_to(ROOT))
        for top in TOPS
        for p in (ROOT / top).rglob("*.py")
        if imports_asyncio(p.read_text(encoding="utf-8"))
    }
    assert len(seams()) >= 10
    assert found - seams() == set(), "import anyio, or add the module to the contract with a why"
    assert seams() - found == set(), "the contract names a module that no longer uses asyncio"


def test_the_check_sees_an_asyncio_import() -> None:
    assert imports_asyncio("import asyncio\n")
    assert imports_asyncio("from asyncio import Future\n")
    assert not imports_asyncio("import anyio\nasyncio = None\n")
