"""Process groups of child servers: start-to-stop hygiene on POSIX.

A managed server runs in its own session (``start_new_session=True``), so
its pid is also its process-group id and every child it forks (vLLM's
engine core and workers, say) shares the group.  This module owns stopping
such a group: SIGTERM to all of it, a grace period, SIGKILL to whatever is
left, and telling live members from zombies.  Plus ``free_port``.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import anyio
from anyio.abc import Process

__all__ = ["free_port", "group_alive", "port_free", "signal_group", "stop_process_group"]


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(host: str, port: int) -> bool:
    """Whether a server could bind ``host:port`` now (TIME_WAIT does not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether a process group has a member that is not a zombie.

    Orphaned members are reparented to PID 1, which may not reap them
    quickly (or at all, in a container); a zombie needs no signal."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: any member, zombie or not, counts
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it exited while we looked
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


async def stop_process_group(process: Process, grace: float) -> bool:
    """SIGTERM ``process``'s group (its pid is the group id), wait up to
    ``grace`` seconds for the leader and then the other members, SIGKILL
    whatever is still alive, and reap the leader.  Returns whether SIGKILL
    was needed."""
    pgid = process.pid
    deadline = anyio.current_time() + grace
    signal_group(pgid, signal.SIGTERM)
    with anyio.move_on_after(grace):
        await process.wait()
    # Children of the leader may still be shutting down: give them what is
    # left of the grace.  Polling: nothing signals "a process group emptied".
    while anyio.current_time() < deadline and group_alive(pgid):  # noqa: ASYNC110
        await anyio.sleep(0.05)
    killed = group_alive(pgid) and signal_group(pgid, signal.SIGKILL)
    if process.returncode is None:
        await process.wait()
    return killed
