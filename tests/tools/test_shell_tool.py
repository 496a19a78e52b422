"""The ``shell`` tool: exit code and both streams, long output kept head and
tail, the per-command timeout, the rollout's workspace (persisting, private
to the rollout), and a clear refusal without bubblewrap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from agentrt.agents._bindings import builtin_tool
from agentrt.agents._spec import BuiltinTool
from agentrt.tools import SandboxConfig, ShellTool, ToolContext, ToolRegistry, Workspaces

pytestmark = [pytest.mark.usefixtures("bwrap"), pytest.mark.process]

ROLLOUT = ToolContext(run_id="run", rollout_id="run-0")


@pytest.fixture
async def workspaces(open_dir: Path) -> AsyncIterator[Workspaces]:
    async with Workspaces(open_dir / "workspaces") as spaces:
        yield spaces


def _shell(workspaces: Workspaces, **limits: object) -> ToolRegistry:
    config = SandboxConfig.model_validate({"timeout_s": 5.0, **limits})
    return ToolRegistry([ShellTool(workspaces, config)])


@pytest.mark.anyio
async def test_exit_code_stdout_and_stderr(workspaces: Workspaces) -> None:
    tools = _shell(workspaces)
    out = await tools.call("shell", {"command": "echo out; echo err >&2; pwd"}, ROLLOUT)
    assert not out.is_error
    assert out.structured["exit_code"] == 0
    assert out.structured["stdout"] == "out\n/workspace\n"
    assert out.structured["stderr"] == "err\n"
    assert out.text.startswith("Exit code 0.\n--- stdout ---\nout\n/workspace")
    out = await tools.call("shell", {"command": "exit 3"}, ROLLOUT)
    assert (out.is_error, out.structured["exit_code"]) == (True, 3)
    assert out.text.startswith("Exit code 3.")
    out = await tools.call("shell", {"command": "kill -SEGV $$"}, ROLLOUT)
    assert out.structured["signal"] == "SIGSEGV"
    assert "killed by SIGSEGV" in out.text
    out = await tools.call("shell", {"cmd": "ls"}, ROLLOUT)
    assert out.is_error
    assert "command" in out.text


@pytest.mark.anyio
async def test_long_output_keeps_head_and_tail_with_a_note(workspaces: Workspaces) -> None:
    tools = _shell(workspaces, max_output_bytes=1000)
    out = await tools.call("shell", {"command": "echo START; seq 100000; echo END"}, ROLLOUT)
    stdout = out.structured["stdout"]
    assert out.structured["stdout_truncated"]
    assert stdout.startswith("START\n1\n2\n")
    assert stdout.endswith("99999\n100000\nEND\n")
    assert "bytes omitted: the output was 588905 bytes" in stdout
    assert "redirect long output to a file" in out.text


@pytest.mark.anyio
async def test_per_command_timeout(workspaces: Workspaces) -> None:
    # The per-command limit leaves the sandbox seconds to start and echo:
    # on a loaded machine, bwrap's start alone once took longer than 0.3 s
    # and the command was killed before it printed anything.
    tools = _shell(workspaces, timeout_s=3.0)
    with anyio.fail_after(60):  # a hang guard: only the timeout ends an hour's sleep
        out = await tools.call(
            "shell", {"command": "echo begun; sleep 3600", "timeout_s": 2.0}, ROLLOUT
        )
    assert out.is_error
    assert out.structured["timed_out"]
    assert out.structured["stdout"] == "begun\n"
    assert out.text.startswith("Timed out after 2 s")
    with anyio.fail_after(60):
        out = await tools.call("shell", {"command": "sleep 3600", "timeout_s": 600}, ROLLOUT)
    assert out.text.startswith("Timed out after 3 s")  # never past the configured limit


@pytest.mark.anyio
async def test_files_persist_per_rollout_and_nothing_else_does(workspaces: Workspaces) -> None:
    tools = _shell(workspaces)
    out = await tools.call(
        "shell",
        {"command": "mkdir -p src && echo v1 > src/a.txt; cd src; X=1; echo hi > /tmp/t"},
        ROLLOUT,
    )
    assert not out.is_error, out.text
    out = await tools.call("shell", {"command": "pwd; cat src/a.txt; echo X=$X; ls /tmp"}, ROLLOUT)
    assert out.structured["stdout"] == "/workspace\nv1\nX=\n"
    sub_agent = ToolContext(run_id="run", rollout_id="run-0.coder-1")
    out = await tools.call("shell", {"command": "cat src/a.txt"}, sub_agent)
    assert out.structured["stdout"] == "v1\n"  # a sub-agent shares its rollout's workspace
    other = ToolContext(run_id="run", rollout_id="run-1")
    out = await tools.call("shell", {"command": "ls -A"}, other)
    assert out.structured["stdout"] == ""  # another rollout starts empty
    host = workspaces.path_of("run", "run-0") / "src" / "a.txt"
    assert host.read_text() == "v1\n"
    out = await tools.call("shell", {"command": "ls"}, ToolContext())
    assert out.is_error
    assert "names no rollout" in out.text


@pytest.mark.anyio
async def test_without_bubblewrap_it_refuses(
    workspaces: Workspaces, open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(open_dir))
    out = await _shell(workspaces).call("shell", {"command": "echo ran > proof"}, ROLLOUT)
    assert out.is_error
    assert "the sandbox needs bubblewrap (the `bwrap` command), which is not installed" in out.text
    assert "apt-get install -y bubblewrap" in out.text
    assert not (workspaces.path_of("run", "run-0") / "proof").exists()


def test_specs_name_the_sandboxed_builtins(tmp_path: Path) -> None:
    shell = builtin_tool(BuiltinTool(builtin="shell"), base_dir=tmp_path, where="t")
    assert isinstance(shell, ShellTool)
    assert not shell.sandbox.config.network
    assert "No network" in shell.spec.description
    online = builtin_tool(
        BuiltinTool(builtin="shell", name="sh", network=True), base_dir=tmp_path, where="t"
    )
    assert isinstance(online, ShellTool)
    assert online.spec.name == "sh"
    assert online.sandbox.config.network
    editor = builtin_tool(BuiltinTool(builtin="editor"), base_dir=tmp_path, where="t")
    assert editor.spec.name == "editor"
    with pytest.raises(ValueError, match="`network` applies to python and shell only"):
        BuiltinTool(builtin="editor", network=True)


@pytest.mark.anyio
async def test_read_only_paths_are_shown_and_stay_read_only(
    workspaces: Workspaces, open_dir: Path
) -> None:
    toolchain = open_dir / "toolchain"
    toolchain.mkdir()
    (toolchain / "VERSION").write_text("1.2\n")
    toolchain.chmod(0o777)  # writable on the host: only the mount keeps it read-only
    tools = _shell(workspaces, read_only_paths=[str(toolchain)])
    out = await tools.call(
        "shell", {"command": f"cat {toolchain}/VERSION; touch {toolchain}/new"}, ROLLOUT
    )
    assert out.structured["stdout"] == "1.2\n"
    assert "Read-only file system" in out.structured["stderr"]
    assert not (toolchain / "new").exists()
    with pytest.raises(ValueError, match="'relative' is not an absolute path"):
        SandboxConfig(read_only_paths=("relative",))
