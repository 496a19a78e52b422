"""Every line the daemon writes to stderr is one JSON object: agentrt's own
log lines and the libraries' (uvicorn, httpx, mcp...) alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.process

MCP_SERVER = """
import logging, sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("noisy")

@server.tool()
def echo(text: str) -> str:
    \"\"\"Echo the text.\"\"\"
    return text

print("a plain line on the server's stderr", file=sys.stderr)
server.run()
"""


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}\n--- the log:\n{text}") from None
    return parsed


def test_the_daemons_stderr_is_json_lines_third_party_loggers_included(
    tmp_path: Path, daemon_kit: Any
) -> None:
    port = daemon_kit.free_port()
    server = tmp_path / "noisy_server.py"
    server.write_text(MCP_SERVER)
    config = tmp_path / "agentrt.toml"
    config.write_text(
        daemon_kit.scripted_toml
        + f"""
[server]
port = {port}
shutdown_grace_s = 0.5

[mcp.noisy]
command = "{sys.executable}"
args = ["{server}"]
"""
    )
    log = tmp_path / "daemon.log"
    proc = daemon_kit.start_serve(config, port, log)
    try:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/v1/nothing", timeout=5).status_code == 404
        created = httpx.post(f"{url}/v1/runs", json={"task": "hi", "agent": "solver"}, timeout=5)
        assert created.status_code == 201, created.text
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    records = _json_lines(log.read_text())
    assert records
    assert all({"event", "level", "timestamp"} <= record.keys() for record in records)
    loggers = {record.get("logger_name", "") for record in records}
    assert any(name.startswith("agentrt") for name in loggers), loggers
    assert any(not name.startswith("agentrt") for name in loggers), loggers


def test_stdlib_loggers_render_as_json_after_configure_logging() -> None:
    code = (
        "import logging, warnings\n"
        "from agentrt.runtime.observe._log import configure_logging, get_logger\n"
        "logging.basicConfig(format='%(name)s %(message)s')  # a plain handler first\n"
        "configure_logging(json=True)\n"
        "get_logger('agentrt.x', run_id='r1').info('ours', n=1)\n"
        "logging.getLogger('mcp.client.stdio').warning('server said %s', 'hi')\n"
        "logging.getLogger('uvicorn.error').info('Started', extra={'color_message': 'x'})\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    logging.getLogger('aiohttp.server').exception('boom')\n"
        "warnings.warn('careful')\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    records = _json_lines(out.stderr)
    by_logger = {record["logger_name"]: record for record in records}
    assert by_logger["agentrt.x"]["run_id"] == "r1"
    assert by_logger["mcp.client.stdio"]["event"] == "server said hi"
    assert by_logger["mcp.client.stdio"]["level"] == "warning"
    assert "ZeroDivisionError" in by_logger["aiohttp.server"]["exception"]
    assert "careful" in by_logger["py.warnings"]["event"]
    assert len(records) == 5
