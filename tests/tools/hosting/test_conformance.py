"""The MCP conformance suite (every server scenario) passes against
examples/mcp_conformance_server.py: runs .ci/mcp-conformance.sh."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).parents[3]
SCRIPT = ROOT / ".ci" / "mcp-conformance.sh"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_conformance_server_scenario_passes(npx: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "CONFORMANCE_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=850, check=False
    )
    report = done.stdout + done.stderr
    print(report)  # the per-scenario table, visible with -s or on failure
    assert done.returncode == 0, report
    total = re.search(r"^TOTAL .* (\d+)/(\d+) scenarios passed$", done.stdout, re.MULTILINE)
    assert total is not None, report
    passed, listed = int(total.group(1)), int(total.group(2))
    assert passed == listed > 0
    header = done.stdout.index("scenario ")
    rows = done.stdout[header:].splitlines()[1 : listed + 1]
    assert len(rows) == listed, report
    assert all(row.endswith(" pass") for row in rows), report
