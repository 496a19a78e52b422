"""What keeps a running sandbox within its total bounds: ``SandboxWatch``
(polls the memory of the sandbox's processes together and the size of its
workspace, and says which bound was crossed) and ``workspace_bytes``.

Memory: the resident anonymous and shared memory of every process under
bubblewrap's process, summed (cheap counters); past the bound, confirmed with
their proportional set sizes (PSS), so pages shared after a ``fork`` count
once.  Disk: the
blocks the workspace's files take, hard links once, measured as often as
costs at most ``DISK_SHARE`` of a core.  Both are polled, so a
command may overshoot by what it allocates or writes within one poll; the
per-process ``RLIMIT_AS`` and ``RLIMIT_FSIZE`` bound each step.  Must not
know how the sandbox is started or killed (``agentrt.tools.sandbox._bwrap``).
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

__all__ = ["SandboxWatch", "exact_tree_memory_bytes", "tree_memory_bytes", "workspace_bytes"]

#: How often the memory of the sandbox's processes is summed.  /proc reads
#: of a few dozen processes take well under a millisecond.
MEMORY_POLL_S: Final = 0.1
#: The share of one core measuring the workspace (a walk of its files, in a
#: thread) may take: a small workspace is measured every poll, one whose walk
#: takes 10 ms every 0.5 s.
DISK_SHARE: Final = 0.02
_MIB: Final = 1024 * 1024


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError, ValueError),
                open(f"/proc/{pid}/task/{task}/children") as listing,
            ):
                found += map(int, listing.read().split())
    return found


def _resident(pid: int) -> int:
    """``pid``'s anonymous and shared resident memory, in bytes: counters
    the kernel keeps, cheap to read (a page shared after a fork counts in
    every process that maps it)."""
    total = 0
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/status") as info:
        for line in info:
            if line.startswith(("RssAnon:", "RssShmem:")):
                total += int(line.split()[1]) * 1024
    return total


def _proportional(pid: int) -> int:
    """``pid``'s PSS in bytes: shared pages divided among their users.
    Exact, but the kernel walks the page tables for it (about 90 ms for a
    process holding 1 GiB on a loaded machine)."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid}/smaps_rollup") as info,
    ):
        for line in info:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return _resident(pid)


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it.  Orphans of a PID namespace are
    re-parented to its PID 1, which is under bubblewrap's process, so a
    double fork does not hide a process."""
    seen: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.append(current)
            pending += _children(current)
    return seen


def tree_memory_bytes(pid: int) -> int:
    """The memory of ``pid`` and every process under it, in bytes: their
    resident anonymous and shared memory summed; when that is more than a
    bound, ``exact_tree_memory_bytes`` says whether it really is."""
    return sum(map(_resident, _tree(pid)))


def exact_tree_memory_bytes(pid: int) -> int:
    """Like ``tree_memory_bytes``, with pages shared after a fork counted
    once (PSS): slower, for confirming a crossing."""
    return sum(map(_proportional, _tree(pid)))


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
    """Watches one running sandbox; ``run`` returns (after calling
    ``kill``) when a bound is crossed, and ``over`` then says which, in a
    sentence for the model.

    ``memory_mb``: the processes' memory together (``None``: not watched;
    a cgroup keeps it).  ``workspace``/``workspace_mb``: the directory and
    its quota; a workspace that was already over it when the command
    started may not grow (so ``rm`` still runs in it)."""

    __slots__ = (
        "_disk_limit",
        "_kill",
        "_memory_limit",
        "_next_disk",
        "_workspace",
        "over",
        "peak_bytes",
    )

    def __init__(
        self,
        *,
        memory_mb: int | None,
        workspace: Path | None,
        workspace_mb: int | None,
        kill: Callable[[], Awaitable[None]],
    ) -> None:
        self._memory_limit = None if memory_mb is None else memory_mb * _MIB
        self._workspace = workspace if workspace_mb is not None else None
        self._disk_limit = 0 if workspace_mb is None else workspace_mb * _MIB
        self._kill = kill
        self._next_disk = 0.0
        self.over = ""
        self.peak_bytes = 0

    @property
    def active(self) -> bool:
        return self._memory_limit is not None or self._workspace is not None

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

    async def run(self, pid: int) -> None:
        """Poll until a bound is crossed (then kill and return) or cancelled."""
        next_disk = self._next_disk
        while True:
            await anyio.sleep(MEMORY_POLL_S)
            limit = self._memory_limit
            if limit is not None:
                used = tree_memory_bytes(pid)
                if used > limit:  # confirm: pages a fork shares count once
                    used = await anyio.to_thread.run_sync(exact_tree_memory_bytes, pid)
                self.peak_bytes = max(self.peak_bytes, used)
                if used > limit:
                    self.over = (
                        f"Killed: the command's processes together used {used / _MIB:.0f} MiB, "
                        f"more than the sandbox's {limit / _MIB:.0f} MiB; every process of the "
                        "command was killed. Use less memory at once (fewer parallel "
                        "processes, smaller inputs)."
                    )
                    await self._kill()
                    return
            if self._workspace is not None and time.monotonic() >= next_disk:
                started = time.monotonic()
                used = await anyio.to_thread.run_sync(workspace_bytes, self._workspace)
                next_disk = time.monotonic() + (time.monotonic() - started) / DISK_SHARE
                if self.check_disk(used, running=True):
                    await self._kill()
                    return
