"""Fixtures for the MCP client tests: the in-repo fixture server, real npm
servers started with ``npx -y`` (pinned versions), and a check that no test
leaves a server process behind."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentrt.tools.mcp._mcp_config import StdioServerConfig
from tests._support.needs import program

#: npm packages the tests start, pinned so CI is reproducible (``npm view``).
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
FILESYSTEM = "@modelcontextprotocol/server-filesystem@2026.8.31"
MEMORY = "@modelcontextprotocol/server-memory@2026.8.31"

FIXTURE_SERVER = Path(__file__).with_name("fixture_server.py")


def _fixture_server(name: str = "fx", *args: str, **options: object) -> StdioServerConfig:
    return StdioServerConfig.model_validate(
        {
            "name": name,
            "command": sys.executable,
            "args": ["-W", "ignore", str(FIXTURE_SERVER), *args],
            **options,
        }
    )


@pytest.fixture
def fixture_server() -> Callable[..., StdioServerConfig]:
    """A factory: ``fixture_server(name, *args, **config)`` is a stdio config
    running ``fixture_server.py`` with this interpreter."""
    return _fixture_server


@pytest.fixture(scope="session")
def npx() -> str:
    """The ``npx`` executable, with the pinned packages in the npm cache.

    Without npx the tests skip, unless ``AGENTRT_REQUIRE_NPX=1`` (CI sets
    it): then they fail, so a missing install step cannot hide behind a skip."""
    found = program("npx", "AGENTRT_REQUIRE_NPX", "needs Node.js and npx on PATH")
    # Downloads on first use (all at once); each server exits at once on --help.
    warming = [
        subprocess.Popen(
            [found, "-y", package, "--help"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for package in (EVERYTHING, FILESYSTEM, MEMORY)
    ]
    for process in warming:
        try:
            process.wait(timeout=100)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return found


#: The MCP conformance suite the client scenarios run (0.1.14+ needs Node 22).
CONFORMANCE_VERSION = "0.1.13"
CONFORMANCE = f"@modelcontextprotocol/conformance@{CONFORMANCE_VERSION}"


@pytest.fixture(scope="session")
def conformance_bin(npx: str) -> str:
    """The suite's ``conformance`` command, installed once where
    ``.ci/mcp-conformance.sh`` installs it (``$AGENTRT_CACHE/npm``): run with
    plain node, each scenario run skips ``npx``'s own npm start (about a
    second of CPU, twice per scenario).  A lock makes a second xdist worker
    wait for the first's install."""
    cache = Path(os.environ.get("AGENTRT_CACHE") or Path.home() / ".cache" / "agentrt")
    prefix = cache / "npm" / f"conformance-{CONFORMANCE_VERSION}"
    command = prefix / "node_modules" / ".bin" / "conformance"
    npm = Path(npx).with_name("npm")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not command.exists():
            subprocess.run(
                [
                    *(npm, "install", "--no-save", "--no-audit", "--no-fund"),
                    *("--loglevel=error", "--prefix", str(prefix), CONFORMANCE),
                ],
                check=True,
                timeout=300,
            )
    return str(command)


@pytest.fixture
def conformance_client(conformance_bin: str) -> Callable[[Path, str], tuple[int, str]]:
    """``conformance_client(client, scenario)``: the conformance suite's
    client ``scenario`` run against the Python script ``client``; its exit
    code and its output (stdout, then stderr)."""

    def run(client: Path, scenario: str) -> tuple[int, str]:
        done = subprocess.run(
            [
                conformance_bin,
                "client",
                "--command",
                f"{sys.executable} {client}",
                "--scenario",
                scenario,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    return run


@pytest.fixture(params=[pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio+uvloop")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """MCP tests run on uvloop (the production loop on Linux) only: each one
    starts server processes, seconds of CPU each.  The tests of process
    handling (restart, cancellation) also run on plain asyncio, by
    parametrizing ``anyio_backend`` themselves."""
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(autouse=True)
def no_orphan_processes() -> Iterator[None]:
    """Every server process a test started is gone when it ends."""
    before = _children()
    yield
    deadline = time.monotonic() + 5.0
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    described = []
    for pid in left:
        try:
            described.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())}")
        except psutil.Error:
            continue
    assert not described, f"orphan processes left behind: {described}"


@pytest.fixture
def everything(npx: str) -> StdioServerConfig:
    """``server-everything`` over stdio, started with ``npx -y`` (pinned)."""
    return StdioServerConfig(name="everything", command=npx, args=["-y", EVERYTHING])


@pytest.fixture
def filesystem(npx: str, tmp_path: Path) -> StdioServerConfig:
    """``server-filesystem`` confined to ``tmp_path/root``, via ``npx -y`` (pinned)."""
    root = tmp_path / "root"
    root.mkdir()
    return StdioServerConfig(name="fs", command=npx, args=["-y", FILESYSTEM, str(root)])
