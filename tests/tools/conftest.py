"""Fixtures of the sandbox tests: bubblewrap (skips without it, fails under
``AGENTRT_REQUIRE_BWRAP=1``, which CI sets) and a workspace root the
sandbox's user can reach."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def bwrap() -> str:
    """Path of ``bwrap``; skips (or fails under AGENTRT_REQUIRE_BWRAP=1) without it."""
    found = shutil.which("bwrap")
    if found is None:
        if os.environ.get("AGENTRT_REQUIRE_BWRAP") == "1":
            pytest.fail("AGENTRT_REQUIRE_BWRAP=1 but bubblewrap (bwrap) is not installed")
        pytest.skip("needs bubblewrap (apt-get install -y bubblewrap)")
    return found


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A fresh directory that every user can traverse (pytest's own
    ``tmp_path`` is private to its owner, which the sandbox's user is not
    when the tests run as root), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="agentrt-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
