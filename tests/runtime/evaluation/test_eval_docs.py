"""docs/evaluation.md stays true: every command of its first ``sh`` block
runs as written (from a directory holding the repository's examples) and
exits 0; its Parquet lines run where pyarrow is installed (required in CI)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")


def commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", DOC, re.S)
    assert block is not None, "docs/evaluation.md has no sh block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_the_documented_commands_run(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    has_pyarrow = importlib.util.find_spec("pyarrow") is not None
    if not has_pyarrow and os.environ.get("AGENTRT_REQUIRE_PYARROW") == "1":
        pytest.fail("AGENTRT_REQUIRE_PYARROW=1 but pyarrow is not installed")
    ran = 0
    for line in commands():
        argv = shlex.split(line)
        assert argv[0] == "agentrt", line
        if "parquet" in line and not has_pyarrow:
            continue
        out = subprocess.run(
            [sys.executable, "-m", "agentrt", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, f"{line}\n{out.stdout}\n{out.stderr}"
        ran += 1
        if argv[1] == "eval":
            assert "drawn once" in out.stdout
        if argv[1] == "aggregate" and "--json" not in argv:
            assert "no rollout was run" in out.stdout
    assert ran >= 3
    assert (tmp_path / "pool.jsonl").is_file()
