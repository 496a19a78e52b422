"""Managed servers under the actor kernel: spawn, requests, restart, supervision, stop."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from agentrt.runtime.kernel._backoff import Backoff
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.models.managed._managed_actor import (
    ManagedServerHandle,
    ManagedServerStatus,
    Status,
    Stop,
    spawn_managed_server,
)
from agentrt.runtime.models.managed._managed_server import (
    ManagedServerConfig,
    ManagedServerError,
    ServerState,
)
from tests._support.polling import eventually, gone

pytestmark = [pytest.mark.anyio, pytest.mark.process]

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


async def status_until(
    handle: ManagedServerHandle, predicate: Callable[[ManagedServerStatus], bool], within: float
) -> ManagedServerStatus:
    """Ask for the status until ``predicate`` holds (each ask answered at once)."""
    with anyio.fail_after(within):
        while True:
            status = await handle.status(timeout=1.0)
            if predicate(status):
                return status
            await anyio.sleep(0.02)


async def test_spawn_returns_when_healthy_and_answers_status_and_stop() -> None:
    # The system's stop timeout is out of the hang guard's reach: the actor
    # and its server are gone within it only if they stopped together.
    async with ActorSystem(stop_timeout=60.0) as system:
        handle = await spawn_managed_server(system, fake_config(), name="fake")
        status = await handle.status(timeout=1.0)
        assert status.state is ServerState.HEALTHY
        assert status.name == "fake"
        assert status.base_url == handle.base_url
        assert status.pid is not None
        assert status.pid == handle.server.pid
        assert (status.restarts, status.actor_restarts, status.last_exit_code) == (0, 0, None)
        async with httpx.AsyncClient(timeout=5.0) as client:
            assert (await client.get(handle.base_url + "/health")).status_code == 200
        assert handle.ref.address.name == "fake"
        stopping = await handle.ref.ask(Stop(), timeout=1.0)
        assert stopping.state is ServerState.STOPPING
        await eventually(lambda: system.root.children == () and gone(status.pid or 0), 30)
        assert handle.server.state is ServerState.STOPPED
        assert system.root.failures == ()


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
        # The actor answers while its service restarts the server.
        status = await status_until(handle, lambda s: s.restarts >= 2, 15)
        assert status.last_exit_code == 3
        assert status.actor_restarts == 0
        assert first is not None
        assert gone(first)
        # The service handled the crashes: the actor itself never failed.
        assert system.root.failures == ()
        await handle.stop()


async def test_restart_request_replaces_the_process() -> None:
    async with ActorSystem(stop_timeout=3.0) as system:
        handle = await spawn_managed_server(system, fake_config(), name="fake")
        old = handle.server.pid
        assert old is not None
        await handle.restart()
        with anyio.fail_after(15):
            await handle.server.wait_healthy()  # waits for the fresh process
        status = await handle.ref.ask(Status(), timeout=1.0)
        assert status.state is ServerState.HEALTHY
        assert status.pid is not None
        assert status.pid != old
        assert gone(old)
        assert status.restarts == 0  # on request, not a crash
        assert system.root.failures == ()
        await handle.stop()


async def test_restart_request_cuts_the_server_backoff_short() -> None:
    # An hour's backoff: healthy again within the hang guard only if cut short.
    config = fake_config(
        crash_after=0.3, max_restarts=5, backoff_initial_s=3600, backoff_max_s=3600
    )
    async with ActorSystem(stop_timeout=3.0) as system:
        handle = await spawn_managed_server(system, config, name="fake")
        await status_until(handle, lambda s: s.state is ServerState.BACKOFF, 10)
        await handle.restart()
        status = await status_until(handle, lambda s: s.state is ServerState.HEALTHY, 60)
        assert status.restarts == 1  # the crash before it counts, the request does not
        assert system.root.failures == ()
        await handle.stop()


async def test_after_giving_up_the_server_stays_failed_until_restarted() -> None:
    # Each server crashes 0.3 s after starting, and one crash is one too many.
    config = fake_config(crash_after=0.3, max_restarts=0)
    async with ActorSystem(stop_timeout=60.0) as system:
        handle = await spawn_managed_server(system, config, name="fake")
        status = await status_until(handle, lambda s: s.state is ServerState.FAILED, 10)
        assert status.pid is None
        assert status.error is not None
        assert "giving up (restarts are off)" in status.error
        assert status.last_exit_code == 3
        # The server gave up, the actor did not: it answers, and it never crashed.
        assert status.actor_restarts == 0
        assert system.root.failures == ()
        # Restart() starts it again: healthy, then failed again.
        await handle.restart()
        healthy = await status_until(handle, lambda s: s.state is ServerState.HEALTHY, 10)
        assert healthy.error is None
        assert healthy.pid is not None
        await status_until(handle, lambda s: s.state is ServerState.FAILED, 10)
        # Nothing to wait for: not the system's 60 s stop timeout (the stop is
        # shielded: the hang guard fires at the checkpoint after it).
        with anyio.fail_after(30):
            await handle.stop()
            await anyio.lowlevel.checkpoint()
        assert system.root.children == ()
        assert gone(healthy.pid)


async def test_the_restart_policy_comes_from_the_config() -> None:
    config = fake_config(
        backoff_initial_s=0.5, backoff_multiplier=3.0, backoff_max_s=4.0, backoff_reset_s=7.0
    )
    assert config.backoff() == Backoff(
        initial_s=0.5, max_s=4.0, multiplier=3.0, reset_after_s=7.0, max_restarts=5
    )
    assert fake_config(restart=False, max_restarts=9).backoff().max_restarts == 0


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
