"""Waiting on state a test cannot be told about: another process, or an
actor or server that has no event to wait on from the test."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import psutil


async def eventually(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``within`` s."""
    with anyio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - nothing to wait on but the state
            await anyio.sleep(0.02)


def gone(pid: int | None) -> bool:
    """The process exited (a zombie awaiting its reaper counts as gone)."""
    assert pid is not None
    try:
        return str(psutil.Process(pid).status()) == str(psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
