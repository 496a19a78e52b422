"""Reading files confined to a root directory: ``FileRoot`` (path confinement)
and the ``read_file`` and ``list_directory`` tools.  File I/O runs in a
worker thread.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, final

import anyio.to_thread
from pydantic import Field

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.tools._function import FunctionTool
from agentrt.tools._tool import Tool, ToolContext, ToolOutput

__all__ = ["FileRoot", "ListDirectoryTool", "ReadFileTool", "file_tools"]

#: How much of a file is sniffed for NUL bytes to call it binary.
_SNIFF_BYTES: Final = 8192


@final
class FileRoot:
    """A directory that paths are confined to."""

    __slots__ = ("_root",)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root)
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise ConfigError(
                f"the root directory cannot be opened: {exc}", where=str(root)
            ) from exc
        if not resolved.is_dir():
            raise ConfigError("the root is not a directory", where=str(root))
        self._root = resolved

    @property
    def path(self) -> Path:
        """The resolved root."""
        return self._root

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative to the root; an absolute path
        must lie inside it), ``..`` and symlinks followed, refusing any real
        path outside the root.  Raises ``ToolError``."""
        if "\x00" in path:
            raise ToolError(f"path {path!r} contains a NUL byte")
        requested = Path(path)
        candidate = requested if requested.is_absolute() else self._root / requested
        try:
            real = candidate.resolve(strict=False)
        except (OSError, RuntimeError) as exc:
            raise ToolError(f"path '{path}' cannot be resolved: {exc}") from None
        if real == self._root or real.is_relative_to(self._root):
            return real
        lexical = Path(os.path.normpath(candidate))
        if lexical == self._root or lexical.is_relative_to(self._root):
            raise ToolError(f"path '{path}' is a symlink to a place outside the allowed directory")
        raise ToolError(
            f"path '{path}' is outside the allowed directory; use a path relative to it"
        )

    def relative(self, real: Path) -> str:
        """``real`` as the model should name it (relative to the root)."""
        rel = real.relative_to(self._root).as_posix()
        return rel or "."

    def open_confined(self, path: str) -> tuple[int, Path]:
        """Open ``path`` read-only after confinement; returns the descriptor
        (the caller closes it) and the real path.  The last component is
        opened with ``O_NOFOLLOW`` and, where ``/proc`` exists, the
        descriptor's real path is checked again, so a symlink swapped in
        after the check leaks nothing."""
        real = self.resolve(path)
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is then
        # refused as not a regular file); it changes nothing for files.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(real, flags)
        except FileNotFoundError:
            raise ToolError(f"'{path}' does not exist") from None
        except OSError as exc:
            raise ToolError(f"'{path}' cannot be opened: {exc.strerror}") from None
        try:
            opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            opened = real  # no /proc: the resolve check stands alone
        if not (opened == self._root or opened.is_relative_to(self._root)):
            os.close(fd)
            raise ToolError(f"path '{path}' changed to a place outside the allowed directory")
        return fd, real


def _read(
    root: FileRoot, path: str, start_line: int | None, end_line: int | None, max_bytes: int
) -> str:
    try:
        return _read_confined(root, path, start_line, end_line, max_bytes)
    except OSError as exc:
        raise ToolError(f"'{path}' cannot be read: {exc.strerror or exc}") from None


