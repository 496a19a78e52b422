"""The Python sandbox: output, time and memory limits, no network, cleanup."""

from __future__ import annotations

import os
import textwrap

import anyio
import psutil
import pytest

from agentrt.tools import PythonSandbox, PythonSandboxConfig, ToolContext, ToolRegistry

CTX = ToolContext()


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
    assert f"[... {omitted} bytes omitted ...]" in result.stdout


@pytest.mark.anyio
async def test_timeout_kills_the_process_group() -> None:
    sandbox = _sandbox(timeout_s=0.5)
    code = textwrap.dedent(
        """
        import os, time
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        print(child, flush=True)
        while True:
            pass
        """
    )
    start = anyio.current_time()
    result = await sandbox.run(code)
    elapsed = anyio.current_time() - start
    assert result.timed_out
    assert not result.ok
    assert elapsed < 0.5 + 2.0
    grandchild = int(result.stdout.split()[0])
    assert not _alive(grandchild)


@pytest.mark.anyio
async def test_memory_limit() -> None:
    sandbox = _sandbox(memory_mb=256)
    out = await sandbox.call({"code": "data = bytearray(1024 ** 3)\nprint('allocated')"}, CTX)
    assert out.is_error
    assert "MemoryError" in out.text
    assert "allocated" not in out.structured["stdout"]
    assert "memory limit is 256 MB" in out.text


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", ["auto", "audit-hook"])
async def test_network_is_blocked(isolation: str) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        probe = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        async with await anyio.connect_tcp("127.0.0.1", port):  # reachable from here
            pass
        sandbox = _sandbox(network_isolation=isolation)
        result = await sandbox.run(probe + "print('connected')")
        assert not result.ok
        assert "connected" not in result.stdout
        assert "network access is disabled" in result.stderr
        spawn = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {probe!r}])\n"
        result = await sandbox.run(spawn + "print('spawned')")
        if await sandbox.isolation() == "namespace":
            # a child process has no hook, but lives in the empty network namespace
            assert "spawned" in result.stdout
            assert "Network is unreachable" in result.stderr
        else:
            assert "spawned" not in result.stdout
            assert "subprocess.Popen is disabled" in result.stderr


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
    assert "NO_PROXY" in result.stdout
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
        workdir = found[0].cwd()
        assert await anyio.Path(workdir).is_dir()
        tg.cancel_scope.cancel()
    assert not _alive(found[0].pid)
    assert sandboxed() == []
    assert not await anyio.Path(workdir).exists()


@pytest.mark.anyio
async def test_program_too_long_is_an_error_output() -> None:
    out = await _sandbox(max_code_chars=10).call({"code": "print('hello world')"}, CTX)
    assert out.is_error
    assert "limit is 10" in out.text
