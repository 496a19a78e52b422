"""Fixtures of the command-line tests: logging configured before capsys, and
a scripted ``agentrt.toml``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.runtime.observe._log import configure_logging, reset_logging

SCRIPTED = """
[models]
default = "fake"

[models.backends.fake]
kind = "scripted"
models = ["fake-1"]
replies = ["Paris", "Paris", "Lyon", "Paris"]
"""


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    # main() configures logging once per process, against the stderr of the
    # moment, and module-level loggers cache that stream on first use.
    # Configure it here, before capsys swaps in a stream it closes after the
    # test, so that a logger first used in a test here never writes to a
    # closed file in a later test.  Output() still prints to capsys's stderr.
    reset_logging()
    configure_logging("WARNING")
    yield
    reset_logging()


@pytest.fixture
def config(tmp_path: Path) -> str:
    """An ``agentrt.toml`` whose scripted model answers Paris, Paris, Lyon, Paris."""
    path = tmp_path / "agentrt.toml"
    path.write_text(SCRIPTED)
    return str(path)
