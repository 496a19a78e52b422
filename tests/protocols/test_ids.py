"""Ids are made and read in ``protocols/_ids.py`` alone: its functions, and a
scan of the package for ids built anywhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from agentrt.protocols._ids import (
    RUN_ID_HEX,
    RolloutId,
    branch_rollout_id,
    call_rollout_id,
    new_run_id,
    nth_rollout_id,
    short_rollout_id,
    stage_path,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("agents", "aggregators", "protocols", "runtime", "tools")


def test_a_run_id_is_a_prefix_and_twelve_hex_digits() -> None:
    run_id = new_run_id()
    assert re.fullmatch(rf"run-[0-9a-f]{{{RUN_ID_HEX}}}", run_id), run_id
    assert new_run_id() != run_id
    assert re.fullmatch(r"agg-[0-9a-f]{12}", new_run_id("agg"))


def test_a_task_name_becomes_a_prefix_a_rollout_id_can_carry() -> None:
    run_id = new_run_id("django/django#123 fix.the~bug" + "x" * 60)
    prefix = run_id.rsplit("-", 1)[0]
    assert not set(run_id) & set(".~ /#")
    assert len(prefix) <= 40
    # It still makes rollout ids that parse back.
    rollout = RolloutId.parse(run_id, nth_rollout_id(run_id, 3))
    assert (rollout.run_id, rollout.slot) == (run_id, "r3")
    assert new_run_id("...").startswith("run-")


def test_rollout_call_stage_and_branch_ids() -> None:
    top = nth_rollout_id("run-1", 0)
    assert top == "run-1-r0" == str(RolloutId.nth("run-1", 0))
    call = call_rollout_id(top, "coder", 7)
    assert call == "run-1-r0.coder-7"
    parsed = RolloutId.parse("run-1", call)
    assert parsed.call_numbers() == [7]
    assert parsed.below == "coder-7"
    assert stage_path("solve", 2) == "solve.2"
    branch = branch_rollout_id(top, 3)
    assert re.fullmatch(r"run-1-r0-b3-[0-9a-f]{6}", branch)
    assert short_rollout_id("run-1", call) == "r0.coder-7"
    assert short_rollout_id(None, call) == call
    assert short_rollout_id("run-2", call) == call
    with pytest.raises(ValueError, match=r"free of '\.' and '~'"):
        call_rollout_id(top, "a.b", 1)


# -- nothing else makes ids ---------------------------------------------------------

#: Who may mint ids (``protocols/_ids.py``) or keep a run-scoped counter.
ID_MODULE = "protocols/_ids.py"


def minted_ids(source: str, where: str) -> list[str]:
    """Places in ``source`` that build a run or rollout id by hand: an
    f-string starting ``run-``/``rollout-`` or one that appends ``-r{...}``
    to something, and module-level ``itertools.count`` counters."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and str(head.value).startswith(("run-", "rollout-")):
                found.append(f"{where}:{node.lineno}: a {head.value!r}... id")
            for value in node.values:
                if isinstance(value, ast.Constant) and str(value.value).endswith("-r"):
                    found.append(f"{where}:{node.lineno}: a '-r<i>' rollout id")
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if isinstance(func, ast.Attribute) and func.attr == "count":
                found.append(f"{where}:{stmt.lineno}: a process-global counter")
    return found


def _package_sources() -> list[tuple[str, str]]:
    out = []
    for top in PACKAGE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel != ID_MODULE:
                out.append((rel, path.read_text(encoding="utf-8")))
    return out


def test_no_module_but_the_ids_module_makes_ids() -> None:
    found = [hit for rel, source in _package_sources() for hit in minted_ids(source, rel)]
    assert found == []


def test_a_hand_made_id_and_a_global_counter_are_caught() -> None:
    planted = (
        "import itertools, uuid\n"
        "_numbers = itertools.count(1)\n"
        "def f(run_id, i):\n"
        "    a = f'run-{uuid.uuid4().hex[:12]}'\n"
        "    b = f'{run_id}-r{i}'\n"
        "    return a, b\n"
    )
    assert minted_ids(planted, "x.py") == [
        "x.py:4: a 'run-'... id",
        "x.py:5: a '-r<i>' rollout id",
        "x.py:2: a process-global counter",
    ]
