"""File reading confined to a root: inside yes, escapes never, sizes bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools import ListDirectoryTool, ReadFileTool, ToolContext, ToolRegistry, file_tools

CTX = ToolContext()
MAIN_PY = "print('hi')\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``tmp_path/root`` with files, a subdirectory and symlinks, next to a
    secret outside the root."""
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "notes.txt").write_text("line 1\nline 2\nline 3\nline 4\n", encoding="utf-8")
    (root / "src" / "main.py").write_text(MAIN_PY, encoding="utf-8")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (tmp_path / "secret.txt").write_text("top secret\n", encoding="utf-8")
    (root / "escape").symlink_to(tmp_path / "secret.txt")
    (root / "escape_dir").symlink_to(tmp_path)
    (root / "alias.txt").symlink_to(root / "notes.txt")
    os.mkfifo(root / "fifo")
    return root


@pytest.mark.anyio
async def test_reads_files_inside_the_root(tree: Path) -> None:
    read = ReadFileTool(tree)
    notes = (tree / "notes.txt").read_text(encoding="utf-8")
    for path in ("notes.txt", "./src/../notes.txt", "alias.txt", str(tree / "notes.txt")):
        out = await read.call({"path": path}, CTX)
        assert (out.is_error, out.text) == (False, notes), path
    out = await read.call({"path": "notes.txt", "start_line": 2, "end_line": 3}, CTX)
    assert out.text == "".join(notes.splitlines(keepends=True)[1:3])
    out = await read.call({"path": "src/main.py"}, CTX)
    assert out.text == MAIN_PY


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("../secret.txt", "outside the allowed directory"),
        ("src/../../secret.txt", "outside the allowed directory"),
        ("/etc/passwd", "outside the allowed directory"),
        ("escape", "symlink to a place outside"),
        ("escape_dir/secret.txt", "symlink to a place outside"),
        ("missing.txt", "does not exist"),
        ("src", "is a directory"),
        ("blob.bin", "binary"),
        ("fifo", "not a regular file"),
        ("bad\x00name", "NUL"),
    ],
)
async def test_refuses_escapes_and_non_text(tree: Path, path: str, needle: str) -> None:
    out = await ReadFileTool(tree).call({"path": path}, CTX)
    assert out.is_error
    assert needle in out.text
    assert "top secret" not in out.text


@pytest.mark.anyio
async def test_size_limit_truncates_with_a_way_to_continue(tree: Path) -> None:
    big = "".join(f"row {i:04d}\n" for i in range(1, 2001))  # 9 bytes per line
    (tree / "big.txt").write_text(big, encoding="utf-8")
    read = ReadFileTool(tree, max_bytes=100)
    out = await read.call({"path": "big.txt"}, CTX)
    assert not out.is_error
    body, _, note = out.text.partition("\n[truncated:")
    assert body == "".join(big.splitlines(keepends=True)[:11])
    assert len(body.encode()) <= 100
    assert "start_line=12" in note
    assert f"({len(big)} bytes)" in note
    out = await read.call({"path": "big.txt", "start_line": 12, "end_line": 13}, CTX)
    assert out.text == "row 0012\nrow 0013\n"
    (tree / "wide.txt").write_text("x" * 500 + "\nshort\n", encoding="utf-8")
    out = await read.call({"path": "wide.txt"}, CTX)
    assert out.text.startswith("x" * 100 + "\n[truncated: line 1 alone")
    assert "start_line=2" in out.text
    out = await read.call({"path": "notes.txt", "start_line": 99}, CTX)
    assert out.is_error
    assert "has 4 lines" in out.text
    out = await read.call({"path": "notes.txt", "start_line": 3, "end_line": 2}, CTX)
    assert out.is_error
    out = await read.call({"path": "notes.txt", "start_line": 0}, CTX)
    assert out.is_error
    assert "start_line" in out.text


@pytest.mark.anyio
async def test_lists_directories_inside_the_root_only(tree: Path) -> None:
    listing = ListDirectoryTool(tree)
    out = await listing.call({}, CTX)
    lines = out.text.splitlines()
    assert lines == sorted(lines, key=lambda line: line.split(" ")[0].rstrip("/"))
    assert "src/" in lines
    assert f"notes.txt ({(tree / 'notes.txt').stat().st_size} bytes)" in lines
    assert "escape -> (outside the allowed directory)" in lines
    assert "alias.txt -> notes.txt" in lines
    out = await listing.call({"path": "src"}, CTX)
    assert out.text == f"main.py ({len(MAIN_PY.encode())} bytes)"
    for path in ("..", "escape_dir", "/"):
        out = await listing.call({"path": path}, CTX)
        assert out.is_error, path
        assert "secret.txt" not in out.text


def test_root_must_be_a_directory_and_tools_register(tree: Path) -> None:
    with pytest.raises(ConfigError):
        ReadFileTool(tree / "notes.txt")
    with pytest.raises(ConfigError):
        ReadFileTool(tree / "nowhere")
    registry = ToolRegistry(file_tools(tree))
    assert registry.names() == ["list_directory", "read_file"]
