"""Task repositories of coding tasks: ``TaskRepository`` (a local clone at a
base commit, turned once into a one-commit snapshot that every rollout's
workspace is copied from), ``workspace_diff`` (a rollout's answer: its
workspace against the base, new files included), ``apply_patch`` and
``TaskRepositoryError``.

git runs on the user's clone from this process, but never on a rollout's
workspace: a rollout can rewrite its ``.git/config`` (``core.fsmonitor``
runs a command), so the diff and the patch run inside the sandbox.  Must
not know about agents, aggregators or the SWE-bench file format.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final, final

import anyio
import anyio.to_thread

from agentrt.runtime.kernel._errors import RuntimeFailure
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig
from agentrt.tools.sandbox._workspaces import WorkspaceSeed, copy_directory_seed

__all__ = [
    "BASE_REF",
    "TaskRepository",
    "TaskRepositoryError",
    "apply_patch",
    "workspace_diff",
]

#: The branch the snapshot's one commit is on; diffs are taken against it.
BASE_REF: Final = "agentrt-base"
#: What a diff never includes (test caches, bytecode, build metadata).
_EXCLUDE: Final = ".pytest_cache/\n__pycache__/\n*.pyc\n*.egg-info/\n.mypy_cache/\n"
_IDENTITY: Final = ("-c", "user.name=agentrt", "-c", "user.email=agentrt@localhost")
#: git settings for every git this module runs: no hooks, no fsmonitor, no pager.
_SAFE_GIT: Final = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "safe.directory=*",
    *_IDENTITY,
)
_GIT_TIMEOUT_S: Final = 120.0


class TaskRepositoryError(RuntimeFailure):
    """A task's repository cannot be prepared (missing, not a git
    repository, no such base commit) or a workspace cannot be read back.
    A per-task failure: the task's rollouts record it and the run goes on."""


async def _git(*args: str, cwd: Path | None = None) -> str:
    with anyio.fail_after(_GIT_TIMEOUT_S):
        done = await anyio.run_process(
            ["git", *_SAFE_GIT, *args],
            cwd=cwd,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"},
        )
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise TaskRepositoryError(f"git {' '.join(args[:2])} failed: {why}")
    return done.stdout.decode(errors="replace").strip()


@final
class TaskRepository:
    """A task's repository: the clone at ``source`` checked out at ``base_commit``.

    ::

        repo = TaskRepository(Path("repos/pallets__click"), "2e9f1b0", cache=Path("cache"))
        snapshot = await repo.prepare()          # once per task (cached across runs)
        async with Workspaces(seed=repo.seed()) as spaces: ...

    ``prepare`` checks the clone and the commit (``TaskRepositoryError``
    naming the task, the path and the commit otherwise) and writes the
    commit's tree as a fresh repository with one commit on ``BASE_REF``
    under ``cache``: small to copy (no history), and the same files a
    patch against ``base_commit`` applies to.  ``seed`` copies that snapshot
    into a workspace (``cp --reflink=auto``: copy-on-write where the
    filesystem can)."""

    __slots__ = ("_lock", "_snapshot", "base_commit", "cache", "source", "task_id")

    def __init__(self, source: Path, base_commit: str, *, cache: Path, task_id: str = "") -> None:
        self.source = Path(source)
        self.base_commit = base_commit
        self.cache = Path(cache)
        self.task_id = task_id
        self._snapshot: Path | None = None
        self._lock = anyio.Lock()

    def _where(self) -> str:
        task = f"task {self.task_id!r}: " if self.task_id else ""
        return f"{task}repository {str(self.source)!r}"

    async def prepare(self) -> Path:
        """The snapshot's directory, made on first use."""
        async with self._lock:
            if self._snapshot is None:
                self._snapshot = await self._prepare()
            return self._snapshot

    async def _prepare(self) -> Path:
        if not self.source.is_dir():
            raise TaskRepositoryError(
                f"{self._where()} does not exist (give the directory of clones that holds it)"
            )
        if not (self.source / ".git").exists():
            raise TaskRepositoryError(f"{self._where()} is not a git repository (no .git)")
        if not self.base_commit or self.base_commit.startswith("-"):
            raise TaskRepositoryError(f"{self._where()}: invalid base commit {self.base_commit!r}")
        try:
            sha = await _git(
                "rev-parse",
                "--verify",
                "--quiet",
                f"{self.base_commit}^{{commit}}",
                cwd=self.source,
            )
        except TaskRepositoryError:
            raise TaskRepositoryError(
                f"{self._where()} has no commit {self.base_commit!r} (fetch it into the clone)"
            ) from None
        key = hashlib.sha256(str(self.source.resolve()).encode()).hexdigest()[:10]
        path = self.cache / f"{self.source.name}-{sha[:12]}-{key}"
        if (path / ".git" / "info" / "agentrt-base").is_file():
            return path
        await anyio.to_thread.run_sync(_make_dirs, self.cache)
        staging = Path(
            await anyio.to_thread.run_sync(
                lambda: tempfile.mkdtemp(prefix=".snapshot-", dir=self.cache)
            )
        )
        try:
            archive = staging / ".archive.tar"
            await _git("archive", "--format=tar", "-o", str(archive), sha, cwd=self.source)
            tree = staging / "tree"
            tree.mkdir()
            with anyio.fail_after(_GIT_TIMEOUT_S):
                await anyio.run_process(["tar", "-xf", str(archive), "-C", str(tree)])
            await _git("init", "-q", "-b", BASE_REF, cwd=tree)
            (tree / ".git" / "info").mkdir(parents=True, exist_ok=True)
            (tree / ".git" / "info" / "exclude").write_text(_EXCLUDE)
            await _git("add", "-A", "-f", ".", cwd=tree)
            await _git(
                "commit", "-q", "--no-verify", "--allow-empty", "-m", f"base {sha}", cwd=tree
            )
            (tree / ".git" / "info" / "agentrt-base").write_text(sha + "\n")
            await anyio.to_thread.run_sync(_install, tree, path)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, staging, True)
        return path

    def seed(self) -> WorkspaceSeed:
        """A workspace seed copying the snapshot (prepared on first use)."""

        async def seed(into: Path) -> None:
            await copy_directory_seed(await self.prepare())(into)

        return seed


