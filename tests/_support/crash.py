"""The crash tests' pieces: sim-server in a process of its own (it
outlives the daemon it serves), an ``agentrt.toml`` for a daemon on it,
and that daemon, killed with ``kill -9`` and started again."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from agentrt.testing import SimServerConfig, start_sim_server_process


def crash_seed() -> int:
    """The seed of a crash test's random kills: ``AGENTRT_CRASH_SEED`` when
    set (to replay a failure, whose message names its seed), else a new one."""
    return int(os.environ.get("AGENTRT_CRASH_SEED", str(random.randrange(1 << 30))))


@contextlib.contextmanager
def sim_process(config: SimServerConfig) -> Iterator[str]:
    """sim-server as ``config`` says, in a process: its URL; it is
    terminated on exit."""
    proc, url = start_sim_server_process(config, stderr=subprocess.DEVNULL)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def sim_daemon_toml(port: int, store: Path, sim_url: str, agents: str, top: str = "") -> str:
    """An ``agentrt.toml`` for a daemon on ``port`` (its shutdown grace 1 s)
    with its run store at ``store`` and sim-server at ``sim_url`` as the
    backend ``sim``: ``top`` (top-level keys) goes first, ``agents`` (the
    agents' and any other tables) last."""
    sim = f'{{ kind = "openai", base_url = "{sim_url}/v1", models = ["sim"] }}'
    return (
        f"{top}server = {{ port = {port}, shutdown_grace_s = 1 }}\n"
        f'store = {{ path = "{store}" }}\n'
        f"models.backends.sim = {sim}\n{agents}"
    )


Start = Callable[[Path, int, Path], "subprocess.Popen[bytes]"]
"""How a test starts ``agentrt serve`` (``config``, ``port``, ``log``),
returning once it is ready: the serve tests' ``daemon_kit.start_serve``."""


class Daemon:
    """``agentrt serve --config config`` on ``port`` (stderr appended to
    ``log``), started by ``start``: again after each ``kill9``."""

    def __init__(self, start: Start, config: Path, port: int, log: Path) -> None:
        self._start, self.config, self.port, self.log = start, config, port, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        self.proc = self._start(self.config, self.port, self.log)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """``SIGTERM``, and ``SIGKILL`` when it has not stopped 30 s later."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
