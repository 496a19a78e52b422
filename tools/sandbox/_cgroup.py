"""A cgroup v2 per sandbox, where this process may make one: ``SandboxCgroups``
(finds a delegated parent once, makes and removes one child per command)
and ``memory_bound_in_force``.

A child cgroup is usable when the unified hierarchy is mounted and this
process's cgroup, or its parent, has the ``memory`` controller enabled for
its children and is writable by this process (a delegated subtree, e.g. a
systemd unit with ``Delegate=yes`` whose processes live in a leaf).  Must
not know how the sandbox is started (``agentrt.tools.sandbox._bwrap``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Final, final

__all__ = ["SandboxCgroups", "memory_bound_in_force"]

_ROOT: Final = Path("/sys/fs/cgroup")
_SELF: Final = Path("/proc/self/cgroup")


def _delegated_parent(root: Path, own: Path) -> Path | None:
    if not (root / "cgroup.controllers").is_file():
        return None  # cgroup v1, or v2 not mounted at its usual place
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    if relative is None:
        return None
    here = root / relative.lstrip("/")
    for candidate in (here, here.parent):
        try:
            enabled = (candidate / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if "memory" in enabled and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None


@final
class SandboxCgroups:
    """Makes one memory-bounded cgroup v2 per sandboxed command under a
    delegated parent, when there is one (``available``)."""

    __slots__ = ("parent",)

    def __init__(self, root: Path = _ROOT, own: Path = _SELF) -> None:
        self.parent = _delegated_parent(root, own)

    @property
    def available(self) -> bool:
        return self.parent is not None

    def make(self, memory_mb: int, max_processes: int) -> Path:
        """A fresh child cgroup holding at most ``memory_mb`` (no swap) and
        ``max_processes`` tasks; ``OSError`` if it cannot be made."""
        assert self.parent is not None
        path = self.parent / f"agentrt-sandbox-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        try:
            (path / "memory.max").write_text(f"{memory_mb * 1024 * 1024}\n")
            with contextlib.suppress(FileNotFoundError):  # no swap accounting
                (path / "memory.swap.max").write_text("0\n")
            with contextlib.suppress(FileNotFoundError):  # pids not delegated
                (path / "pids.max").write_text(f"{max_processes}\n")
        except OSError:
            self.remove(path)
            raise
        return path

    @staticmethod
    def oom_killed(path: Path) -> bool:
        """Did the kernel kill a process of ``path`` for its memory bound?"""
        with contextlib.suppress(OSError, ValueError):
            for line in (path / "memory.events").read_text().splitlines():
                key, _, count = line.partition(" ")
                if key == "oom_kill":
                    return int(count) > 0
        return False

    @staticmethod
    def remove(path: Path) -> None:
        """Kill what is left in ``path`` and remove it."""
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1\n")
        with contextlib.suppress(OSError):
            path.rmdir()


def memory_bound_in_force(
    cgroups: SandboxCgroups, *, process_mb: int, processes: int, filtered: bool
) -> str:
    """Which total memory bound sandboxes get here, in a sentence."""
    product = (
        f"{processes} processes x {process_mb} MiB of address space "
        f"(RLIMIT_NPROC per sandbox x RLIMIT_AS) = {processes * process_mb} MiB"
    )
    if not filtered:
        product += " (SysV shared memory and memory files not refused on this machine)"
    if cgroups.parent is not None:
        return f"{product}, and a cgroup v2 per sandbox under {cgroups.parent} (memory.max)"
    return f"{product}; no delegated cgroup v2 with the memory controller here"
