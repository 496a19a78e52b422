"""Per-rollout workspaces: ``Workspaces`` (a directory per rollout under one
root, created on first use, seeded, released at the rollout's end unless
kept), ``RolloutWorkspace`` (one of them, with the path confinement the
editor uses), ``WorkspaceSeed`` and ``copy_directory_seed``.

A rollout's key is its top-level rollout (sub-agent calls share their
rollout's workspace; a restarted incarnation keeps it), so the directory is
a pure function of the root and the ids: two ``Workspaces`` over the same
root (the ``shell`` and ``editor`` of one agent) see the same directory.
Must not know about sandboxes' internals, agents or the engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Final, final

import anyio
import anyio.to_thread

from agentrt.protocols._ids import RolloutId, is_top_level, top_level_id
from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import ToolContext
from agentrt.tools.sandbox._bwrap import SandboxEnvironment, sandbox_host_uid
from agentrt.tools.sandbox._workspace_owners import (
    claim,
    disown,
    remove_if_unused,
    sweep_abandoned,
)

__all__ = [
    "RolloutWorkspace",
    "WorkspaceSeed",
    "Workspaces",
    "copy_directory_seed",
    "default_workspace_root",
    "keep_run",
    "release_rollout",
    "release_run",
    "rollout_key",
    "run_directory",
    "run_seed",
]

#: Fills a fresh, empty workspace directory (the argument) before its
#: rollout sees it: a copy of a repository, a checkout, fixture files.
WorkspaceSeed = Callable[[Path], Awaitable[None]]

_log = get_logger(__name__)
_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")
#: Edits the editor can undo per file, newest last.
_UNDO_DEPTH: Final = 20


#: Seeds and environments of runs whose task brings them (``run_seed``).
_RUN_SEEDS: dict[str, tuple[WorkspaceSeed, SandboxEnvironment | None]] = {}


@contextmanager
def run_seed(
    run_id: str, seed: WorkspaceSeed, environment: SandboxEnvironment | None = None
) -> Iterator[None]:
    """While inside, a workspace of ``run_id`` that a ``Workspaces`` without
    a seed of its own creates (the ``shell`` and ``editor`` of a spec) is
    filled by ``seed``: how a coding task's repository reaches rollouts the
    task runner cannot name in advance (PDR's refinement rollouts).
    ``environment``: what the task's commands need (its virtualenv), given
    to every command run in the run's workspaces (``RolloutWorkspace.environment``)."""
    if run_id in _RUN_SEEDS:
        raise ConfigError(f"run {run_id!r} already has a workspace seed")
    _RUN_SEEDS[run_id] = (seed, environment)
    try:
        yield
    finally:
        del _RUN_SEEDS[run_id]


async def release_run(run_id: str, root: Path | None = None, *, owned: bool = False) -> None:
    """The run is over: delete its workspaces under ``root`` (default:
    ``default_workspace_root()``), those of the ``shell`` and ``editor`` of
    a spec included.  A run with a ``run_seed`` belongs to its task runner,
    which reads the workspaces after the run and releases them itself
    (``owned=True``)."""
    if run_id in _RUN_SEEDS and not owned:
        return
    path = run_directory(run_id, root)
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(_remove_run, path)


def keep_run(run_id: str, root: Path | None = None) -> Path:
    """Leave the workspaces of ``run_id`` under ``root`` (default:
    ``default_workspace_root()``) for debugging: no later start of agentrt
    sweeps them; where they are."""
    path = run_directory(run_id, root)
    disown(path)
    return path


async def release_rollout(run_id: str, rollout_id: str, root: Path | None = None) -> None:
    """The rollout is over where it ran (a Ray worker): delete its
    workspace under ``root`` (default: ``default_workspace_root()``), and
    its run's directory once empty.  Nothing for a sub-agent rollout (its
    workspace is its top-level rollout's) or a run with a ``run_seed``."""
    if run_id in _RUN_SEEDS or not is_top_level(rollout_id):
        return
    path = run_directory(run_id, root) / _safe(rollout_key(run_id, rollout_id))
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(_remove_rollout, path)


def run_directory(run_id: str, root: Path | None = None) -> Path:
    """Where the workspaces of ``run_id`` are, under ``root`` (default:
    ``default_workspace_root()``); no I/O."""
    return (root or default_workspace_root()) / _safe(run_id or "_")


def default_workspace_root() -> Path:
    """``$TMPDIR/agentrt-workspaces``: where workspaces go unless configured."""
    return Path(tempfile.gettempdir()) / "agentrt-workspaces"


def copy_directory_seed(source: Path) -> WorkspaceSeed:
    """A seed copying ``source``'s contents (symlinks as symlinks, modes and
    times kept; ``cp --reflink=auto`` shares blocks where the filesystem
    can).  ``ConfigError`` now if ``source`` is not a directory."""
    source = Path(source)
    if not source.is_dir():
        raise ConfigError(f"workspace seed {str(source)!r} is not a directory")

    async def seed(into: Path) -> None:
        done = await anyio.run_process(
            ["cp", "-a", "--reflink=auto", "--", f"{source}/.", str(into)], check=False
        )
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()
            raise ToolError(f"could not copy {str(source)!r} into the workspace: {why}")

    return seed


def _safe(part: str) -> str:
    cleaned = _SAFE.sub("_", part)[:80] or "_"
    if cleaned != part:  # keep distinct ids distinct after cleaning
        cleaned += "-" + hashlib.sha256(part.encode()).hexdigest()[:8]
    return cleaned


def rollout_key(run_id: str, rollout_id: str) -> str:
    """The rollout a workspace belongs to: the top-level rollout's slot,
    without its incarnation (a restart goes on in the same directory)."""
    top = top_level_id(rollout_id)
    if run_id:
        try:
            return RolloutId.parse(run_id, top).slot
        except ValueError:
            pass
    return top.split("~", 1)[0]


@final
@dataclass(eq=False, slots=True)
class RolloutWorkspace:
    """One rollout's directory: ``path`` on the host, shown inside the
    sandbox at ``mount``.  ``undo`` is the editor's per-file history."""

    run_id: str
    key: str
    path: Path
    mount: str
    undo: dict[str, list[bytes | None]] = field(default_factory=dict)
    environment: SandboxEnvironment | None = None
    """The task's environment for commands run here (``run_seed``)."""

    def relative(self, given: str) -> PurePosixPath:
        """``given`` (relative to the workspace, or absolute under ``mount``)
        as a normalised relative path; ``ToolError`` naming the workspace if
        it leads outside.  (Symlinks are the opener's concern.)"""
        if not given or "\x00" in given:
            raise ToolError(f"invalid path {given!r}")
        path = PurePosixPath(given)
        if path.is_absolute():
            mount = PurePosixPath(self.mount)
            if path != mount and mount not in path.parents:
                raise ToolError(
                    f"path {given!r} is outside the workspace; use a path under {self.mount} "
                    "or one relative to it"
                )
            path = path.relative_to(mount)
        parts: list[str] = []
        for part in path.parts:
            if part == "..":
                if not parts:
                    raise ToolError(
                        f"path {given!r} is outside the workspace ({self.mount}); "
                        "'..' may not leave it"
                    )
                parts.pop()
            elif part not in (".", ""):
                parts.append(part)
        return PurePosixPath(*parts) if parts else PurePosixPath(".")

    def shown(self, relative: PurePosixPath) -> str:
        """How the sandbox names ``relative``."""
        return str(PurePosixPath(self.mount) / relative)

    def remember(self, relative: PurePosixPath, previous: bytes | None) -> None:
        """Record a file's content before an edit (``None``: it did not exist)."""
        history = self.undo.setdefault(str(relative), [])
        history.append(previous)
        del history[:-_UNDO_DEPTH]


@final
class Workspaces:
    """The workspaces of rollouts, one directory each under ``root``.

    ::

        async with Workspaces(root, seed=copy_directory_seed(repo)) as spaces:
            tools = [ShellTool(spaces), EditorTool(spaces)]
            ...  # each rollout's calls land in its own copy of ``repo``
            await spaces.release(run_id, rollout_id)  # at the rollout's end

    ``get`` creates a rollout's directory on first use: ``seed`` fills a
    staging directory, which is then renamed into place (so concurrent first
    uses, even from two ``Workspaces`` over one root, agree), and handed to
    the sandbox's user (chowned when agentrt runs as root).  ``release``
    deletes it unless ``keep`` (for debugging; ``path_of`` says
    where).  Leaving the ``async with`` releases what this object
    created and is still there.
    """

    __slots__ = ("_closed", "_keep", "_lock", "_mount", "_root", "_seed", "_spaces")

    def __init__(
        self,
        root: Path | None = None,
        *,
        seed: WorkspaceSeed | None = None,
        keep: bool = False,
        mount: str = "/workspace",
    ) -> None:
        self._root = Path(root) if root is not None else default_workspace_root()
        self._seed = seed
        self._keep = keep
        self._mount = mount
        self._spaces: dict[tuple[str, str], RolloutWorkspace] = {}
        self._lock = anyio.Lock()
        self._closed = False

    @property
    def root(self) -> Path:
        return self._root

    @property
    def mount(self) -> str:
        """Where the sandbox shows a workspace (``SandboxConfig.workspace_mount``)."""
        return self._mount

    def path_of(self, run_id: str, rollout_id: str) -> Path:
        """The directory of ``rollout_id``'s workspace (no I/O)."""
        return self._path(run_id, rollout_key(run_id, rollout_id))

    def _path(self, run_id: str, key: str) -> Path:
        return run_directory(run_id, self._root) / _safe(key)

    async def for_call(self, context: ToolContext) -> RolloutWorkspace:
        """The workspace of the rollout making this call; ``ToolError`` when
        the call belongs to no rollout."""
        if not context.rollout_id:
            raise ToolError(
                "this tool works in a rollout's workspace, and the call names no rollout "
                "(ToolContext.rollout_id is empty)"
            )
        return await self.get(context.run_id, context.rollout_id)

    async def get(self, run_id: str, rollout_id: str) -> RolloutWorkspace:
        """``rollout_id``'s workspace, created (and seeded) on first use."""
        if self._closed:
            raise ToolError("the workspaces were closed")
        key = (run_id, rollout_key(run_id, rollout_id))
        space = self._spaces.get(key)
        if space is not None and space.path.is_dir():
            return space
        async with self._lock:
            space = self._spaces.get(key)
            if space is None or not space.path.is_dir():
                path = self._path(*key)
                run_seeded, environment = _RUN_SEEDS.get(run_id, (None, None))
                if not path.is_dir():
                    await self._create(path, self._seed or run_seeded)
                space = RolloutWorkspace(
                    run_id=run_id,
                    key=key[1],
                    path=path,
                    mount=self._mount,
                    environment=environment,
                )
                self._spaces[key] = space
        return space

    async def _create(self, path: Path, seed: WorkspaceSeed | None) -> None:
        staging = await anyio.to_thread.run_sync(_staging_in, path.parent)
        try:
            if seed is not None:
                await seed(staging)
            await anyio.to_thread.run_sync(_hand_over, staging)
            await anyio.to_thread.run_sync(_install, staging, path)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_remove, staging)

    async def release(self, run_id: str, rollout_id: str) -> None:
        """The rollout is over: delete its workspace, unless ``keep``."""
        await self._release(run_id, rollout_key(run_id, rollout_id))

    async def _release(self, run_id: str, key: str) -> None:
        self._spaces.pop((run_id, key), None)
        if self._keep:
            disown(self._path(run_id, key).parent)  # kept: not swept when this process ends
        else:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_remove_rollout, self._path(run_id, key))

    async def aclose(self) -> None:
        """Release every workspace this object created (unless ``keep``)."""
        self._closed = True
        for run_id, key in list(self._spaces):
            await self._release(run_id, key)

    async def __aenter__(self) -> Workspaces:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


