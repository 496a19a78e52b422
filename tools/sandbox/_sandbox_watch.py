"""What keeps a running sandbox within its workspace's quota:
``SandboxWatch`` (measures the workspace while the command runs, and says
when the quota was crossed) and ``workspace_bytes``.

The blocks the workspace's files take, hard links once, measured as often
as costs at most ``DISK_SHARE`` of a core.  Polled, so a command may
overshoot by what it writes within one measure; ``RLIMIT_FSIZE`` bounds
each file.  (Memory needs no watcher: ``RLIMIT_AS`` times the process cap
is a hard bound.)  Must not know how the sandbox is started or killed
(``agentrt.tools.sandbox._bwrap``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, final

import anyio
import anyio.to_thread

__all__ = ["SandboxWatch", "workspace_bytes"]

#: How often the watcher wakes; the workspace is measured on a wake-up
#: once its share allows.
POLL_S: Final = 0.1
#: The share of one core measuring the workspace (a walk of its files, in a
#: thread) may take: a small workspace is measured every poll, one whose walk
#: takes 10 ms every 0.5 s.
DISK_SHARE: Final = 0.02
_MIB: Final = 1024 * 1024


def workspace_bytes(root: Path) -> int:
    """The disk blocks the files under ``root`` take, in bytes (symlinks
    not followed, a hard-linked file once)."""
    total = 0
    inodes: set[tuple[int, int]] = set()
    pending = [str(root)]
    while pending:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if info.st_nlink > 1:
                        if (info.st_dev, info.st_ino) in inodes:
                            continue
                        inodes.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
    return total


@final
class SandboxWatch:
    """Watches one running sandbox's workspace; ``run`` returns (after
    calling ``kill``) when its quota is crossed, and ``over`` then says so,
    in a sentence for the model.

    ``workspace``/``workspace_mb``: the directory and its quota (``None``:
    not watched); a workspace that was already over it when the command
    started may not grow (so ``rm`` still runs in it)."""

    __slots__ = ("_disk_limit", "_kill", "_next_disk", "_workspace", "over")

    def __init__(
        self,
        *,
        workspace: Path | None,
        workspace_mb: int | None,
        kill: Callable[[], Awaitable[None]],
    ) -> None:
        self._workspace = workspace if workspace_mb is not None else None
        self._disk_limit = 0 if workspace_mb is None else workspace_mb * _MIB
        self._kill = kill
        self._next_disk = 0.0
        self.over = ""

    @property
    def active(self) -> bool:
        return self._workspace is not None

    async def prepare(self) -> None:
        """Measure the workspace before the command starts: one already
        over its quota may not grow (and the walk's time sets how often
        it is measured again)."""
        if self._workspace is not None:
            started = time.monotonic()
            before = await anyio.to_thread.run_sync(workspace_bytes, self._workspace)
            self._disk_limit = max(self._disk_limit, before)
            self._next_disk = time.monotonic() + (time.monotonic() - started) / DISK_SHARE

    async def check_disk_after(self) -> None:
        """After the command: did it leave the workspace over its quota?"""
        if self._workspace is not None and not self.over:
            used = await anyio.to_thread.run_sync(workspace_bytes, self._workspace)
            self.check_disk(used, running=False)

    def check_disk(self, used: int, *, running: bool) -> bool:
        if self._workspace is None or used <= self._disk_limit:
            return False
        ended = "every process of the command was killed" if running else "the command ended"
        self.over = (
            f"Over quota: the workspace grew past its disk quota of "
            f"{self._disk_limit / _MIB:.0f} MiB ({used / _MIB:.0f} MiB); {ended}. "
            "Delete files you do not need: the workspace may not grow until it is under the quota."
        )
        return True

    async def run(self) -> None:
        """Measure until the quota is crossed (then kill and return) or cancelled."""
        next_disk = self._next_disk
        while self._workspace is not None:
            await anyio.sleep(POLL_S)
            if time.monotonic() >= next_disk:
                started = time.monotonic()
                used = await anyio.to_thread.run_sync(workspace_bytes, self._workspace)
                next_disk = time.monotonic() + (time.monotonic() - started) / DISK_SHARE
                if self.check_disk(used, running=True):
                    await self._kill()
                    return