def _make_dirs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o755)  # noqa: S103 (the sandbox's user copies from it)


def _install(tree: Path, path: Path) -> None:
    try:
        os.rename(tree, path)
    except OSError:
        if not (path / ".git" / "info" / "agentrt-base").is_file():
            raise


def _git_in_sandbox(script: str) -> list[str]:
    return ["bash", "-c", script]


#: The diff of a workspace, written by the sandbox as text: a file that is
#: not UTF-8 on either side (a Latin-1 source) goes in as a binary patch, so
#: that the answer applies byte for byte; no textconv or external diff.
_DIFF: Final = (
    "set -e; "
    "if [ ! -d .git ]; then echo 'the workspace has no .git any more' >&2; exit 3; fi; "
    "G='git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.pager=cat'; "
    "$G add -A . >/dev/null; "
    "utf8() { iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1; }; "
    f"$G diff --cached --name-only -z {BASE_REF} | while IFS= read -r -d '' f; do "
    f'  if {{ [ -f "$f" ] && ! utf8 < "$f"; }} || '
    f'     {{ $G cat-file -e {BASE_REF}:"$f" 2>/dev/null && '
    f'        ! $G cat-file blob {BASE_REF}:"$f" | utf8; }}; then '
    "    printf '/%s -diff\\n' \"$f\" >> .git/info/attributes; fi; "
    "done; "
    "$G diff --cached --binary --no-color --no-ext-diff --no-textconv --no-renames "
    f"{BASE_REF}"
)


async def workspace_diff(workspace: Path, *, sandbox: Sandbox | None = None) -> str:
    """The rollout's change: ``git diff`` of ``workspace`` against the base
    (new files included, ignored and cache files not), run in the sandbox.
    ``TaskRepositoryError`` when git fails there (say the rollout deleted
    ``.git``) or the diff is longer than the sandbox's output limit."""
    sandbox = sandbox or Sandbox(SandboxConfig(timeout_s=60, max_output_bytes=8 * 1024 * 1024))
    result = await sandbox.run(_git_in_sandbox(_DIFF), workspace=workspace)
    if not result.ok:
        why = result.stderr.strip() or ("timed out" if result.timed_out else "failed")
        raise TaskRepositoryError(f"could not read the workspace's diff: {why}")
    if result.stdout_truncated:
        raise TaskRepositoryError(
            "the workspace's diff is longer than the sandbox's output limit "
            f"({sandbox.config.max_output_bytes} bytes)"
        )
    return result.stdout


async def apply_patch(workspace: Path, patch: str, *, sandbox: Sandbox | None = None) -> None:
    """Apply ``patch`` (a unified diff, as ``workspace_diff`` writes) to
    ``workspace`` in the sandbox; ``TaskRepositoryError`` with git's reason
    when it does not apply (nothing is changed then)."""
    if not patch.strip():
        return
    sandbox = sandbox or Sandbox(SandboxConfig(timeout_s=60))
    result = await sandbox.run(
        ["git", "-c", "core.hooksPath=/dev/null", "apply", "--whitespace=nowarn", "-"],
        workspace=workspace,
        stdin=patch.encode() if patch.endswith("\n") else (patch + "\n").encode(),
    )
    if not result.ok:
        why = result.stderr.strip() or ("timed out" if result.timed_out else "failed")
        raise TaskRepositoryError(f"the patch does not apply: {why}")
