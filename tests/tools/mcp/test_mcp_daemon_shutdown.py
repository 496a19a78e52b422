"""A daemon with an MCP stdio server stops when its task is cancelled
(Python 3.11's exit stacks looped forever once the servers' stop raised
the cancellation inside the daemon's nested exit stacks).  Run in a child
process: a hang is a failure here, not a stuck test session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.mcp.conftest import FIXTURE_SERVER

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]

_SCRIPT = """
import sys, anyio
from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.runtime.serve._daemon import run_daemon
from agentrt.testing import ScriptedBackend

async def main() -> None:
    config = config_from_mapping(
        {
            "server": {"port": 0, "shutdown_grace_s": 0.5},
            "store": {"path": sys.argv[1]},
            "mcp": {"fx": {"command": sys.executable, "args": [sys.argv[2]]}},
            "warm_prefix": False,
        },
        source="test",
    )
    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: run_daemon(
                config, backends=[ScriptedBackend(lambda r: "hi")], task_status=task_status
            )
        )
        print("serving", flush=True)
        tg.cancel_scope.cancel()
    print("stopped", flush=True)

anyio.run(main)
"""


def test_a_cancelled_daemon_stops_with_its_mcp_server(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "runs.db"), str(FIXTURE_SERVER)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the daemon did not stop within 60 s: {err[-2000:]}")
    assert process.returncode == 0, err[-3000:]
    assert out.split() == ["serving", "stopped"], (out, err[-2000:])
