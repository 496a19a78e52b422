"""What a test needs from the machine (a program, an optional package): it
skips without it, or fails when its ``AGENTRT_REQUIRE_*`` flag is ``1``, as
CI sets them, so that a missing install step cannot hide behind a skip."""

from __future__ import annotations

import os
import shutil

import pytest


def require(available: bool, flag: str, reason: str) -> None:
    """Skip the test for ``reason`` unless ``available``; fail it instead
    when the environment variable ``flag`` is ``1``."""
    if available:
        return
    if os.environ.get(flag) == "1":
        pytest.fail(f"{reason}; {flag}=1 makes this fatal")
    pytest.skip(reason)


def program(name: str, flag: str, reason: str) -> str:
    """The path of the executable ``name`` (see ``require``)."""
    found = shutil.which(name)
    require(found is not None, flag, reason)
    assert found is not None
    return found
