"""The ``editor`` tool: view (with line numbers), create, str_replace (the
old text must occur exactly once), insert and undo, on files of the calling
rollout's workspace.

Files are opened one directory at a time without following symlinks, so a
symlink planted from the shell cannot lead an edit outside the workspace.
Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any, Final, final

import anyio.to_thread

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._tool import ToolContext, ToolOutput
from agentrt.tools.sandbox._bwrap import sandbox_host_uid
from agentrt.tools.sandbox._workspaces import RolloutWorkspace, Workspaces

__all__ = ["EditorTool"]

_COMMANDS: Final = ("view", "create", "str_replace", "insert", "undo")
#: Largest file the editor reads or writes.
_MAX_FILE_BYTES: Final = 4 * 1024 * 1024
#: Entries listed when viewing a directory.
_MAX_LISTED: Final = 400


def _schema() -> dict[str, Any]:
    text = {"type": "string"}
    return {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "enum": list(_COMMANDS),
                "description": "view | create | str_replace | insert | undo",
            },
            "path": {
                "type": "string",
                "description": "A file or directory in the workspace (relative, or absolute "
                "under the workspace).",
            },
            "file_text": {**text, "description": "create: the whole content of the file."},
            "old_str": {
                **text,
                "description": "str_replace: text that occurs exactly once in the file.",
            },
            "new_str": {
                **text,
                "description": "str_replace: the replacement; insert: the text to insert.",
            },
            "insert_line": {
                "type": "integer",
                "minimum": 0,
                "description": "insert: the line after which to insert (0: at the top).",
            },
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 2,
                "maxItems": 2,
                "description": "view: [first, last] line (1-based; last -1: to the end).",
            },
        },
        "required": ["command", "path"],
        "additionalProperties": False,
    }


class _Missing(ToolError):
    """A directory on the way does not exist."""


class _NotDirectory(ToolError):
    """A component on the way is a symlink or a file."""


@contextlib.contextmanager
def _directory(space: RolloutWorkspace, parts: tuple[str, ...], *, create: bool) -> Iterator[int]:
    """An fd of the workspace directory ``parts``, walked without following
    symlinks (``create``: making missing directories)."""
    fd = os.open(space.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walked = PurePosixPath(".")
        for part in parts:
            walked /= part
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise _Missing(f"{space.shown(walked)} does not exist") from None
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                _own(child)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _NotDirectory(
                        f"{space.shown(walked)} is a symlink or not a directory; the editor "
                        "does not follow symlinks"
                    ) from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _own(fd: int) -> None:
    uid = sandbox_host_uid()
    if uid != os.geteuid():
        os.fchown(fd, uid, uid)


def _read(space: RolloutWorkspace, rel: PurePosixPath) -> bytes | None:
    """The file's bytes, ``None`` if it does not exist."""
    with contextlib.ExitStack() as stack:
        try:
            parent = stack.enter_context(_directory(space, rel.parent.parts, create=False))
        except _Missing:
            return None
        try:
            fd = os.open(rel.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolError(
                    f"{space.shown(rel)} is a symlink; the editor does not follow symlinks"
                ) from None
            raise
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{space.shown(rel)} is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{space.shown(rel)} is not a regular file")
            if info.st_size > _MAX_FILE_BYTES:
                raise ToolError(
                    f"{space.shown(rel)} is {info.st_size} bytes; the editor handles files up "
                    f"to {_MAX_FILE_BYTES} (use the shell for larger ones)"
                )
            return f.read(_MAX_FILE_BYTES + 1)


def _write(space: RolloutWorkspace, rel: PurePosixPath, data: bytes | None) -> None:
    """Write ``data`` to the file (``None``: delete it)."""
    if len(data or b"") > _MAX_FILE_BYTES:
        raise ToolError(f"the new content is over {_MAX_FILE_BYTES} bytes")
    with _directory(space, rel.parent.parts, create=data is not None) as parent:
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(rel.name, dir_fd=parent)
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(rel.name, flags, 0o644, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolError(
                    f"{space.shown(rel)} is a symlink; the editor does not follow symlinks"
                ) from None
            if exc.errno == errno.EISDIR:
                raise ToolError(f"{space.shown(rel)} is a directory") from None
            raise
        with os.fdopen(fd, "wb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ToolError(f"{space.shown(rel)} is not a regular file")
            _own(f.fileno())
            f.write(data)


def _listing(space: RolloutWorkspace, rel: PurePosixPath) -> str | None:
    """A two-level listing if ``rel`` is a directory, else ``None``."""
    try:
        with _directory(space, rel.parts, create=False) as fd:
            lines: list[str] = []
            _list_into(fd, PurePosixPath(space.shown(rel)), 2, lines)
    except (_Missing, _NotDirectory):
        return None
    if len(lines) > _MAX_LISTED:
        lines = [*lines[:_MAX_LISTED], f"[... {len(lines) - _MAX_LISTED} more entries ...]"]
    return "\n".join([f"Files and directories in {space.shown(rel)} (2 levels):", *lines])


def _list_into(fd: int, shown: PurePosixPath, depth: int, lines: list[str]) -> None:
    for entry in sorted(os.scandir(fd), key=lambda e: e.name):
        if entry.name.startswith(".") or len(lines) > _MAX_LISTED:
            continue
        is_dir = entry.is_dir(follow_symlinks=False)
        lines.append(f"{shown / entry.name}{'/' if is_dir else ''}")
        if is_dir and depth > 1:
            child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                _list_into(child, shown / entry.name, depth - 1, lines)
            finally:
                os.close(child)


def _text(data: bytes) -> str:
    """A file's bytes as text to edit: bytes that are not UTF-8 (a Latin-1
    file) become lone surrogates, which ``_bytes`` turns back into the same
    bytes, so an edit changes only what it replaces."""
    return data.decode("utf-8", errors="surrogateescape")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _numbered(text: str, first: int = 1) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), start=first))


