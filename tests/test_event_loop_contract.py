"""The event-loop contract (docs/design/event-loop.md): ordinary code uses
anyio; only the named seams import asyncio itself, each for a stated reason;
one module, ``runtime/kernel/_timers.py``, schedules the loop timers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "design" / "event-loop.md"
TOPS = ("protocols", "runtime", "tools", "agents", "aggregators")
TIMERS = "runtime/kernel/_timers.py"
#: The daemon's HTTP server keeps its transports' own timers on its own loop.
DAEMON = "runtime/serve/"


def imports_asyncio(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "asyncio" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            return True
    return False


def schedules_loop_timers(source: str) -> bool:
    """Whether the module schedules a loop timer (``call_at``, ``call_later``)."""
    return any(
        isinstance(node, ast.Attribute) and node.attr in ("call_at", "call_later")
        for node in ast.walk(ast.parse(source))
    )


def sources() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for top in TOPS
        for p in (ROOT / top).rglob("*.py")
    }


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
    found = {path for path, source in sources().items() if imports_asyncio(source)}
    assert len(seams()) >= 10
    assert found - seams() == set(), "import anyio, or add the module to the contract with a why"
    assert seams() - found == set(), "the contract names a module that no longer uses asyncio"


def test_the_check_sees_an_asyncio_import() -> None:
    assert imports_asyncio("import asyncio\n")
    assert imports_asyncio("from asyncio import Future\n")
    assert not imports_asyncio("import anyio\nasyncio = None\n")


def test_one_module_schedules_loop_timers() -> None:
    assert TIMERS in seams()
    found = {path for path, source in sources().items() if schedules_loop_timers(source)}
    assert {p for p in found if not p.startswith(DAEMON)} == {TIMERS}, (
        "ask the timers (TaskDeadlines, AskDeadlines) instead of scheduling a loop timer"
    )
    doc = (ROOT / TIMERS).read_text(encoding="utf-8")
    assert "docs/design/event-loop.md" in doc  # the seam says where its contract is


def test_the_check_sees_a_loop_timer() -> None:
    assert schedules_loop_timers("loop.call_at(when, fire)\n")
    assert schedules_loop_timers("asyncio.get_running_loop().call_later(1.0, fire)\n")
    assert not schedules_loop_timers("loop.call_soon(fire)\n")
