"""The ``editor`` tool: view with line numbers, create, str_replace (unique
match), insert, undo; confined to the rollout's workspace, symlinks
included; its edits are what the shell sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.tools import (
    EditorTool,
    SandboxConfig,
    ShellTool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    Workspaces,
)
from agentrt.tools.sandbox._bwrap import sandbox_host_uid

pytestmark = pytest.mark.process

ROLLOUT = ToolContext(run_id="run", rollout_id="run-0")


@pytest.fixture
async def workspaces(open_dir: Path) -> AsyncIterator[Workspaces]:
    async with Workspaces(open_dir / "workspaces") as spaces:
        yield spaces


@pytest.fixture
def tools(workspaces: Workspaces) -> ToolRegistry:
    return ToolRegistry([EditorTool(workspaces)])


async def _edit(tools: ToolRegistry, **arguments: Any) -> ToolOutput:
    return await tools.call("editor", arguments, ROLLOUT)


@pytest.mark.anyio
async def test_create_view_and_view_range(tools: ToolRegistry, workspaces: Workspaces) -> None:
    out = await _edit(tools, command="create", path="pkg/mod.py", file_text="a = 1\nb = 2\nc = 3\n")
    assert not out.is_error, out.text
    assert out.text == "Created /workspace/pkg/mod.py (3 lines)."
    host = workspaces.path_of("run", "run-0") / "pkg" / "mod.py"
    assert host.read_text() == "a = 1\nb = 2\nc = 3\n"
    assert host.stat().st_uid == sandbox_host_uid()  # the sandbox may edit it too
    out = await _edit(tools, command="view", path="/workspace/pkg/mod.py")
    assert out.text.splitlines()[1:4] == ["     1\ta = 1", "     2\tb = 2", "     3\tc = 3"]
    out = await _edit(tools, command="view", path="pkg/mod.py", view_range=[2, -1])
    assert out.text.splitlines()[1:3] == ["     2\tb = 2", "     3\tc = 3"]
    out = await _edit(tools, command="view", path="pkg/mod.py", view_range=[3, 99])
    assert out.is_error
    assert "outside /workspace/pkg/mod.py's 4 lines" in out.text
    out = await _edit(tools, command="view", path=".")
    assert "/workspace/pkg/\n/workspace/pkg/mod.py" in out.text
    out = await _edit(tools, command="view", path="missing.py")
    assert out.is_error
    assert "/workspace/missing.py does not exist" in out.text


@pytest.mark.anyio
async def test_str_replace_needs_exactly_one_match(tools: ToolRegistry) -> None:
    await _edit(tools, command="create", path="m.py", file_text="x = 1\ny = 1\nx = 1\n")
    out = await _edit(tools, command="str_replace", path="m.py", old_str="x = 1", new_str="x = 2")
    assert out.is_error
    assert "old_str occurs 2 times in /workspace/m.py (lines 1, 3)" in out.text
    out = await _edit(tools, command="str_replace", path="m.py", old_str="z = 1", new_str="")
    assert out.is_error
    assert "old_str was not found in /workspace/m.py; nothing was changed" in out.text
    out = await _edit(
        tools, command="str_replace", path="m.py", old_str="y = 1\nx = 1", new_str="y = 2\nx = 3"
    )
    assert not out.is_error, out.text
    assert "     2\ty = 2\n     3\tx = 3" in out.text
    out = await _edit(tools, command="view", path="m.py")
    assert "     1\tx = 1\n     2\ty = 2\n     3\tx = 3" in out.text


@pytest.mark.anyio
async def test_insert_and_undo(tools: ToolRegistry, workspaces: Workspaces) -> None:
    host = workspaces.path_of("run", "run-0") / "f.txt"
    await _edit(tools, command="create", path="f.txt", file_text="one\ntwo\n")
    out = await _edit(tools, command="insert", path="f.txt", insert_line=1, new_str="one.5\n")
    assert not out.is_error, out.text
    assert host.read_text() == "one\none.5\ntwo\n"
    out = await _edit(tools, command="insert", path="f.txt", insert_line=0, new_str="zero")
    assert host.read_text() == "zero\none\none.5\ntwo\n"
    out = await _edit(tools, command="insert", path="f.txt", insert_line=99, new_str="x")
    assert out.is_error
    assert "past the end" in out.text
    await _edit(tools, command="undo", path="f.txt")
    assert host.read_text() == "one\none.5\ntwo\n"
    await _edit(tools, command="undo", path="f.txt")
    assert host.read_text() == "one\ntwo\n"
    out = await _edit(tools, command="undo", path="f.txt")
    assert "did not exist before it, so it was removed" in out.text
    assert not host.exists()
    out = await _edit(tools, command="undo", path="f.txt")
    assert out.is_error
    assert "no edit of /workspace/f.txt to undo" in out.text


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path", ["../escape.txt", "/etc/passwd", "/workspace/../etc/passwd", "a/../../x", "/tmp/x"]
)
async def test_paths_outside_the_workspace_are_refused(tools: ToolRegistry, path: str) -> None:
    for arguments in (
        {"command": "view"},
        {"command": "create", "file_text": "pwned"},
        {"command": "str_replace", "old_str": "root", "new_str": "pwned"},
    ):
        out = await _edit(tools, path=path, **arguments)
        assert out.is_error
        assert "outside the workspace" in out.text


@pytest.mark.anyio
async def test_symlinks_planted_from_the_shell_lead_nowhere(
    bwrap: str, tools: ToolRegistry, workspaces: Workspaces, open_dir: Path
) -> None:
    secret = open_dir / "secret.txt"
    secret.write_text("SECRET\n")
    secret.chmod(0o666)
    shell = ShellTool(workspaces, SandboxConfig(timeout_s=5))
    out = await shell.call(
        {"command": f"ln -s {secret} link.txt && ln -s {open_dir} dir && echo planted"}, ROLLOUT
    )
    assert "planted" in out.text
    for path in ("link.txt", "dir/secret.txt"):
        for arguments in (
            {"command": "view"},
            {"command": "create", "file_text": "pwned"},
            {"command": "str_replace", "old_str": "SECRET", "new_str": "pwned"},
            {"command": "insert", "insert_line": 0, "new_str": "pwned"},
        ):
            out = await _edit(tools, path=path, **arguments)
            assert out.is_error, (path, arguments)
            assert "symlink" in out.text
            assert "SECRET" not in out.text
    assert secret.read_text() == "SECRET\n"
    assert await anyio.Path(workspaces.path_of("run", "run-0") / "link.txt").is_symlink()


@pytest.mark.anyio
async def test_the_shell_sees_the_editors_files(
    bwrap: str, tools: ToolRegistry, workspaces: Workspaces
) -> None:
    await _edit(tools, command="create", path="app.py", file_text="print('hello')\n")
    await _edit(tools, command="str_replace", path="app.py", old_str="hello", new_str="edited")
    shell = ShellTool(workspaces, SandboxConfig(timeout_s=5))
    out = await shell.call({"command": "python3 app.py && echo more >> app.py"}, ROLLOUT)
    assert out.structured["stdout"] == "edited\n"
    out = await _edit(tools, command="view", path="app.py")
    assert "     2\tmore" in out.text