#: Roots this process has swept of dead processes' workspaces.
_SWEPT: set[Path] = set()


def _make_parent(parent: Path) -> None:
    # The root and run directories must be traversable by the sandbox's
    # host user (bwrap opens the workspace as that user), not listable.
    parent.parent.mkdir(mode=0o711, exist_ok=True)
    if parent.parent not in _SWEPT:  # once per root: what died with its process
        _SWEPT.add(parent.parent)
        for swept in sweep_abandoned(parent.parent):
            _log.info("workspaces.swept", path=str(swept), why="every owner process died")
    parent.mkdir(mode=0o711, exist_ok=True)
    claim(parent)
    uid = sandbox_host_uid()
    if uid == os.geteuid():
        return
    for directory in (parent, *parent.parents):
        info = directory.stat()
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            raise ConfigError(
                f"the sandbox's user (uid {uid}) cannot reach the workspace root "
                f"{str(parent.parent)!r}: {str(directory)!r} is not searchable by others "
                "(chmod o+x it, or choose another root)"
            )


def _staging_in(parent: Path) -> Path:
    """A fresh directory in ``parent`` (made if needed: a release of the
    run's last other workspace may remove it in between)."""
    for _ in range(3):
        _make_parent(parent)
        with contextlib.suppress(FileNotFoundError):
            return Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))
    return Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))


def _install(staging: Path, path: Path) -> None:
    try:
        os.rename(staging, path)
    except OSError:
        if not path.is_dir():  # not a lost race with another first use: a real failure
            raise


def _hand_over(path: Path) -> None:
    """Make ``path`` and everything in it the sandbox user's."""
    uid = sandbox_host_uid()
    os.chmod(path, 0o700)  # the sandbox's user only: no other local user reads it
    if uid == os.geteuid():
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    for top, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), uid, uid, follow_symlinks=False)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _remove_run(path: Path) -> None:
    _remove(path)
    disown(path)


def _remove_rollout(path: Path) -> None:
    """Delete a rollout's workspace, and its run's directory once no
    workspace is left there."""
    _remove(path)
    remove_if_unused(path.parent)
