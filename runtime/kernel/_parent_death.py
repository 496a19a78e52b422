"""Child processes that die with the process that started them.

``die_with`` asks the kernel to signal this process when its parent dies
(Linux ``prctl(PR_SET_PDEATHSIG)``) and says whether the parent is still
there (it may have died before the request took effect).  The local
placement's worker processes call it first thing.

``guarded_argv`` wraps a server's argv in this file run as a script (the
launcher, standard library only, so it starts in a few milliseconds and
imports nothing of agentrt): the launcher asks for SIGTERM on its parent's
death, forks a watchdog, and then execs the server, which keeps the
launcher's pid (so the server is still its own process-group leader and
the caller's child).  The watchdog waits for the parent's death on a pidfd;
then it SIGTERMs the server's whole process group, waits the grace period
while any member is alive, and SIGKILLs what is left (the kernel's death
signal reaches only the server itself, not the processes it forked).  The
watchdog dies with the server (its own death signal), holds none of the
server's standard streams, and does nothing else.

The kernel's signal comes when the *thread* that started the process
ends (the watchdog's pidfd follows the whole process): start guarded
processes from a thread that lives as long as they should (an event
loop's thread, the main thread), not from a pooled worker thread.

Off Linux (no ``prctl``, no pidfd) ``guarded_argv`` returns the argv
unchanged and ``die_with`` only checks the parent: there a SIGKILLed
parent leaves its servers running.

Must not import anything of agentrt (it runs as a bare script).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import time
from typing import Final

__all__ = ["die_with", "guarded_argv", "supported"]

_PR_SET_PDEATHSIG: Final = 1
#: How often the watchdog looks whether the group emptied during the grace.
_POLL_S: Final = 0.05


def supported() -> bool:
    """Whether the kernel can signal a child when its parent dies."""
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open")


def die_with(parent: int, sig: signal.Signals) -> bool:
    """Have the kernel send ``sig`` to this process when ``parent`` (its
    parent) dies (Linux); whether ``parent`` is still its parent after the
    request took effect (``False``: it died first, nobody will signal)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return os.getppid() == parent


def guarded_argv(argv: list[str], grace_s: float) -> list[str]:
    """``argv`` started through the launcher: when this process dies, the
    server's process group gets SIGTERM, and SIGKILL after ``grace_s``.
    Start it in a session of its own (``start_new_session=True``).
    Unchanged off Linux."""
    if not supported():
        return list(argv)
    # -I: no PYTHON* variables or user site (the server's env may set them);
    # -S: no site import (the launcher needs the standard library only).
    return [sys.executable, "-I", "-S", __file__, str(os.getpid()), str(grace_s), "--", *argv]


def _watch(parent_fd: int, server: int, grace_s: float) -> None:
    """The watchdog's body: end the server's group after ``parent_fd``'s
    process died; die with the server."""
    if not die_with(server, signal.SIGKILL):
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the server's output pipes reach EOF when it exits
        os.dup2(devnull, fd)
    select.select([parent_fd], [], [])  # readable once the parent exited
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it is in the group it stops
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_has_others(server):
            time.sleep(_POLL_S)
        os.killpg(server, signal.SIGKILL)  # this watchdog too


def _group_has_others(pgid: int) -> bool:
    """Whether a live process other than this one is in group ``pgid``."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                text = stat.read()
        except OSError:
            continue  # it exited while we looked
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _launch(args: list[str]) -> None:
    """The launcher: ``PARENT GRACE -- ARGV...``."""
    parent, grace_s, argv = int(args[0]), float(args[1]), args[3:]
    try:
        parent_fd: int | None = os.pidfd_open(parent)
    except OSError:  # a kernel before 5.3: the server's own death signal only
        parent_fd = None
    if not die_with(parent, signal.SIGTERM):  # the parent died before we asked
        os._exit(1)
    server = os.getpid()
    if parent_fd is not None:
        if os.fork() == 0:
            try:
                _watch(parent_fd, server, grace_s)
            finally:
                os._exit(0)
        os.close(parent_fd)
    try:
        os.execvp(argv[0], argv)  # noqa: S606 (the server's argv, as given)
    except OSError as exc:
        print(f"cannot start {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)


if __name__ == "__main__":
    _launch(sys.argv[1:])
