"""Every shell command in README.md, CONTRIBUTING.md and docs/ works as
written: each is either run here (from a directory holding the repository's
examples, with ``agentrt`` on PATH) or listed with the reason it is not (it
needs a GPU, a cluster, Claude Code, the network, or it is CI itself), so a
new command cannot go untested without someone saying why."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.configs import scripted_models
from tests._support.daemon import serving
from tests._support.ports import free_port

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent

NOT_RUN: dict[str, str] = {
    r"^make (run|test|check|bench)\b": "the Makefile's targets: CI runs them (.ci/run)",
    r"^\.ci/run\b": "CI itself",
    r"^\.venv/bin/python bench/[a-z]+\.py\b": "a benchmark: minutes of load on every core; "
    "`make bench` runs each one",
    r"^pip install ": "installs packages",
    r"^claude mcp add ": "needs Claude Code (docs/ide.md); its `mcp add` forms are documented",
    r"^python -m sglang\.": "an SGLang server on 4 GPUs",
    r"^python -m sglang_router\.": "an SGLang router in front of GPU servers",
    r"--config examples/sglang_gpu\.toml": "needs the GPU servers; tests/integration/"
    "test_sglang.py runs the file against CI's CPU SGLang server",
    r"^\.ci/sglang-setup\.sh$": "installs SGLang (11 GB, minutes): CI runs it (.ci/run)",
    r"^SGLANG_USE_CPU_ENGINE=1 ": "the CPU SGLang server: tests/integration/conftest.py "
    "starts it once per session (sglang_server)",
    r"^python -m swebench\.": "SWE-bench's Docker harness",
    r"^hf download SWE-bench/": "downloads SWE-bench Verified's Parquet file (network)",
    r"^TASKS=\$\(ls verified/|^python -c \"import pyarrow\.parquet|^while read -r r; do git": (
        "clones every SWE-bench Verified repository (network)"
    ),
    r"^agentrt eval \"\$TASKS\" --swe": "SWE-bench Verified on a GPU box; "
    "tests/runtime/evaluation/test_coding_tasks.py runs the same options on the task set",
    r"^\.venv/bin/python examples/swe_tasks/setup_tasks\.py": "downloads PyPI sdists (network); "
    "tests/runtime/evaluation/test_coding_tasks.py covers the task set",
    r"^head -n 1 /tmp/agentrt-swe-tasks": "needs the downloaded SWE task set above",
    r"^\.venv/bin/agentrt eval /tmp/agentrt-swe-one\.jsonl": "needs the SWE task set above",
    r"--ray-address ray-head:6379|--placement ray$": "a Ray cluster (tests/placement runs one)",
    r"--mcp 'fs=npx": "an embedded-model run with the npm filesystem server; "
    "tests/runtime/cli/test_cli.py runs --mcp",
    r"solver_verifier_corrector\.yaml$": "five model calls of up to 512 tokens on the embedded "
    "model: minutes on a CPU; tests/runtime/cli/test_cli.py runs the same spec on a scripted model",
    r"^agentrt sim-server ": "a server that runs until stopped; tests/runtime/testing drive it",
    r"^agentrt (serve|mcp) --config examples/agentrt\.toml": "a server on the embedded model "
    "that runs until stopped; tests/runtime/serve start `agentrt serve` and `agentrt mcp` "
    "on scripted configurations",
    r"^curl -s": "needs the daemon above on port 8765",
    r"^npx -y @modelcontextprotocol/conformance@[0-9.]+ client .*mcp_conformance_auth_client": (
        "docs/mcp-auth.md: tests/tools/mcp/test_auth_conformance.py runs every auth scenario"
    ),
}
"""Commands not run here, by pattern, with the reason."""

RUN_FAST = (
    r"^agentrt frontier --simulate",
    r"^agentrt (eval|aggregate) .*--config examples/eval_scripted\.toml",
)
"""Commands this file runs as written, in the order each document gives them."""

RUN_EMBEDDED = (
    r'^agentrt run "What is 17 \* 23\?" --config examples/agentrt\.toml --agent solver$',
    r'^agentrt run "\.\.\." --agent examples/planner_workers\.yaml --config examples/agentrt\.toml',
    r'^agentrt run "What is 2\+2\?" --rollouts 4',
    r"^agentrt eval examples/tasks\.jsonl --config examples/agentrt\.toml --agent solver",
)
"""Commands on the embedded model (run where it is installed; CI requires it)."""

RUN_NPX = (r"^npx -y @modelcontextprotocol/inspector@[0-9.]+ --cli",)
"""The MCP Inspector CLI lines of docs/ide.md, against a daemon and ``agentrt mcp``."""

EVAL_DOCS = r"^agentrt (eval|aggregate) .*pool\.parquet|--from pool\.jsonl"
"""docs/evaluation.md's commands are run by tests/runtime/evaluation/test_eval_docs.py."""


