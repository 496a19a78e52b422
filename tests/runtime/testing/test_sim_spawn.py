"""sim-server as a process: CLI flags, the ready line, no orphans."""

from __future__ import annotations

import importlib
import subprocess
import sys

import httpx
import psutil
import pytest

from agentrt.runtime.kernel._errors import BackendUnavailable, ConfigError
from agentrt.runtime.testing.sim._sim_config import parse_args
from agentrt.runtime.testing.sim._sim_server import main
from agentrt.testing import SimServerConfig, spawn_sim_server, start_sim_server_process

pytestmark = pytest.mark.process


def test_flags_round_trip_through_the_config() -> None:
    cfg = SimServerConfig(ttft_ms=5, fault_429=0.1, retry_after=0.1, answer="answer", seed=3)
    argv = cfg.to_argv()
    assert "--fault-429" in argv
    assert "--retry-after" in argv
    assert parse_args(argv) == cfg
    assert parse_args([]) == SimServerConfig()


def test_bad_flags_name_the_flag() -> None:
    with pytest.raises(ConfigError, match="--fault-503"):
        parse_args(["--fault-503", "1.5"])
    with pytest.raises(ConfigError, match="must be <= 1"):
        parse_args(["--fault-429", "0.6", "--fault-503", "0.6"])
    assert main(["--ttft-ms", "-1"]) == 2


def test_the_cli_prints_exactly_one_ready_line() -> None:
    command = [sys.executable, "-m", "agentrt.runtime.testing.sim._sim_server", "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("agentrt sim-server listening on http://127.0.0.1:")
            url = line.split(" on ", 1)[1].strip()
            assert httpx.get(f"{url}/health", timeout=5).status_code == 200
            process.terminate()
            assert process.wait(timeout=10) == 0
            assert process.stdout.read() == ""
        finally:
            if process.poll() is None:
                process.kill()


@pytest.mark.anyio
async def test_spawned_server_serves_and_leaves_no_process_behind() -> None:
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    async with spawn_sim_server(SimServerConfig(ttft_ms=0, model="spawned")) as url:
        spawned = [p for p in me.children(recursive=True) if p.pid not in before]
        assert len(spawned) == 1
        async with httpx.AsyncClient(base_url=url) as client:
            info = (await client.get("/get_model_info")).json()
    assert info["model_path"] == "spawned"
    assert not spawned[0].is_running() or spawned[0].status() == psutil.STATUS_ZOMBIE
    assert {p.pid for p in me.children(recursive=True)} <= before


@pytest.mark.anyio
async def test_a_server_that_cannot_start_is_reported() -> None:
    with pytest.raises(BackendUnavailable, match="exited with code"):
        async with spawn_sim_server(SimServerConfig(host="256.0.0.1")):
            pass


def test_agentrt_testing_exports_the_fakes() -> None:
    module = importlib.import_module("agentrt.testing")
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert all(hasattr(module, member) for member in exported)
    testing = importlib.import_module("agentrt.testing")
    assert {"ScriptedBackend", "SimServer", "SimServerConfig", "spawn_sim_server"} <= set(
        testing.__all__
    )


def test_the_synchronous_starter_serves_and_reports_a_failed_start() -> None:
    process, url = start_sim_server_process(SimServerConfig(ttft_ms=0, model="sync"))
    try:
        info = httpx.get(f"{url}/get_model_info", timeout=5).json()
        assert info["model_path"] == "sync"
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
        assert process.stdout is not None
        process.stdout.close()
    with pytest.raises(BackendUnavailable, match="did not start"):
        start_sim_server_process(SimServerConfig(host="256.0.0.1"), stderr=subprocess.DEVNULL)
