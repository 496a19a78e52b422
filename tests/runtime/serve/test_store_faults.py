"""The run store under faults: a full disk and an empty store file.

The full disk is real: the daemon runs in a user and mount namespace
(``unshare --map-root-user --mount``, no privilege needed) with its store on
a tmpfs of a few hundred KiB, so SQLite's writes fail with ``ENOSPC`` and the
daemon sees ``SQLITE_FULL`` exactly as on a full production disk.  (SQLite's
``PRAGMA max_page_count`` would give the same error code without the
namespace, but only for the database file, never for its write-ahead log,
where a full disk first shows; ``RLIMIT_FSIZE`` gives ``EFBIG``, which
SQLite reports as an I/O error, not as a full disk.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.serve.store._run_store import RunStore
from tests._support.daemon import serving, wait_ready

pytestmark = pytest.mark.process  # the full-disk test runs a daemon in a namespace

TMPFS_KIB = 1024


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.mark.anyio
async def test_an_empty_store_file_is_refused_not_opened_as_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.touch()
    with pytest.raises(ConfigError, match=r"empty \(0 bytes\).*delete the file") as caught:
        async with RunStore(path):
            pass
    assert caught.value.where == str(path)
    assert path.stat().st_size == 0  # left as found
    path.unlink()  # the remedy the message names
    async with RunStore(path) as store:
        assert await store.unfinished() == []
    async with RunStore(path) as store:  # a store this made reopens
        assert await store.integrity_check() == "ok"


def _post_until_refused(
    client: httpx.Client, tasks: str, tries: int, acknowledged: list[str]
) -> httpx.Response | None:
    """Create up to ``tries`` runs (tasks ``f"{tasks} {i}"``), adding each
    accepted one to ``acknowledged``; the first refusal, if any."""
    for i in range(tries):
        response = client.post("/v1/runs", json={"task": f"{tasks} {i}", "agent": "solver"})
        if response.status_code not in (201, 202):
            return response
        acknowledged.append(response.json()["run_id"])
    return None


def _child_of(pid: int) -> int:
    """The one child of ``pid`` (the daemon under the namespace's shell)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="needs unprivileged user namespaces")
def test_a_full_disk_answers_507_and_loses_no_acknowledged_run(
    tmp_path: Path, daemon_kit: Any
) -> None:
    mnt, saved = tmp_path / "mnt", tmp_path / "saved"
    mnt.mkdir()
    saved.mkdir()
    port = daemon_kit.free_port()
    url = f"http://127.0.0.1:{port}"

    def config(store: Path) -> Path:
        text = daemon_kit.scripted_toml.replace('path = "runs.db"', f'path = "{store}"')
        file = tmp_path / f"{store.parent.name}.toml"  # outside the mount
        file.write_text(f"{text}\n[server]\nport = {port}\n")
        return file

    # The shell mounts the tmpfs, runs the daemon and, once it is dead,
    # copies the store out of the mount (which ends with the namespace).
    log = tmp_path / "daemon.log"
    script = (
        f"mount -t tmpfs -o size={TMPFS_KIB}k tmpfs {mnt} && "
        f"{sys.executable} -m agentrt serve --config {config(mnt / 'runs.db')}; "
        f"cp {mnt}/runs.db* {saved}/"
    )
    with log.open("ab") as stderr:
        shell = subprocess.Popen(
            ["unshare", "--map-root-user", "--mount", "sh", "-c", script],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_ready(shell, port, log)
        acknowledged: list[str] = []
        with httpx.Client(base_url=url, timeout=30) as client:
            refused = _post_until_refused(client, "task", 2000, acknowledged)
            assert refused is not None, "the store never filled up"
            # Refused again, the same way, while the disk stays full.  A run
            # may still be accepted in between: the refused commit held the
            # events of the runs executing meanwhile too, and a lone run's
            # row can fit where that group did not (SQLite reuses its log
            # once checkpointed).  Accepted is acknowledged: it must survive.
            again = _post_until_refused(client, "again", 20, acknowledged)
        # kill -9: what was acknowledged must be on disk already.
        os.kill(_child_of(shell.pid), signal.SIGKILL)
        shell.wait(30)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait(10)

    assert acknowledged, "no run was accepted before the disk filled"
    assert refused.status_code == 507, refused.text
    assert refused.headers["retry-after"] == "30"
    body = refused.json()
    assert body["error"] == "insufficient_storage"
    assert body["where"].startswith(f"store {mnt / 'runs.db'} (creating run ")
    assert "full" in body["message"]
    assert again is not None, "the full disk took 20 more runs"
    assert again.status_code == 507, again.text
    assert again.json()["error"] == "insufficient_storage"

    # The store, restarted on a disk with room: every acknowledged run is
    # there and runs to its end.
    with (
        serving(config(saved / "runs.db"), port, log),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        for run_id in acknowledged:
            status = ""
            for _ in range(600):
                response = client.get(f"/v1/runs/{run_id}")
                assert response.status_code == 200, (run_id, response.text)
                status = response.json()["run"]["status"]
                if status in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.05)
            assert status == "succeeded", (run_id, status)
