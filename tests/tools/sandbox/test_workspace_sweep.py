"""Workspaces a process leaves when it is killed (a SIGKILLed daemon) are
deleted by the next process that uses their root; a live process's, and
workspaces kept for debugging, are not."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentrt.tools.sandbox._workspaces import Workspaces, keep_run

pytestmark = [pytest.mark.anyio, pytest.mark.process]

#: A process holding a workspace of run ``argv[2]`` under root ``argv[1]``
#: (``keep`` in ``argv[3]``: keeps it for debugging, then exits cleanly).
_HOLDER = textwrap.dedent(
    """
    import sys, anyio
    from pathlib import Path
    from agentrt.tools.sandbox._workspaces import Workspaces, keep_run

    async def main():
        root, run = Path(sys.argv[1]), sys.argv[2]
        spaces = Workspaces(root)
        space = await spaces.get(run, run + "-0")
        (space.path / "work.txt").write_text("half done")
        if sys.argv[3] == "keep":
            keep_run(run, root)
            return
        print("holding", flush=True)
        await anyio.sleep(600)

    anyio.run(main)
    """
)


def _holder(root: Path, run: str, mode: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(root), run, mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    if mode == "hold":
        assert process.stdout is not None
        assert process.stdout.readline() == "holding\n"
    else:
        assert process.wait(timeout=60) == 0
        assert process.stdout is not None
        process.stdout.close()
    return process


async def test_a_killed_processs_workspaces_are_swept_at_the_next_start(open_dir: Path) -> None:
    root = open_dir / "ws"
    killed = _holder(root, "killed-run", "hold")
    alive = _holder(root, "live-run", "hold")
    _holder(root, "kept-run", "keep")
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert (root / "killed-run").is_dir()  # nothing cleaned up after it
        async with Workspaces(root) as spaces:  # the next start
            await spaces.get("new-run", "new-run-0")
            assert not (root / "killed-run").exists()
            for run in ("live-run", "kept-run"):
                work = spaces.path_of(run, f"{run}-0") / "work.txt"
                assert work.read_text() == "half done", run
        assert not (root / "new-run").exists()  # released with the Workspaces
    finally:
        for process in (killed, alive):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
            assert process.stdout is not None
            process.stdout.close()


async def test_a_run_kept_in_this_process_is_not_swept_after_it_exits(open_dir: Path) -> None:
    root = open_dir / "ws"
    async with Workspaces(root, keep=True) as spaces:
        await spaces.get("run", "run-0")
    kept = keep_run("run", root)
    assert kept == root / "run"
    assert not (root / ".owners" / "run").exists()  # no owner: never swept
