"""The suite's own rules: a test module that starts processes is marked
``process`` (``make test-fast`` leaves those out, and the root conftest reaps
what they leave behind), so a new one cannot slip into the fast loop."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What starting a process looks like in a test module: subprocesses, the
#: sim-server's process, npx servers, the bubblewrap sandbox and the tools
#: that run in it, Ray, managed model servers, MCP servers over stdio.
STARTS_PROCESSES = re.compile(
    r"\b(subprocess|open_process|create_subprocess_exec|start_sim_server_process|Popen|npx"
    r"|bwrap|Sandbox\b|SandboxConfig|ShellTool|PythonSandbox|EditorTool|unshare|import ray"
    r"|ManagedServer|StdioServerConfig|serve_stdio|multiprocessing|os\.fork|sys\.executable)"
)


def module_marks(source: str) -> set[str]:
    """The marks of a module's ``pytestmark``."""
    marks: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            for sub in ast.walk(node.value):
                is_mark = isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                if is_mark and sub.value.attr == "mark":  # type: ignore[attr-defined]
                    marks.add(sub.attr)  # type: ignore[attr-defined]
    return marks


def unmarked(rel: str, source: str) -> list[str]:
    if STARTS_PROCESSES.search(source) and "process" not in module_marks(source):
        return [f"{rel} starts processes: add pytest.mark.process to its pytestmark"]
    return []


def _test_modules() -> list[Path]:
    return sorted((ROOT / "tests").rglob("test_*.py"))


@pytest.mark.parametrize("path", _test_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_that_start_processes_are_marked(path: Path) -> None:
    if path.name == "test_suite_marks.py":
        return  # this file names the patterns it looks for
    assert unmarked(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")) == []


def test_an_unmarked_module_is_caught() -> None:
    source = "import subprocess\n\npytestmark = pytest.mark.anyio\n"
    assert unmarked("tests/x.py", source) != []
    marked = "import subprocess\n\npytestmark = [pytest.mark.anyio, pytest.mark.process]\n"
    assert unmarked("tests/x.py", marked) == []
    assert unmarked("tests/x.py", "import json\n") == []
