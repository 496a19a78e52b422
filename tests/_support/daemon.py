"""``agentrt serve`` as a process, for tests that drive the daemon from
outside (a documented command, a CLI against it)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Return once ``/readyz`` answers 200 on ``port``; fail the test when
    ``proc`` (stderr in ``log``) exits first, or after 60 s."""
    deadline = time.monotonic() + 60
    while not _ready(port):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the daemon was not ready in 60 s"
        time.sleep(0.05)


@contextlib.contextmanager
def serving(
    config: Path, port: int, log: Path, *, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``agentrt serve --config config`` (stderr appended to ``log``), given
    once ``/readyz`` answers 200 on ``port`` (within 60 s); on exit it is
    terminated, and killed if it has not stopped 20 s later."""
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt", "serve", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=cwd,
        )
    try:
        wait_ready(proc, port, log)
        yield proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
        proc.kill()  # nothing when it has stopped
        proc.wait()
