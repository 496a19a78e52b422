"""``agentrt run`` leaves no workspace behind: the shell of an inline agent
works in a workspace per rollout, all deleted when the command ends."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from agentrt.testing import SimServer, SimServerConfig

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.slow]


@pytest.fixture
def temp() -> Iterator[Path]:
    """The command's ``$TMPDIR``: its default workspace root is in it.
    Traversable by every user (the sandbox's is not root's), unlike
    pytest's ``tmp_path``."""
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (apt-get install -y bubblewrap)")
    path = Path(tempfile.mkdtemp(prefix="agentrt-cli-"))
    path.chmod(0o755)
    (path / "tmp").mkdir(mode=0o755)
    try:
        yield path / "tmp"
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _coder_config(sim_url: str) -> str:
    """An ``agentrt.toml`` with one shell-using agent on the sim-server."""
    return (
        "early_stop = false\n\n"
        "[models.backends.sim]\n"
        f'kind = "openai"\nbase_url = "{sim_url}/v1"\nmodels = ["sim"]\n\n'
        '[agents.coder]\ninstructions = "Code."\ntools = ["shell"]\nstop_on = []\n'
    )


async def test_agentrt_run_deletes_its_rollouts_workspaces(temp: Path) -> None:
    config = anyio.Path(temp.parent / "agentrt.toml")
    async with SimServer(SimServerConfig(tool_rounds=1, ttft_ms=1, token_ms=0)) as sim:
        await config.write_text(_coder_config(sim.url))
        command = [
            sys.executable,
            "-m",
            "agentrt",
            "run",
            "go",
            "--agent",
            "coder",
            "--rollouts",
            "3",
        ]
        done = await anyio.run_process(
            [*command, "--config", str(config), "--json"],
            env={**os.environ, "TMPDIR": str(temp)},
            check=False,
        )
        answered = sum("tool" in roles for roles in sim.engine.roles.values())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout)
    assert result["status"] == "succeeded", result
    assert len(result["summaries"]) == 3, result
    assert answered == 3  # each rollout sent a shell result back: it had a workspace
    assert [p.name async for p in anyio.Path(temp).iterdir()] in ([], ["agentrt-workspaces"])
    assert [p async for p in anyio.Path(temp / "agentrt-workspaces").glob("*")] == []


async def test_agentrt_run_keeps_its_workspaces_on_request(temp: Path) -> None:
    """``--keep-workspaces``: the rollouts' workspaces stay, and stderr says where."""
    config = anyio.Path(temp.parent / "agentrt.toml")
    async with SimServer(SimServerConfig(tool_rounds=1, ttft_ms=1, token_ms=0)) as sim:
        await config.write_text(_coder_config(sim.url))
        command = [sys.executable, "-m", "agentrt", "run", "go", "--agent", "coder"]
        done = await anyio.run_process(
            [*command, "--rollouts", "2", "--keep-workspaces", "--config", str(config), "--json"],
            env={**os.environ, "TMPDIR": str(temp)},
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout)
    kept = temp / "agentrt-workspaces" / result["run_id"]
    assert f"workspaces kept in {kept}" in done.stderr.decode()
    assert len([p async for p in anyio.Path(kept).iterdir()]) == 2
