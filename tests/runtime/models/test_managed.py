"""Managed model servers against a tiny fake server process.

The fake server is a stdlib ``http.server`` script written to a temp dir:
it answers ``/health`` (optionally with an error status), can start slowly,
crash after a while, fall sick, ignore SIGTERM, or spawn a grandchild, and
appends ``pid time`` to a file on every start so tests can count restarts
(and its pid to ``<that file>.listening`` once it listens, to
``<that file>.term`` for each SIGTERM it ignored).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest
from pydantic import ValidationError

from agentrt.runtime.models.managed._managed_server import (
    ManagedServer,
    ManagedServerConfig,
    ManagedServerError,
    ServerState,
)
from agentrt.runtime.models.managed._process_group import group_alive
from tests._support.polling import eventually, gone

pytestmark = [pytest.mark.anyio, pytest.mark.process]

FAKE_SERVER = r"""
import argparse, http.server, os, subprocess, sys, threading, time

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--starts", required=True)
p.add_argument("--delay", type=float, default=0.0)
p.add_argument("--health-code", type=int, default=200)
p.add_argument("--crash-after", type=float, default=0.0)
p.add_argument("--crash-starts", type=int, default=10**9)
p.add_argument("--sick-after", type=float, default=0.0)
p.add_argument("--ignore-term", action="store_true")
p.add_argument("--child", action="store_true")
a = p.parse_args()

with open(a.starts, "a") as f:
    f.write(f"{os.getpid()} {time.time()}\n")
with open(a.starts) as f:
    start_no = sum(1 for _ in f)
print(f"fake server starting (start {start_no})", file=sys.stderr, flush=True)
if a.ignore_term:
    import signal
    def ignored(signum, frame):
        with open(a.starts + ".term", "a") as f:
            f.write(f"{os.getpid()}\n")
    signal.signal(signal.SIGTERM, ignored)
if a.child:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"child pid {child.pid}", flush=True)
time.sleep(a.delay)
began = time.time()

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sick = a.sick_after and time.time() - began > a.sick_after
        code = 503 if sick else (a.health_code if self.path == "/health" else 404)
        self.send_response(code)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), H)
with open(a.starts + ".listening", "a") as f:
    f.write(f"{os.getpid()}\n")
if a.crash_after and start_no <= a.crash_starts:
    def crash():
        print("fake server crashing", flush=True)
        os._exit(3)
    threading.Timer(a.crash_after, crash).start()
print(f"listening on {a.port}", flush=True)
server.serve_forever()
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return script, tmp_path / "starts.txt"


def config(script: Path, starts: Path, *args: str, **overrides: Any) -> ManagedServerConfig:
    values: dict[str, Any] = {
        "name": "fake",
        "kind": "command",
        "command": (sys.executable, str(script), "--port", "{port}", "--starts", str(starts)),
        "extra_args": args,
        "startup_timeout_s": 15.0,
        "health_interval_s": 0.05,
        "liveness_interval_s": 0.0,
        "backoff_initial_s": 0.1,
        "stop_grace_s": 3.0,
        "log_output": "off",
    }
    values.update(overrides)
    return ManagedServerConfig(**values)


def pids_in(starts: Path, suffix: str) -> list[int]:
    """The pids the fake servers wrote to ``<starts><suffix>``."""
    path = Path(f"{starts}{suffix}")
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def starts_of(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(int(pid), float(at)) for pid, at in rows]


async def get_health(url: str) -> int:
    async with httpx.AsyncClient(timeout=5.0) as client:
        return (await client.get(url)).status_code


