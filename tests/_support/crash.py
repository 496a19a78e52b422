"""The crash tests' pieces: an ``agentrt.toml`` for a daemon on sim-server
in a process of its own (``sim_process.sim_server_process``: it outlives
the daemon), and that daemon, killed with ``kill -9`` and started again."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path


def crash_seed() -> int:
    """The seed of a crash test's random kills: ``AGENTRT_CRASH_SEED`` when
    set (to replay a failure, whose message names its seed), else a new one."""
    return int(os.environ.get("AGENTRT_CRASH_SEED", str(random.randrange(1 << 30))))


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