def documented_commands() -> list[tuple[str, str]]:
    """(document, command) for each command of each ``sh`` block,
    backslash-continued lines joined, comment lines left out."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    found.append((doc.name, line.rstrip()))
    return found


def _matches(command: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(re.search(p, command.strip()) for p in patterns)


def _kind(command: str) -> str:
    if _matches(command, list(NOT_RUN)):
        return "not run"
    if _matches(command, [EVAL_DOCS]):
        return "eval docs"
    for name, patterns in (("fast", RUN_FAST), ("embedded", RUN_EMBEDDED), ("npx", RUN_NPX)):
        if _matches(command, patterns):
            return name
    return "unclassified"


def test_every_documented_command_is_run_or_says_why_not() -> None:
    commands = documented_commands()
    assert len(commands) > 30
    loose = [f"{doc}: {cmd}" for doc, cmd in commands if _kind(cmd) == "unclassified"]
    assert not loose, "commands neither run by a test nor listed in NOT_RUN:\n" + "\n".join(loose)


def _workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return tmp_path, env


def _run(command: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    out = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, f"{command}\nexit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_the_fast_commands_run_as_written(tmp_path: Path) -> None:
    cwd, env = _workdir(tmp_path)
    ran = 0
    for _, command in documented_commands():
        if _kind(command) == "fast":
            _run(command, cwd, env)
            ran += 1
    assert ran >= 3


@pytest.mark.slow
@pytest.mark.embedded
@pytest.mark.parametrize("pattern", RUN_EMBEDDED)
def test_the_embedded_model_commands_run_as_written(tmp_path: Path, pattern: str) -> None:
    cwd, env = _workdir(tmp_path)
    (command,) = [c for _, c in documented_commands() if re.search(pattern, c.strip())]
    out = _run(command, cwd, env, timeout=110)
    assert "usage: " in out or '"status"' in out or "pass@1" in out, out


SCRIPTED = (
    scripted_models(["42"], backend="s")
    + """
[agents.solver]
instructions = "Answer briefly."

[server]
port = {port}

[store]
path = "{store}"
"""
)


@pytest.mark.slow
def test_the_inspector_commands_of_docs_ide_run_as_written(tmp_path: Path, npx: str) -> None:
    """Each line as written, with the daemon's port for 8765 and a
    Claude Desktop file of this test's for the macOS path."""
    cwd, env = _workdir(tmp_path)
    port = free_port()
    config = tmp_path / "agentrt.toml"
    config.write_text(SCRIPTED.format(port=port, store=tmp_path / "runs.db"))
    desktop = tmp_path / "claude_desktop_config.json"
    stdio = [str(BIN / "agentrt"), "mcp", "--config", str(config)]
    stdio += ["--store", str(tmp_path / "mcp.db")]
    desktop.write_text(
        json.dumps({"mcpServers": {"agentrt": {"command": stdio[0], "args": stdio[1:]}}})
    )
    commands = [c for _, c in documented_commands() if _kind(c) == "npx"]
    assert len(commands) == 2
    with serving(config, port, tmp_path / "serve.log", cwd=tmp_path):
        listed = _run(commands[0].replace("8765", str(port)), cwd, env)
        assert "run_agent" in json.dumps(json.loads(listed[listed.index("{") :]))
        called = commands[1].replace(
            r"~/Library/Application\ Support/Claude/claude_desktop_config.json", str(desktop)
        )
        assert called != commands[1]
        answer = _run(called, cwd, env)
        result = json.loads(answer[answer.index("{") :])
        assert result["structuredContent"]["status"] == "succeeded"
        assert result["structuredContent"]["answer"] == "42"
    assert shutil.which("npx") is not None