@final
class EditorTool:
    """``editor``: ``{"command": "str_replace", "path": "src/app.py",
    "old_str": ..., "new_str": ...}`` and ``view``/``create``/``insert``/
    ``undo``, on the calling rollout's workspace (``workspaces.for_call``).
    A path outside the workspace, through a symlink, a missing or repeated
    ``old_str``: a ``ToolError`` saying so, and the file is left as it was.
    ``max_view_chars`` caps what one view returns."""

    __slots__ = ("_max_view", "_spec", "_workspaces")

    def __init__(
        self, workspaces: Workspaces, *, name: str = "editor", max_view_chars: int = 24_000
    ) -> None:
        self._workspaces = workspaces
        self._max_view = max_view_chars
        self._spec = ToolSpec(
            name=name,
            description=(
                f"View and edit files of the task's workspace ({workspaces.mount}). "
                "view: a file with line numbers (optionally view_range) or a directory's "
                "listing; create: write file_text to a new or existing file; str_replace: "
                "replace old_str, which must occur exactly once, by new_str; insert: "
                "new_str after line insert_line; undo: revert the last edit of path."
            ),
            parameters=_schema(),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        command = arguments.get("command")
        if command not in _COMMANDS:
            raise ToolError(f"unknown command {command!r}; one of: {', '.join(_COMMANDS)}")
        path = arguments.get("path")
        if not isinstance(path, str):
            raise ToolError("`path` must be a string")
        space = await self._workspaces.for_call(context)
        rel = space.relative(path)
        text = await anyio.to_thread.run_sync(self._run, space, rel, str(command), arguments)
        return ToolOutput.of_text(text)

    def _run(
        self,
        space: RolloutWorkspace,
        rel: PurePosixPath,
        command: str,
        args: Mapping[str, Any],
    ) -> str:
        if command == "view":
            return self._view(space, rel, args.get("view_range"))
        if rel == PurePosixPath("."):
            raise ToolError(f"{command} needs a file path, not the workspace itself")
        if command == "undo":
            return _undo(space, rel)
        before = _read(space, rel)
        shown = space.shown(rel)
        if command == "create":
            content = _required(args, "file_text")
            _write(space, rel, content.encode())
            space.remember(rel, before)
            verb = "Overwrote" if before is not None else "Created"
            return f"{verb} {shown} ({len(content.splitlines())} lines)."
        if before is None:
            raise ToolError(f"{shown} does not exist (create it first)")
        old = _text(before)
        if command == "str_replace":
            new, first = _replace(old, args, shown)
        else:
            new, first = _insert(old, args, shown)
        _write(space, rel, _bytes(new))
        space.remember(rel, before)
        shown_text = _bytes(new).decode("utf-8", errors="replace")  # no lone surrogates out
        return f"Edited {shown}. The changed region now reads:\n" + self._snippet(shown_text, first)

    def _snippet(self, text: str, first: int, context: int = 4) -> str:
        lines = text.split("\n")
        start = max(1, first - context)
        end = min(len(lines), first + context + 8)
        return _numbered("\n".join(lines[start - 1 : end]), start)

    def _view(self, space: RolloutWorkspace, rel: PurePosixPath, window: Any) -> str:
        listing = _listing(space, rel)
        if listing is not None:
            if window is not None:
                raise ToolError("view_range applies to files, not directories")
            return listing
        data = _read(space, rel)
        shown = space.shown(rel)
        if data is None:
            raise ToolError(f"{shown} does not exist")
        lines = data.decode("utf-8", errors="replace").split("\n")
        first, last = 1, len(lines)
        if window is not None:
            if (
                not isinstance(window, list | tuple)
                or len(window) != 2
                or not all(isinstance(n, int) for n in window)
            ):
                raise ToolError("`view_range` must be two integers [first, last]")
            first, last = int(window[0]), int(window[1])
            last = len(lines) if last == -1 else last
            if not 1 <= first <= last <= len(lines):
                raise ToolError(
                    f"view_range {list(window)} is outside {shown}'s {len(lines)} lines"
                )
        body = _numbered("\n".join(lines[first - 1 : last]), first)
        if len(body) > self._max_view:
            half = self._max_view // 2
            body = (
                f"{body[:half]}\n[... {len(body) - 2 * half} characters omitted; view a "
                f"smaller view_range ...]\n{body[-half:]}"
            )
        return f"{shown} (lines {first}-{last} of {len(lines)}):\n{body}"


def _undo(space: RolloutWorkspace, rel: PurePosixPath) -> str:
    shown = space.shown(rel)
    history = space.undo.get(str(rel))
    if not history:
        raise ToolError(f"no edit of {shown} to undo")
    previous = history.pop()
    _write(space, rel, previous)
    if previous is None:
        return (
            f"Undid the last edit of {shown} (the file did not exist before it, so it was removed)."
        )
    return f"Undid the last edit of {shown}."


def _replace(old: str, args: Mapping[str, Any], shown: str) -> tuple[str, int]:
    """``old`` with the one occurrence of ``old_str`` replaced, and the
    line the change starts on."""
    target = _required(args, "old_str")
    if not target:
        raise ToolError("`old_str` must not be empty")
    replacement = args.get("new_str", "")
    if not isinstance(replacement, str):
        raise ToolError("`new_str` must be a string")
    count = old.count(target)
    if count == 0:
        raise ToolError(f"old_str was not found in {shown}; nothing was changed")
    if count > 1:
        raise ToolError(
            f"old_str occurs {count} times in {shown} (lines {_occurrence_lines(old, target)}); "
            "include more context so it occurs exactly once. Nothing was changed."
        )
    at = old.index(target)
    return old[:at] + replacement + old[at + len(target) :], old.count("\n", 0, at) + 1


def _insert(old: str, args: Mapping[str, Any], shown: str) -> tuple[str, int]:
    """``old`` with ``new_str`` after line ``insert_line``, and the first new line."""
    line = args.get("insert_line")
    added = _required(args, "new_str")
    lines = old.split("\n")
    if not isinstance(line, int) or isinstance(line, bool) or line < 0:
        raise ToolError("`insert_line` must be an integer >= 0")
    if line > len(lines):
        raise ToolError(f"insert_line {line} is past the end of {shown} ({len(lines)} lines)")
    new_lines = added.removesuffix("\n").split("\n")
    return "\n".join([*lines[:line], *new_lines, *lines[line:]]), line + 1


def _required(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise ToolError(f"`{key}` is required (a string) for this command")
    return value


def _occurrence_lines(text: str, target: str) -> str:
    found: list[str] = []
    start = text.find(target)
    while start != -1 and len(found) < 10:
        found.append(str(text.count("\n", 0, start) + 1))
        start = text.find(target, start + 1)
    return ", ".join(found)
