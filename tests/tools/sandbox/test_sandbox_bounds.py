"""What a sandboxed command may write is bounded: ``/`` and ``/dev`` are
read-only, ``/dev/shm`` and ``/tmp`` stop at their configured sizes, and a
workspace is private to the sandbox's user."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig
from agentrt.tools.sandbox._workspaces import Workspaces

pytestmark = [pytest.mark.anyio, pytest.mark.process]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"use_uvloop": False})


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (apt-get install -y bubblewrap)")


async def test_root_and_dev_are_read_only_and_every_tmpfs_is_sized() -> None:
    sandbox = Sandbox(SandboxConfig(timeout_s=20, tmp_mb=4, shm_mb=2, max_file_mb=64))
    script = (
        "for f in /escape /dev/escape /usr/escape; do "
        '  (echo x > $f) 2>/dev/null && echo "wrote $f" || echo "refused $f"; done; '
        "echo x > /dev/null && echo 'null ok'; "
        "head -c 8M /dev/zero > /dev/shm/big 2>/dev/null; echo shm $(stat -c %s /dev/shm/big); "
        "head -c 8M /dev/zero > /tmp/big 2>/dev/null; echo tmp $(stat -c %s /tmp/big)"
    )
    result = await sandbox.run(["bash", "-c", script])
    lines = result.stdout.splitlines()
    assert lines[:3] == ["refused /escape", "refused /dev/escape", "refused /usr/escape"]
    assert "null ok" in lines
    assert f"shm {2 * 1024 * 1024}" in lines  # stopped at 2 MiB, not 8
    assert f"tmp {4 * 1024 * 1024}" in lines


_ALLOCATORS = """
import os, time
held = refused = 0
kids = []
for _ in range(8):
    r, w = os.pipe()
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        try:
            block = bytearray(150 * 1024 * 1024)
            os.write(w, b"1")
        except MemoryError:
            os.write(w, b"0")
        time.sleep(2)
        os._exit(0)
    kids.append(r)
held = sum(os.read(r, 1) == b"1" for r in kids)
print(held, refused)
"""


async def test_many_allocating_processes_stay_within_the_total_memory() -> None:
    """Without a cgroup, ``total_memory_mb`` caps the processes so that
    their address spaces together stay within it: 8 forks that each hold
    150 MiB, under 1024 MiB in all at 256 MiB a process, get at most 3
    children beside the parent (4 processes), the rest refused."""
    config = SandboxConfig(timeout_s=30, memory_mb=256, total_memory_mb=1024)
    assert config.process_cap == 4
    result = await Sandbox(config).run(["python3", "-c", _ALLOCATORS])
    held, refused = map(int, result.stdout.split())
    assert 1 <= held <= 3, result
    assert held + refused == 8, result
    assert (held + 1) * config.memory_mb <= 1024
    with pytest.raises(ValueError, match="must allow 4 processes"):
        SandboxConfig(memory_mb=512, total_memory_mb=1024)


async def test_a_workspace_is_readable_by_its_sandbox_user_only(open_dir: Path) -> None:
    async with Workspaces(open_dir / "ws") as spaces:
        space = await spaces.get("run", "run-0")
        assert stat.S_IMODE(space.path.stat().st_mode) == 0o700
        result = await Sandbox(SandboxConfig(timeout_s=10)).run(
            ["bash", "-c", "echo hi > f && cat f"], workspace=space.path
        )
        assert result.stdout == "hi\n"
