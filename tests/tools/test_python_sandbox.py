"""The Python sandbox: output, time and memory limits, no network, cleanup,
the rollout's workspace.  (Escapes: test_sandbox_escapes.py.)"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import anyio
import psutil
import pytest

from agentrt.tools import (
    PythonSandbox,
    PythonSandboxConfig,
    SandboxUnavailable,
    ToolContext,
    ToolRegistry,
    Workspaces,
)

CTX = ToolContext()
pytestmark = [pytest.mark.usefixtures("bwrap"), pytest.mark.process]


def _sandbox(**overrides: object) -> PythonSandbox:
    settings: dict[str, object] = {"timeout_s": 5.0, "memory_mb": 256}
    settings.update(overrides)
    return PythonSandbox(PythonSandboxConfig.model_validate(settings))


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.mark.anyio
async def test_prints_output_and_reports_errors() -> None:
    sandbox = _sandbox()
    registry = ToolRegistry([sandbox])
    code = "import sys\nprint(sum(range(10)))\nprint('warn', file=sys.stderr)"
    out = await registry.call("python", {"code": code})
    assert not out.is_error
    assert out.structured["stdout"] == f"{sum(range(10))}\n"
    assert out.structured["stderr"] == "warn\n"
    assert out.structured["exit_code"] == 0
    assert "--- stdout ---\n45" in out.text

    out = await registry.call("python", {"code": "x = 1\nraise ValueError('boom')"})
    assert out.is_error
    assert out.structured["exit_code"] == 1
    assert 'File "main.py", line 2' in out.text
    assert "ValueError: boom" in out.text
    assert "<string>" not in out.text  # the bootstrap's frame is hidden

    out = await registry.call("python", {"code": "import sys; sys.exit(3)"})
    assert (out.is_error, out.structured["exit_code"]) == (True, 3)
    out = await registry.call("python", {"program": "print(1)"})
    assert out.is_error
    assert "- code: missing required argument" in out.text


@pytest.mark.anyio
async def test_output_is_truncated_keeping_head_and_tail() -> None:
    sandbox = _sandbox(max_output_bytes=1000)
    result = await sandbox.run("print('A' * 5000 + 'END')")
    assert result.stdout_truncated
    assert result.stdout.startswith("A" * 500)
    assert result.stdout.endswith("AEND\n")
    omitted = 5000 + len("END\n") - 1000
    assert f"[... {omitted} bytes omitted: the output was 5004 bytes" in result.stdout


@pytest.mark.anyio
async def test_timeout_kills_every_process_of_the_run() -> None:
    sandbox = _sandbox(timeout_s=0.5)
    # The child sleeps for days (and holds stdout): the run returns only if
    # the timeout kills it, which the hang guard below bounds.
    mark = f"{10**6 + os.getpid()}.{time.monotonic_ns() % 1000}"
    code = textwrap.dedent(
        f"""
        import os
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "{mark}"])
        print("forked", flush=True)
        while True:
            pass
        """
    )
    with anyio.fail_after(60):  # a hang guard, not a measurement
        result = await sandbox.run(code)
    assert result.timed_out
    assert not result.ok
    assert result.stdout == "forked\n"
    left = [
        p for p in psutil.process_iter(["cmdline"]) if mark in " ".join(p.info["cmdline"] or [])
    ]
    assert left == []


@pytest.mark.anyio
async def test_memory_limit() -> None:
    sandbox = _sandbox(memory_mb=256)
    out = await sandbox.call({"code": "data = bytearray(1024 ** 3)\nprint('allocated')"}, CTX)
    assert out.is_error
    assert "MemoryError" in out.text
    assert "allocated" not in out.structured["stdout"]
    assert "memory limit is 256 MB" in out.text


@pytest.mark.anyio
async def test_network_is_blocked_for_the_program_and_its_children() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        probe = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        async with await anyio.connect_tcp("127.0.0.1", port):  # reachable from here
            pass
        sandbox = _sandbox()
        result = await sandbox.run(probe + "print('connected')")
        assert not result.ok
        assert "connected" not in result.stdout
        assert "ConnectionRefusedError" in result.stderr  # the sandbox's own loopback
        spawn = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {probe!r}])\n"
        result = await sandbox.run(spawn + "print('spawned')")
        assert "spawned" in result.stdout  # children may run, in the same namespace
        assert "ConnectionRefusedError" in result.stderr


@pytest.mark.anyio
async def test_files_persist_in_the_rollouts_workspace(open_dir: Path) -> None:
    async with Workspaces(open_dir / "ws") as spaces:
        sandbox = PythonSandbox(PythonSandboxConfig(timeout_s=5), workspaces=spaces)
        first = ToolContext(run_id="r", rollout_id="r-0")
        out = await sandbox.call({"code": "open('notes.txt', 'w').write('kept')"}, first)
        assert not out.is_error, out.text
        out = await sandbox.call(
            {"code": "import os; print(os.getcwd(), open('notes.txt').read())"}, first
        )
        assert "/workspace kept" in out.text
        other = ToolContext(run_id="r", rollout_id="r-1")
        out = await sandbox.call({"code": "import os; print(os.listdir('.'))"}, other)
        assert "[]" in out.text
        assert (spaces.path_of("r", "r-0") / "notes.txt").read_text() == "kept"
        out = await sandbox.call({"code": "print(1)"}, CTX)  # no rollout, no workspace
        assert out.is_error
        assert "names no rollout" in out.text


@pytest.mark.anyio
async def test_without_bubblewrap_it_refuses(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(open_dir))  # no bwrap on it
    sandbox = _sandbox()
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        await sandbox.run("print(1)")
    out = await ToolRegistry([sandbox]).call("python", {"code": "print(1)"})
    assert out.is_error
    assert "needs bubblewrap (the `bwrap` command), which is not installed" in out.text
    assert "never run unsandboxed" in out.text


@pytest.mark.anyio
async def test_the_environment_is_clean() -> None:
    os.environ["AGENTRT_SANDBOX_TEST_SECRET"] = "hunter2"
    try:
        result = await _sandbox().run(
            "import os, sys; print(sorted(os.environ)); print(sys.flags.isolated)"
        )
    finally:
        del os.environ["AGENTRT_SANDBOX_TEST_SECRET"]
    assert "AGENTRT_SANDBOX_TEST_SECRET" not in result.stdout
    names = ["HOME", "LANG", "LC_ALL", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE", "TMPDIR"]
    assert result.stdout.split("\n")[0] == str(names)
    assert result.stdout.split("\n")[1] == "1"


@pytest.mark.anyio
async def test_cancellation_kills_the_child() -> None:
    sandbox = _sandbox(timeout_s=30)
    me = psutil.Process()

    def sandboxed() -> list[psutil.Process]:
        hits = []
        for p in me.children(recursive=True):
            try:
                if "main.py" in p.cmdline():
                    hits.append(p)
            except psutil.Error:  # gone, or a zombie about to be reaped
                continue
        return hits

    found: list[psutil.Process] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(sandbox.run, "import time\ntime.sleep(30)")
        with anyio.fail_after(10):
            while not found:
                await anyio.sleep(0.02)
                found = sandboxed()
        tg.cancel_scope.cancel()
    assert not _alive(found[0].pid)
    assert sandboxed() == []


@pytest.mark.anyio
async def test_program_too_long_is_an_error_output() -> None:
    out = await _sandbox(max_code_chars=10).call({"code": "print('hello world')"}, CTX)
    assert out.is_error
    assert "limit is 10" in out.text
