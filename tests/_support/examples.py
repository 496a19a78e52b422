"""The programs in ``examples/``, run as a user runs them: their own
process, warnings turned into errors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(
    name: str, *, timeout: float = 60, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -W error examples/<name>`` (with ``env`` added to this
    process's environment), once it exited 0 within ``timeout`` s; the
    test fails with its stderr otherwise."""
    out = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out
