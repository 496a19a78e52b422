"""Where a sandbox's total memory is kept by a cgroup v2: found under a
delegated parent with the memory controller, on a stand-in of
``/sys/fs/cgroup`` (this machine has cgroup v1: the kernel side is not
exercised here)."""

from __future__ import annotations

from pathlib import Path

from agentrt.tools.sandbox._cgroup import SandboxCgroups, memory_bound_in_force


def _tree(tmp_path: Path, own: str, enabled: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for relative, controllers in enabled.items():
        directory = root / relative
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.subtree_control").write_text(controllers)
    self_file = tmp_path / "self-cgroup"
    self_file.write_text(f"0::{own}\n")
    return root, self_file


def test_a_delegated_parent_with_memory_makes_bounded_children(tmp_path: Path) -> None:
    root, own = _tree(tmp_path, "/svc/leaf", {"svc": "memory pids\n", "svc/leaf": ""})
    cgroups = SandboxCgroups(root, own)
    assert cgroups.parent == root / "svc"
    bound = memory_bound_in_force(cgroups, process_mb=64, processes=8, filtered=True)
    assert bound.startswith("8 processes x 64 MiB of address space"), bound
    assert bound.endswith(f"and a cgroup v2 per sandbox under {root / 'svc'} (memory.max)")
    child = cgroups.make(500, 64)
    assert child.parent == root / "svc"
    assert (child / "memory.max").read_text() == f"{500 * 1024 * 1024}\n"
    assert (child / "memory.swap.max").read_text() == "0\n"
    assert (child / "pids.max").read_text() == "64\n"
    assert not SandboxCgroups.oom_killed(child)
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert SandboxCgroups.oom_killed(child)


def test_no_cgroup_without_v2_or_without_the_memory_controller(tmp_path: Path) -> None:
    root, own = _tree(tmp_path, "/svc", {"": "cpu pids\n", "svc": "pids\n"})
    assert not SandboxCgroups(root, own).available
    (root / "cgroup.controllers").unlink()  # cgroup v1: nothing unified at the root
    (root / "cgroup.subtree_control").write_text("memory\n")
    cgroups = SandboxCgroups(root, own)
    assert not cgroups.available
    bound = memory_bound_in_force(cgroups, process_mb=64, processes=8, filtered=False)
    assert "= 512 MiB (SysV shared memory and memory files not refused" in bound
    assert bound.endswith("; no delegated cgroup v2 with the memory controller here")
