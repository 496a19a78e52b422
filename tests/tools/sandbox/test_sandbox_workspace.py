"""Per-rollout workspaces: one directory per top-level rollout, created and
seeded once on first use (also when two ``Workspaces`` race for it), handed
to the sandbox's user, released (or kept) at the rollout's end."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools import RolloutWorkspace, ToolContext, Workspaces, copy_directory_seed
from agentrt.tools.sandbox._bwrap import sandbox_host_uid
from agentrt.tools.sandbox._workspaces import release_rollout, rollout_key, run_seed


def _repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (root / "README").write_text("a repo\n")
    (root / "link").symlink_to("README")
    return root


def test_the_key_is_the_top_level_rollout_without_its_incarnation() -> None:
    assert rollout_key("run7", "run7-3") == "3"
    assert rollout_key("run7", "run7-3~2") == "3"
    assert rollout_key("run7", "run7-3.coder-1.tester-2") == "3"
    assert rollout_key("", "adhoc") == "adhoc"


@pytest.mark.anyio
async def test_seeded_once_and_private_to_each_rollout(open_dir: Path) -> None:
    repo = _repo(open_dir / "repo")
    seeded: list[Path] = []
    copy = copy_directory_seed(repo)

    async def seed(into: Path) -> None:
        seeded.append(into)
        await copy(into)

    async with Workspaces(open_dir / "ws", seed=seed) as spaces:
        first = await spaces.get("run", "run-0")
        again = await spaces.get("run", "run-0.sub-1")
        assert again is first
        assert len(seeded) == 1
        assert (first.path / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
        assert os.readlink(first.path / "link") == "README"
        assert first.path.stat().st_uid == sandbox_host_uid()
        assert (first.path / "pkg" / "mod.py").stat().st_uid == sandbox_host_uid()
        (first.path / "pkg" / "mod.py").write_text("VALUE = 2\n")
        other = await spaces.get("run", "run-1")
        assert (other.path / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
        assert (repo / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
        assert await spaces.for_call(ToolContext(run_id="run", rollout_id="run-0~1")) is first
        with pytest.raises(Exception, match="names no rollout"):
            await spaces.for_call(ToolContext())
    assert not first.path.exists()  # released on leaving
    assert not other.path.exists()


@pytest.mark.anyio
async def test_two_workspaces_over_one_root_agree(open_dir: Path) -> None:
    calls: list[Path] = []

    async def slow_seed(into: Path) -> None:
        calls.append(into)
        await anyio.sleep(0.05)
        (into / "who").write_text(str(len(calls)))

    a = Workspaces(open_dir / "ws", seed=slow_seed)
    b = Workspaces(open_dir / "ws", seed=slow_seed)
    found: list[RolloutWorkspace] = []

    async def get(spaces: Workspaces) -> None:
        found.append(await spaces.get("run", "run-0"))

    async with anyio.create_task_group() as tg:
        for spaces in (a, b, a, b):
            tg.start_soon(get, spaces)
    assert {w.path for w in found} == {a.path_of("run", "run-0")}
    # both seeded a staging copy; one won the rename, the other's was removed
    assert len(calls) == 2
    assert sorted(p.name for p in found[0].path.parent.iterdir()) == ["0"]
    await a.aclose()
    await b.aclose()


@pytest.mark.anyio
async def test_release_deletes_unless_kept(open_dir: Path) -> None:
    spaces = Workspaces(open_dir / "ws")
    space = await spaces.get("run", "run-0")
    (space.path / "f").write_text("x")
    await spaces.release("run", "run-0")
    assert not space.path.exists()
    fresh = await spaces.get("run", "run-0")
    assert list(fresh.path.iterdir()) == []  # created again, empty
    await spaces.aclose()
    with pytest.raises(Exception, match="closed"):
        await spaces.get("run", "run-0")
    kept = Workspaces(open_dir / "kept", keep=True)
    space = await kept.get("run", "run-0")
    await kept.release("run", "run-0")
    await kept.aclose()
    assert space.path.is_dir()


@pytest.mark.anyio
async def test_a_failing_seed_leaves_nothing(open_dir: Path) -> None:
    async def broken(into: Path) -> None:
        (into / "half").write_text("x")
        raise RuntimeError("clone failed")

    spaces = Workspaces(open_dir / "ws", seed=broken)
    with pytest.raises(RuntimeError, match="clone failed"):
        await spaces.get("run", "run-0")
    assert list((open_dir / "ws" / "run").iterdir()) == []
    with pytest.raises(ConfigError, match="is not a directory"):
        copy_directory_seed(open_dir / "missing")


@pytest.mark.anyio
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root daemon hands workspaces over")
async def test_a_root_the_sandbox_cannot_reach_is_a_clear_error(tmp_path: Path) -> None:
    await anyio.Path(tmp_path).chmod(0o700)
    spaces = Workspaces(tmp_path / "ws")
    with pytest.raises(ConfigError, match="cannot reach the workspace root"):
        await spaces.get("run", "run-0")


@pytest.mark.anyio
async def test_a_rollout_released_where_it_ran_leaves_its_runs_others(open_dir: Path) -> None:
    """What a Ray worker does when a rollout it ran ends: that rollout's
    workspace goes (not for a sub-agent's end, nor a seeded run's), and the
    run's directory goes with the last one."""
    root = open_dir / "ws"
    spaces = Workspaces(root, keep=True)
    first = await spaces.get("run", "run-0")
    second = await spaces.get("run", "run-1")
    await release_rollout("run", "run-0.coder-1", root)  # a sub-agent's end
    assert first.path.is_dir()
    await release_rollout("run", "run-0", root)
    assert not first.path.exists()
    assert second.path.is_dir()

    async def seed(into: Path) -> None:
        pass

    with run_seed("run", seed):
        await release_rollout("run", "run-1", root)
    assert second.path.is_dir()
    await release_rollout("run", "run-1~2", root)  # a restarted incarnation's end
    assert not (root / "run").exists()


def test_claims_and_sweeps_of_one_root_in_threads_do_not_race(tmp_path: Path) -> None:
    """A sweep removes the owners directory when it is empty; a claim in
    another thread between its ``mkdir`` and its ``open`` found it gone (a
    first ``get`` of two ``Workspaces`` over one root failed that way)."""
    from concurrent.futures import ThreadPoolExecutor

    from agentrt.tools.sandbox._workspace_owners import claim, disown, sweep_abandoned

    root = tmp_path / "ws"
    root.mkdir()

    def cycle(k: int) -> None:
        run_dir = root / f"run-{k % 4}"
        run_dir.mkdir(exist_ok=True)
        claim(run_dir)
        disown(run_dir)

    def sweep(_: int) -> None:
        sweep_abandoned(root)

    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [pool.submit(cycle if k % 2 else sweep, k) for k in range(4000)]
        for job in jobs:
            job.result()
