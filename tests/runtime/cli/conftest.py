"""Fixtures of the command-line tests: logging configured before capsys, and
a scripted ``agentrt.toml``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.configs import scripted_models, write_config
from tests._support.logs import warnings_logged

SCRIPTED = scripted_models(["Paris", "Paris", "Lyon", "Paris"], models=["fake-1"])


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    with warnings_logged():
        yield


@pytest.fixture
def config(tmp_path: Path) -> str:
    """An ``agentrt.toml`` whose scripted model answers Paris, Paris, Lyon, Paris."""
    return str(write_config(tmp_path, SCRIPTED))