def _read_confined(
    root: FileRoot, path: str, start_line: int | None, end_line: int | None, max_bytes: int
) -> str:
    fd, real = root.open_confined(path)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"'{path}' is a directory; use list_directory")
        raise ToolError(f"'{path}' is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if b"\x00" in f.read(_SNIFF_BYTES):
            raise ToolError(f"'{path}' looks like a binary file (it contains NUL bytes)")
        f.seek(0)
        first = start_line or 1
        lines: list[bytes] = []
        size = 0
        number = 0
        note = ""
        resume = 0
        for number, line in enumerate(f, start=1):
            if number < first:
                continue
            if end_line is not None and number > end_line:
                break
            if size + len(line) > max_bytes:
                resume = number
                if lines:
                    note = f"showed lines {first}-{number - 1}"
                else:  # one line longer than a whole read: show its start
                    lines.append(line[:max_bytes])
                    note = (
                        f"line {number} alone exceeds the limit; showed its first {max_bytes} bytes"
                    )
                    resume = number + 1
                break
            lines.append(line)
            size += len(line)
    if not lines and first > 1:
        raise ToolError(f"'{path}' has {number} lines; start_line {first} is past the end")
    text = b"".join(lines).decode("utf-8", errors="replace")
    if note:
        text += (
            f"\n[truncated: {note} of '{root.relative(real)}' ({info.st_size} bytes); the limit "
            f"is {max_bytes} bytes per read; continue with start_line={resume}]"
        )
    return text


def _list(root: FileRoot, path: str, max_entries: int) -> str:
    real = root.resolve(path)
    if not real.is_dir():
        raise ToolError(
            f"'{path}' is not a directory" if real.exists() else f"'{path}' does not exist"
        )
    try:
        with os.scandir(real) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise ToolError(f"'{path}' cannot be listed: {exc.strerror}") from None
    lines: list[str] = []
    for entry in entries[:max_entries]:
        if entry.is_symlink():
            try:
                target = root.relative(root.resolve(os.path.join(path, entry.name)))
            except ToolError:
                target = "(outside the allowed directory)"
            lines.append(f"{entry.name} -> {target}")
        elif entry.is_dir():
            lines.append(f"{entry.name}/")
        else:
            try:
                lines.append(f"{entry.name} ({entry.stat().st_size} bytes)")
            except OSError:
                lines.append(entry.name)
    if len(entries) > max_entries:
        lines.append(f"[... {len(entries) - max_entries} more entries not shown]")
    return "\n".join(lines) if lines else "(empty directory)"


class _FileTool:
    """What the file tools share: the root they are confined to and the
    function tool that offers them to the model."""

    __slots__ = ("_root", "_tool")

    _tool: FunctionTool[..., Any]

    def __init__(self, root: str | os.PathLike[str] | FileRoot) -> None:
        self._root = root if isinstance(root, FileRoot) else FileRoot(root)

    @property
    def root(self) -> FileRoot:
        return self._root

    @property
    def spec(self) -> ToolSpec:
        """Name, description and JSON schema offered to the model."""
        return self._tool.spec


@final
class ReadFileTool(_FileTool):
    """The ``read_file`` tool: a text file under the root, whole or a line
    range, at most ``max_bytes`` per read (a longer file is cut at a line
    boundary with a note on reading on with ``start_line``/``end_line``).
    Binary files are refused."""

    __slots__ = ("_max_bytes",)

    def __init__(
        self,
        root: str | os.PathLike[str] | FileRoot,
        *,
        max_bytes: int = 256 * 1024,
        name: str = "read_file",
    ) -> None:
        super().__init__(root)
        self._max_bytes = max_bytes
        self._tool = FunctionTool.from_callable(
            self._read,
            name=name,
            description=(
                "Read a text file. Paths are relative to the workspace root. Reads at most "
                f"{max_bytes} bytes; use start_line/end_line (1-based, inclusive) for "
                "parts of longer files."
            ),
        )

    async def _read(
        self,
        path: Annotated[str, Field(description="File path relative to the root.")],
        start_line: Annotated[int | None, Field(ge=1, description="First line to read.")] = None,
        end_line: Annotated[int | None, Field(ge=1, description="Last line to read.")] = None,
    ) -> str:
        if start_line is not None and end_line is not None and end_line < start_line:
            raise ToolError(f"end_line ({end_line}) is before start_line ({start_line})")
        return await anyio.to_thread.run_sync(
            _read, self._root, path, start_line, end_line, self._max_bytes
        )

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Read ``arguments["path"]``; a refused path is an error output."""
        return await self._tool.call(arguments, context)


@final
class ListDirectoryTool(_FileTool):
    """The ``list_directory`` tool: a directory under the root, sorted by
    name, directories marked with ``/``, files with their size."""

    __slots__ = ("_max_entries",)

    def __init__(
        self,
        root: str | os.PathLike[str] | FileRoot,
        *,
        max_entries: int = 500,
        name: str = "list_directory",
    ) -> None:
        super().__init__(root)
        self._max_entries = max_entries
        self._tool = FunctionTool.from_callable(
            self._list,
            name=name,
            description=(
                "List a directory. Paths are relative to the workspace root; '.' is the root."
            ),
        )

    async def _list(
        self, path: Annotated[str, Field(description="Directory relative to the root.")] = "."
    ) -> str:
        return await anyio.to_thread.run_sync(_list, self._root, path, self._max_entries)

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """List ``arguments["path"]``; a refused path is an error output."""
        return await self._tool.call(arguments, context)


def file_tools(
    root: str | os.PathLike[str], *, max_bytes: int = 256 * 1024, max_entries: int = 500
) -> list[Tool]:
    """``read_file`` and ``list_directory`` over one root."""
    confined = FileRoot(root)
    return [
        ReadFileTool(confined, max_bytes=max_bytes),
        ListDirectoryTool(confined, max_entries=max_entries),
    ]
