"""Which live process owns a run's workspaces: ``claim`` (this process
uses a run directory), ``disown`` (it keeps it for debugging: never swept)
and ``sweep_abandoned`` (delete the run directories whose every owner
died without releasing them: a SIGKILLed daemon's, a crashed worker's).

An owner is a file ``<root>/.owners/<run>/<pid>-<random>`` (beside the
run directory, not in it) that its process holds an exclusive ``flock`` on
for as long as it uses the directory; the kernel drops the lock when the
process dies, however it dies.  A run directory with no owner file (kept, or made by an older
agentrt) is never swept.  Must not know what a workspace holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Final

__all__ = ["claim", "disown", "remove_if_unused", "sweep_abandoned"]

_OWNERS: Final = ".owners"
#: This process's owner file name, the same for every run directory.
_NAME: Final = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
#: Run directory -> the open, locked owner file there.
_HELD: dict[Path, int] = {}
_LOCK = threading.Lock()


def claim(run_dir: Path) -> None:
    """Mark ``run_dir`` (which exists) as used by this process, until the
    process dies or ``disown``.  Idempotent; a directory removed and made
    again is claimed again."""
    mine = _owners(run_dir) / _NAME
    with _LOCK:
        fd = _HELD.get(run_dir)
        if fd is not None and mine.exists():
            return
        if fd is not None:
            os.close(fd)
            del _HELD[run_dir]
        # locked before it is in place: a sweeper never sees it unlocked
        staging = mine.parent / f".claim-{uuid.uuid4().hex}"
        fd = _create_in(staging)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(staging, mine)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                staging.unlink()
            raise
        _HELD[run_dir] = fd


def _create_in(staging: Path) -> int:
    """Create and open ``staging``, making its directory first.  Another
    process's ``disown`` or sweep removes an owners directory the moment it
    is empty (between our ``mkdir`` and ``open``), so a vanished directory
    is made again, a few times."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
    for _ in range(4):
        staging.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            return os.open(staging, flags, 0o600)
    staging.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(staging, flags, 0o600)


def disown(run_dir: Path) -> None:
    """This process no longer owns ``run_dir`` (deleted, or kept for
    debugging: with no owner left, the sweeper leaves it)."""
    with _LOCK:
        fd = _HELD.pop(run_dir, None)
        with contextlib.suppress(OSError):
            (_owners(run_dir) / _NAME).unlink()
        with contextlib.suppress(OSError):  # other processes' owners are left
            _owners(run_dir).rmdir()
            _owners(run_dir).parent.rmdir()
        if fd is not None:
            os.close(fd)


def _owners(run_dir: Path) -> Path:
    return run_dir.parent / _OWNERS / run_dir.name


def _abandoned(run_dir: Path) -> bool:
    """Every owner of ``run_dir`` is dead (and it had one)."""
    owners = 0
    with contextlib.suppress(OSError), os.scandir(_owners(run_dir)) as entries:
        for entry in entries:
            if entry.name.startswith(".") or entry.name == _NAME:
                continue
            owners += 1
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # gone meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # its process is alive
            finally:
                os.close(fd)
    return owners > 0 and run_dir not in _HELD


def sweep_abandoned(root: Path) -> list[Path]:
    """Delete the run directories under ``root`` whose owners all died;
    the deleted ones."""
    swept: list[Path] = []
    # Under the claim lock: another thread of this process claiming a run
    # directory meanwhile would find the owners directory removed under it.
    with _LOCK, contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            run_dir = Path(entry.path)
            if _abandoned(run_dir):
                shutil.rmtree(run_dir, ignore_errors=True)
                shutil.rmtree(_owners(run_dir), ignore_errors=True)
                swept.append(run_dir)
        with contextlib.suppress(OSError):  # no owner left at all
            (root / _OWNERS).rmdir()
    return swept


def remove_if_unused(run_dir: Path) -> None:
    """Delete ``run_dir`` once no workspace is left in it (its last one
    here was released)."""
    try:
        if os.listdir(run_dir):
            return
    except OSError:
        return
    disown(run_dir)
    with contextlib.suppress(OSError):  # another process made a workspace meanwhile
        run_dir.rmdir()
