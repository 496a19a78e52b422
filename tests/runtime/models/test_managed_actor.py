"""Managed servers under the actor kernel: spawn, restart, supervision, stop."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import psutil
import pytest

from agentrt.runtime.actors import ActorSystem, RestartIntensity
from agentrt.runtime.models.managed import ManagedServerConfig, ManagedServerError, ServerState
from agentrt.runtime.models.managed_actor import ManagedServerHandle, spawn_managed_server

pytestmark = pytest.mark.anyio

# argv: port, seconds until it crashes (0: never), exit code of the crash.
FAKE = """
import http.server, os, sys, threading
port, crash_after, code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
if crash_after > 0:
    threading.Timer(crash_after, lambda: os._exit(code)).start()
print("ready", flush=True)
server.serve_forever()
"""


def fake_config(crash_after: float = 0.0, code: int = 3, **overrides: Any) -> ManagedServerConfig:
    values: dict[str, Any] = {
        "name": "fake",
        "kind": "command",
        "command": (sys.executable, "-c", FAKE, "{port}", str(crash_after), str(code)),
        "startup_timeout_s": 15.0,
        "health_interval_s": 0.05,
        "liveness_interval_s": 0.0,
        "backoff_initial_s": 0.05,
        "backoff_max_s": 0.2,
        "stop_grace_s": 2.0,
        "log_output": "off",
    }
    values.update(overrides)
    return ManagedServerConfig(**values)


def state_of(handle: ManagedServerHandle) -> ServerState:
    """The state now (a call, so that type narrowing does not stick)."""
    return handle.server.state


def gone(pid: int) -> bool:
    try:
        return str(psutil.Process(pid).status()) == str(psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def eventually(predicate: Callable[[], bool], within: float) -> None:
    with anyio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - polling external process state
            await anyio.sleep(0.02)


async def test_spawn_returns_when_healthy_and_stop_ends_the_process() -> None:
    async with ActorSystem(stop_timeout=3.0) as system:
        handle = await spawn_managed_server(system, fake_config(), name="fake")
        assert state_of(handle) is ServerState.HEALTHY
        async with httpx.AsyncClient(timeout=5.0) as client:
            assert (await client.get(handle.base_url + "/health")).status_code == 200
        pid = handle.server.pid
        assert pid is not None
        assert handle.ref.address.name == "fake"
        began = anyio.current_time()
        await handle.stop()
        # The server was asked to stop first, so the actor did not sit out the
        # system's 3 s stop timeout before being cancelled.
        assert anyio.current_time() - began < 2.0
        assert gone(pid)
        assert state_of(handle) is ServerState.STOPPED
        assert system.root.children == ()


async def test_closing_the_system_stops_the_server() -> None:
    async with ActorSystem(stop_timeout=1.0) as system:
        handle = await spawn_managed_server(system, fake_config(), name="fake")
        pid = handle.server.pid
        assert pid is not None
    assert gone(pid)
    assert handle.server.state is ServerState.STOPPED


async def test_process_crash_is_restarted_inside_the_actor() -> None:
    async with ActorSystem(stop_timeout=1.0) as system:
        handle = await spawn_managed_server(
            system, fake_config(crash_after=0.3, max_restarts=100), name="fake"
        )
        first = handle.server.pid
        await eventually(lambda: handle.server.restarts >= 2, 15)
        await handle.server.wait_healthy()
        assert handle.server.last_exit_code == 3
        assert first is not None
        assert gone(first)
        # The service handled the crashes: the actor itself never failed.
        assert system.root.failures == ()
        await handle.stop()


async def test_giving_up_fails_the_actor_and_the_supervisor_restarts_it() -> None:
    config = fake_config(crash_after=0.2, max_restarts=0, backoff_max_s=0.1)
    async with ActorSystem(
        stop_timeout=1.0, intensity=RestartIntensity(max_restarts=10, within=60.0)
    ) as system:
        handle = await spawn_managed_server(system, config, name="fake")
        await eventually(lambda: len(system.root.failures) >= 2, 20)
        failure = system.root.failures[0]
        assert failure.action == "restart"
        assert isinstance(failure.error, ManagedServerError)
        assert "giving up (restarts are off)" not in str(failure.error)
        assert "1 crashes in a row, limit 0 restarts" in str(failure.error)
        # The restarted actor brought the server back.
        await eventually(lambda: handle.server.state is ServerState.HEALTHY, 10)
        await handle.stop()


async def test_failed_first_start_raises_from_spawn_and_leaves_nothing() -> None:
    config = fake_config(
        command=(
            sys.executable,
            "-c",
            "import sys; print('no model here', flush=True); sys.exit(2)",
        )
    )
    async with ActorSystem(stop_timeout=0.5) as system:
        with pytest.raises(ManagedServerError, match="exited with code 2") as caught:
            await spawn_managed_server(system, config, name="broken")
        assert "no model here" in str(caught.value)
        assert system.root.children == ()
