"""Third-party MCP clients against the daemon's MCP surface (npm, pinned):
the MCP Inspector's CLI over streamable HTTP at the daemon's ``/mcp`` and
over stdio through ``agentrt mcp`` (launched from a Claude-Desktop-shaped
``mcpServers`` file), and the MCP conformance suite's server scenarios
against ``/mcp``.

They need Node's ``npx``: without it they skip, unless
``AGENTRT_REQUIRE_NPX=1`` (CI sets it), which makes them fail instead.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.protocols import ModelRequest
from agentrt.runtime.serve._daemon import run_daemon
from agentrt.testing import ScriptedBackend
from tests._support.daemon import solver_daemon_config
from tests._support.inspector import INSPECTOR, inspector_workdir

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.process]

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.13"  # 0.1.14+ needs Node 22
SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "logging-set-level",
    "dns-rebinding-protection",
)
_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return inspector_workdir(tmp_path)


def votes(request: ModelRequest) -> str:
    found = _ROLLOUT.search(request.request_id or "")
    return "41" if found and found.group(1) == "1" else "42"


@asynccontextmanager
async def daemon(tmp_path: Path) -> AsyncIterator[str]:
    """The real daemon (``run_daemon``) on a loopback port; yields the MCP URL."""
    config = solver_daemon_config(tmp_path)
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(
            lambda task_status: run_daemon(
                config, backends=[ScriptedBackend(votes)], task_status=task_status
            )
        )
        try:
            yield f"{endpoint.url}/mcp"
        finally:
            tg.cancel_scope.cancel()


async def run_npx(npx: str, cwd: Path, *args: str) -> tuple[int, str, str]:
    with anyio.fail_after(240):  # the first run downloads the package
        done = await anyio.run_process([npx, "-y", *args], cwd=cwd, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def inspect(npx: str, workdir: Path, target: Sequence[str], *args: str) -> Any:
    """Run the inspector CLI once; its stdout is the JSON result."""
    code, out, err = await run_npx(npx, workdir, INSPECTOR, "--cli", *target, *args)
    assert code == 0, f"inspector-cli exited {code}:\n{out}\n{err}"
    return json.loads(out)


async def list_run_and_read(
    npx: str, workdir: Path, target: Sequence[str], *, rollouts: int
) -> tuple[Any, Any, Any]:
    """Through the inspector CLI: the tools listed, the answer of
    ``run_agent`` ("What is 6 x 7?" with ``rollouts``), then that run's
    resource as read."""
    listed = await inspect(npx, workdir, target, "--method", "tools/list")
    answered = await inspect(
        npx, workdir, target, "--method", "tools/call", "--tool-name", "run_agent",
        "--tool-arg", "task=What is 6 x 7?", "agent=solver", f"rollouts={rollouts}",
    )  # fmt: skip
    run_id = answered["structuredContent"]["run_id"]
    read = await inspect(
        npx, workdir, target, "--method", "resources/read", "--uri", f"agentrt://runs/{run_id}"
    )
    return listed, answered, read


async def test_inspector_drives_the_daemons_mcp_endpoint(
    npx: str, workdir: Path, tmp_path: Path
) -> None:
    async with daemon(tmp_path) as url:
        target = [url, "--transport", "http"]
        listed, answered, read = await list_run_and_read(npx, workdir, target, rollouts=3)
        run_id = answered["structuredContent"]["run_id"]
        cancelled = await inspect(
            npx, workdir, target, "--method", "tools/call", "--tool-name", "cancel_run",
            "--tool-arg", f"run_id={run_id}",
        )  # fmt: skip
    assert [t["name"] for t in listed["tools"]] == [
        "run_agent",
        "list_agents",
        "get_run",
        "cancel_run",
    ]
    run_agent = listed["tools"][0]
    assert run_agent["inputSchema"]["required"] == ["task"]
    assert answered["isError"] is False
    assert answered["content"][0]["text"].startswith("42\n\n")
    assert answered["structuredContent"]["status"] == "succeeded"
    assert answered["structuredContent"]["rollouts"] == 3
    detail = json.loads(read["contents"][0]["text"])
    assert detail["run"]["run_id"] == run_id
    assert detail["result"]["answer"] == "42"
    assert len(detail["rollouts"]) == 3
    # Cancelling a finished run changes nothing and says so.
    assert cancelled["structuredContent"]["status"] == "succeeded"


async def test_inspector_drives_agentrt_mcp_over_stdio(
    npx: str, workdir: Path, daemon_kit: Any
) -> None:
    agentrt_toml = workdir / "agentrt.toml"
    agentrt_toml.write_text(daemon_kit.scripted_toml)
    # The shape Claude Desktop's claude_desktop_config.json uses (docs/ide.md).
    servers = workdir / "mcp.json"
    servers.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "agentrt": {
                        "command": sys.executable,
                        "args": ["-m", "agentrt", "mcp", "--config", str(agentrt_toml)],
                    }
                }
            }
        )
    )
    target = ["--config", str(servers), "--server", "agentrt"]
    # Each call is a launch of its own: the read finds the run in the store.
    listed, answered, read = await list_run_and_read(npx, workdir, target, rollouts=2)
    assert {t["name"] for t in listed["tools"]} == {
        "run_agent",
        "list_agents",
        "get_run",
        "cancel_run",
    }
    assert answered["isError"] is False
    assert answered["content"][0]["text"].startswith("42\n\n")
    detail = json.loads(read["contents"][0]["text"])
    assert detail["run"]["status"] == "succeeded"
    assert detail["request"]["agent"] == "solver"
    assert [r["answer"] for r in detail["rollouts"]] == ["42", "42"]
    assert (workdir / "runs.db").exists()


def _checks(results: Path) -> list[dict[str, Any]]:
    found = sorted(results.glob("**/checks.json"))
    assert found, f"no checks.json under {results}"
    checks: list[dict[str, Any]] = json.loads(found[-1].read_text())
    return checks


async def test_conformance_scenarios_pass_against_the_daemon(
    npx: str, workdir: Path, tmp_path: Path
) -> None:
    outcome: dict[str, list[dict[str, Any]]] = {}
    failures: list[str] = []
    slots = anyio.Semaphore(2)  # two cores

    async def run(scenario: str, url: str) -> None:
        results = tmp_path / "conformance" / scenario
        async with slots:
            code, out, err = await run_npx(
                npx, workdir, CONFORMANCE, "server", "--url", url, "--scenario", scenario,
                "-o", str(results),
            )  # fmt: skip
        if code != 0:
            failures.append(f"{scenario}: exit {code}\n{out}\n{err}")
        else:
            outcome[scenario] = _checks(results)

    async with daemon(tmp_path) as url, anyio.create_task_group() as tg:
        for scenario in SCENARIOS:
            tg.start_soon(run, scenario, url)
    assert not failures, "\n".join(failures)
    assert sorted(outcome) == sorted(SCENARIOS)
    report = {s: [(c["id"], c["status"]) for c in checks] for s, checks in outcome.items()}
    print(json.dumps(report, indent=1))  # the per-check table, visible with -s
    for scenario, checks in outcome.items():
        assert checks, scenario
        failed = [c for c in checks if c["status"] == "FAILURE"]
        assert not failed, f"{scenario}: {failed}"
        assert any(c["status"] == "SUCCESS" for c in checks), scenario
    rebinding = {c["id"]: c for c in outcome["dns-rebinding-protection"]}
    assert rebinding["localhost-host-rebinding-rejected"]["details"]["statusCode"] == 421