async def test_start_waits_for_health_and_stop_leaves_no_process(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    server = ManagedServer(config(script, starts, "--delay", "0.5"))
    async with server:
        # Not reported before the server listened: it had bound its port.
        assert pids_in(starts, ".listening") == [server.pid]
        assert server.state is ServerState.HEALTHY
        assert await get_health(server.health_url) == 200
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        pid = server.pid
        assert pid is not None
        assert [p for p, _ in starts_of(starts)] == [pid]
        await eventually(lambda: any("listening on" in x for x in server.recent_output), 5)
        assert any("fake server starting" in line for line in server.recent_output)
    assert server.state is ServerState.STOPPED
    assert gone(pid)
    assert server.last_exit_code == -signal.SIGTERM


async def test_run_as_a_service_reports_the_base_url(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    server = ManagedServer(config(script, starts))
    async with anyio.create_task_group() as tg:
        url = await tg.start(server.run)
        assert url == server.base_url
        assert await get_health(url + "/health") == 200
        pid = server.pid
        assert pid is not None
        tg.cancel_scope.cancel()
    assert server.state is ServerState.STOPPED
    assert gone(pid)


async def test_crash_restarts_with_exponential_backoff(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    cfg = config(
        script,
        starts,
        "--crash-after",
        "0.3",
        "--crash-starts",
        "2",
        backoff_initial_s=0.4,
        backoff_multiplier=2.0,
    )
    async with ManagedServer(cfg) as server:
        await eventually(lambda: server.restarts >= 2 and server.state is ServerState.HEALTHY, 20)
        # The third start does not crash: it stays up.
        await anyio.sleep(0.5)
        assert server.state is ServerState.HEALTHY
        assert server.restarts == 2
        assert server.last_exit_code == 3
        assert await get_health(server.health_url) == 200
        rows = starts_of(starts)
        assert len(rows) == 3
        assert len({pid for pid, _ in rows}) == 3
        (_, t1), (_, t2), (_, t3) = rows
        # crash after 0.3 s of health, then 0.4 s and 0.8 s of backoff
        assert t2 - t1 >= 0.3 + 0.4
        assert t3 - t2 >= 0.3 + 0.8
        assert any("fake server crashing" in line for line in server.recent_output)
        last_pid = server.pid
    assert last_pid is not None
    assert all(gone(pid) for pid, _ in rows)


async def test_crash_loop_gives_up_after_max_restarts(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    cfg = config(script, starts, "--crash-after", "0.2", max_restarts=1, backoff_initial_s=0.05)
    server = ManagedServer(cfg)
    with pytest.raises(ManagedServerError) as caught:
        async with server:
            await anyio.sleep(30)  # cancelled when the server gives up
    message = str(caught.value)
    assert "2 crashes in a row, limit 1 restarts" in message
    assert "exited with code 3" in message
    assert "fake server crashing" in message
    assert caught.value.exit_code == 3
    assert server.state is ServerState.FAILED
    assert len(starts_of(starts)) == 2
    assert all(gone(pid) for pid, _ in starts_of(starts))


async def test_startup_timeout_names_url_and_quotes_output(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    cfg = config(script, starts, "--health-code", "503", startup_timeout_s=1.0)
    server = ManagedServer(cfg)
    # A hang guard; the message says the deadline passed ("within 1 s").
    with anyio.fail_after(30), pytest.raises(ManagedServerError) as caught:
        async with server:
            pytest.fail("the server never became healthy")
    message = str(caught.value)
    assert "not healthy" in message
    assert server.health_url in message
    assert "within 1 s" in message
    assert "fake server starting (start 1)" in message
    assert "listening on" in message
    assert caught.value.recent_output[-1].startswith("listening on")
    assert server.state is ServerState.FAILED
    [(pid, _)] = starts_of(starts)
    assert gone(pid)


async def test_early_exit_reports_code_and_output(tmp_path: Path) -> None:
    cfg = ManagedServerConfig(
        name="broken",
        kind="command",
        command=(
            sys.executable,
            "-c",
            "import sys; print('boom: bad flag', file=sys.stderr); sys.exit(7)",
        ),
        health_interval_s=0.05,
        log_output="off",
    )
    with pytest.raises(ManagedServerError) as caught:
        async with ManagedServer(cfg):
            pytest.fail("the server exited")
    assert caught.value.exit_code == 7
    assert "exited with code 7 before becoming healthy" in str(caught.value)
    assert "boom: bad flag" in str(caught.value)
    assert "managed:broken" in str(caught.value)


async def test_missing_executable_is_a_clear_error(tmp_path: Path) -> None:
    cfg = ManagedServerConfig(
        name="ghost", kind="vllm", model="m", venv=tmp_path / "no-venv", log_output="off"
    )
    with pytest.raises(ManagedServerError, match=r"cannot start .*no-venv/bin/vllm"):
        async with ManagedServer(cfg):
            pytest.fail("nothing to start")


async def test_stop_kills_grandchildren_and_escalates_to_sigkill(
    fake: tuple[Path, Path],
) -> None:
    script, starts = fake
    cfg = config(script, starts, "--child", "--ignore-term", stop_grace_s=0.5)
    server = ManagedServer(cfg)
    with anyio.fail_after(30):  # a hang guard
        async with server:
            await eventually(
                lambda: any(x.startswith("child pid") for x in server.recent_output), 5
            )
            child = int(
                next(x for x in server.recent_output if x.startswith("child pid")).split()[-1]
            )
            leader = server.pid
            assert leader is not None
            assert psutil.Process(child).ppid() == leader
            assert os.getpgid(child) == leader
            began = time.monotonic()
    # SIGTERM first (ignored), the grace waited (a lower bound: load only
    # adds to it), then SIGKILL.
    assert pids_in(starts, ".term") == [leader]
    assert time.monotonic() - began >= 0.5
    assert server.last_exit_code == -signal.SIGKILL
    assert gone(leader)
    await eventually(lambda: gone(child), 5)  # the orphan is reaped by PID 1


async def test_liveness_probe_restarts_a_sick_server(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    cfg = config(
        script,
        starts,
        "--sick-after",
        "0.3",
        liveness_interval_s=0.1,
        liveness_failures=2,
        backoff_initial_s=0.05,
        max_restarts=10,
    )
    async with ManagedServer(cfg) as server:
        await eventually(lambda: server.restarts >= 1, 15)
        first_pid = starts_of(starts)[0][0]
        assert gone(first_pid)


def test_config_rejects_incomplete_kinds() -> None:
    with pytest.raises(ValidationError, match="kind='vllm' needs `model`"):
        ManagedServerConfig(name="v", kind="vllm")
    with pytest.raises(ValidationError, match="kind='command' needs `command`"):
        ManagedServerConfig(name="c", kind="command")
    with pytest.raises(ValidationError, match="health_path must start"):
        ManagedServerConfig(name="s", kind="sglang", model="m", health_path="health")


def test_command_lines_per_kind(tmp_path: Path) -> None:
    vllm = ManagedServer(
        ManagedServerConfig(
            name="v",
            kind="vllm",
            model="/models/smol",
            served_model_name="smol",
            port=8100,
            venv=tmp_path,
            extra_args=("--max-model-len", "2048"),
        )
    )
    assert vllm.command_line() == [
        str(tmp_path / "bin" / "vllm"),
        "serve",
        "/models/smol",
        "--host",
        "127.0.0.1",
        "--port",
        "8100",
        "--served-model-name",
        "smol",
        "--max-model-len",
        "2048",
    ]
    sglang = ManagedServer(ManagedServerConfig(name="s", kind="sglang", model="m", port=30000))
    assert sglang.command_line()[:5] == [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
    ]
    assert sglang.health_url == "http://127.0.0.1:30000/health"
    free = ManagedServer(
        ManagedServerConfig(name="f", kind="command", command=("x", "--port={port}"))
    )
    assert free.command_line() == ["x", f"--port={free.port}"]
    assert 0 < free.port < 65536


async def test_a_port_already_in_use_is_refused(fake: tuple[Path, Path]) -> None:
    script, starts = fake
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ManagedServer(config(script, starts, port=port))
        with pytest.raises(ManagedServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            async with server:
                pytest.fail("another server holds the port")
    assert starts_of(starts) == []  # nothing was started


OWNER = r"""
import json, sys, anyio
from agentrt.runtime.models.managed._managed_server import ManagedServer, ManagedServerConfig

async def main() -> None:
    script, starts = sys.argv[1], sys.argv[2]
    config = ManagedServerConfig(
        name="fake", kind="command", log_output="off", stop_grace_s=0.5, health_interval_s=0.05,
        command=(sys.executable, script, "--port", "{port}", "--starts", starts,
                 "--child", "--ignore-term"),
    )
    async with ManagedServer(config) as server:
        while not any(x.startswith("child pid") for x in server.recent_output):
            await anyio.sleep(0.02)
        child = next(x for x in server.recent_output if x.startswith("child pid")).split()[-1]
        print(json.dumps([server.pid, int(child)]), flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux guarantee")
def test_a_sigkilled_owner_leaves_no_server_process(
    fake: tuple[Path, Path], tmp_path: Path
) -> None:
    # The server ignores SIGTERM and forked a child: only SIGTERM to its
    # whole group and then SIGKILL clear it, with nobody left to send them.
    script, starts = fake
    owner_script = tmp_path / "owner.py"
    owner_script.write_text(OWNER)
    owner = subprocess.Popen(
        [sys.executable, str(owner_script), str(script), str(starts)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        leader, child = json.loads(owner.stdout.readline())
        assert os.getpgid(child) == leader
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        deadline = time.monotonic() + 60  # a hang guard, not a measurement
        while group_alive(leader) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group_alive(leader), [
            p.info for p in psutil.process_iter(["pid", "cmdline"]) if _in_group(p.pid, leader)
        ]
        assert gone(leader)
        assert gone(child)
        # SIGTERM first (the kernel's and the watchdog's), then SIGKILL.
        assert set(pids_in(starts, ".term")) == {leader}
    finally:
        owner.kill()
        owner.wait(30)
        if owner.stdout is not None:
            owner.stdout.close()


def _in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False
