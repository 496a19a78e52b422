"""What a daemon holds and who holds the store: one owner per store file
through any name (symlink, hard link, a deleted side file), descriptors,
threads and memory back to their baseline after bursts of reads under a low
fd limit, half-sent requests that cannot slow other clients, and
configuration errors that exit 2 with one line naming the key."""

from __future__ import annotations

import gc
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.serve._pauses import IdleCollector
from agentrt.runtime.serve.store._run_store import RunStore
from tests._support.configs import scripted_models
from tests._support.daemon import start_serve

pytestmark = [pytest.mark.anyio, pytest.mark.process]

ONE_LOOP = pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio")]
)
"""For tests whose daemon is a subprocess: the test's own loop is only a client."""


# -- one owner per store ------------------------------------------------------------


async def test_the_store_file_has_one_owner_whatever_its_name(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    symlink, hard_link = tmp_path / "via-symlink.db", tmp_path / "via-hard-link.db"
    async with RunStore(db):
        symlink.symlink_to(db)
        os.link(db, hard_link)
        for name in (db, symlink, hard_link):
            with pytest.raises(
                ConfigError, match=rf"in use by another agentrt process \(pid {os.getpid()}\)"
            ):
                async with RunStore(name):
                    pass
        # No side file holds the lock: nothing to delete that would let a second one in.
        assert not any("lock" in p.name for p in os.scandir(tmp_path))
    # Free again, but reachable by two names: refused (SQLite's WAL is per name).
    with pytest.raises(ConfigError, match="2 hard links"):
        async with RunStore(db):
            pass
    hard_link.unlink()
    async with RunStore(symlink) as store:  # a symlink is followed to the one file
        assert store.path == str(db.resolve())


def _write_config(
    tmp_path: Path, port: int, extra: str = "", *, header_timeout_s: float = 2.0
) -> Path:
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f"""
[server]
port = {port}
header_timeout_s = {header_timeout_s}
{extra}

[store]
path = "runs.db"
reader_idle_s = 0.5

{scripted_models(["42"], backend="s")}
[agents.solver]
instructions = "Answer briefly."
"""
    )
    return config


def _serve(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrt", "serve", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_second_daemon_on_the_same_store_is_refused(tmp_path: Path, daemon_kit: Any) -> None:
    port = daemon_kit.free_port()
    config = _write_config(tmp_path, port)
    first = daemon_kit.start_serve(config, port, tmp_path / "first.log")
    try:
        db = tmp_path / "runs.db"
        (tmp_path / "symlink.db").symlink_to(db)
        os.link(db, tmp_path / "hard-link.db")
        for side in tmp_path.glob("runs.db.lock*"):  # the old lock's side file, if any
            side.unlink()
        for store in (db, tmp_path / "symlink.db", tmp_path / "hard-link.db"):
            second = _serve("--config", config, "--port", "0", "--store", store)
            assert second.returncode == 2, second.stderr
            assert f"in use by another agentrt process (pid {first.pid})" in second.stderr
            assert "Traceback" not in second.stderr
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        first.terminate()
        first.wait(30)


@pytest.mark.slow
def test_configuration_errors_exit_2_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTRT_UNSET_TOKEN", raising=False)
    unset = _serve("--config", _write_config(tmp_path, 0, 'token_env = "AGENTRT_UNSET_TOKEN"'))
    assert unset.returncode == 2, unset.stderr
    assert unset.stderr.count("\n") == 1, unset.stderr
    assert "server.token_env" in unset.stderr
    assert "AGENTRT_UNSET_TOKEN" in unset.stderr
    origin = _serve("--config", _write_config(tmp_path, 0, 'allowed_origins = ["http://x/app"]'))
    assert origin.returncode == 2, origin.stderr
    assert origin.stderr.count("\n") == 1, origin.stderr
    assert "server.allowed_origins" in origin.stderr


# -- resources over load cycles -----------------------------------------------------------


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _start_limited(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return start_serve(config, port, log, preexec_fn=_low_fd_limit)


def _holdings(proc: psutil.Process) -> tuple[int, int, float]:
    """Open descriptors, threads, RSS in MB."""
    return proc.num_fds(), proc.num_threads(), proc.memory_info().rss / 2**20


@pytest.mark.slow
@ONE_LOOP
async def test_load_cycles_return_fds_threads_and_memory_to_baseline(
    tmp_path: Path, daemon_kit: Any
) -> None:
    port = daemon_kit.free_port()
    config = _write_config(tmp_path, port, "finished_runs_cached = 0")
    daemon = _start_limited(config, port, tmp_path / "daemon.log")
    try:
        watched = psutil.Process(daemon.pid)
        assert resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)[0] == 256
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            runs = []
            for _ in range(8):
                body = {"task": "t", "scaling": {"rollouts": 2}}
                runs.append((await client.post("/v1/runs", json=body)).json()["run_id"])
            rollouts: dict[str, str] = {}
            with anyio.fail_after(30):
                for run_id in runs:
                    while True:
                        detail = (await client.get(f"/v1/runs/{run_id}")).json()
                        if detail["run"]["status"] == "succeeded":
                            rollouts[run_id] = detail["rollouts"][0]["rollout_id"]
                            break
                        await anyio.sleep(0.05)
            paths = [
                p
                for run_id, rollout_id in rollouts.items()
                for p in (
                    f"/v1/runs/{run_id}",
                    f"/v1/runs/{run_id}/summaries",
                    f"/v1/runs/{run_id}/rollouts/{rollout_id}",
                    "/v1/runs?limit=5",
                )
            ]
        statuses: list[int] = []

        async def burst() -> None:
            """60 clients at once, each on its own connection, closed after."""

            async def reader(k: int) -> None:
                async with httpx.AsyncClient(base_url=url, timeout=30) as own:
                    for path in paths[k % len(paths) :: 7][:6]:
                        statuses.append((await own.get(path)).status_code)

            async with anyio.create_task_group() as tg:
                for k in range(60):
                    tg.start_soon(reader, k)

        # The baselines: descriptors before any burst (the readers the setup
        # used are closed by now); threads and memory after a first cycle
        # (the worker threads and caches are warm).
        await anyio.sleep(1.5)
        base_fds = _holdings(watched)[0]
        await burst()
        await anyio.sleep(1.5)
        warm_fds, base_threads, base_rss = _holdings(watched)
        # A closed reader's descriptor of the database file itself stays
        # parked by SQLite while the writer holds its lock on the file (it is
        # reused by the next reader): at most one per pooled reader, however
        # many cycles (a connection per thread, as before, held ~2 per thread).
        parked = 4  # [store] readers
        seen: list[tuple[int, int, float]] = []
        for _ in range(4):
            await burst()
            settled = time.monotonic() + 6  # idle readers and closed sockets let go
            while True:
                await anyio.sleep(0.5)
                fds, threads, rss = _holdings(watched)
                back = fds <= base_fds + parked and threads <= base_threads + 2
                if back or time.monotonic() > settled:
                    break
            seen.append((fds, threads, rss))
        assert set(statuses) == {200}, sorted(set(statuses))
        baseline = (base_fds, warm_fds, base_threads, base_rss)
        assert warm_fds <= base_fds + parked, baseline
        for fds, threads, rss in seen:
            assert fds <= base_fds + parked, (baseline, seen)
            assert threads <= base_threads + 2, (baseline, seen)
            assert rss <= base_rss + 12, (baseline, seen)
    finally:
        daemon.terminate()
        daemon.wait(30)


# -- slow clients ---------------------------------------------------------------------


def _answered(sock: socket.socket) -> bool:
    """Whether the daemon sent anything on ``sock`` or closed it (not waiting)."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    return True


@pytest.mark.slow
@ONE_LOOP
async def test_half_sent_requests_do_not_slow_other_clients(
    tmp_path: Path, daemon_kit: Any
) -> None:
    port = daemon_kit.free_port()
    config = _write_config(tmp_path, port, header_timeout_s=15.0)
    daemon = daemon_kit.start_serve(config, port, tmp_path / "daemon.log")
    slow: list[socket.socket] = []
    try:
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            run_id = (await client.post("/v1/runs", json={"task": "t"})).json()["run_id"]
            for _ in range(200):  # headers started, never finished
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
                slow.append(sock)
            beside = [(await client.get(f"/v1/runs/{run_id}")).status_code for _ in range(200)]
        # Every other request was answered (within the client's timeout) while
        # all 200 half-sent ones were still held: none of them answered yet.
        assert beside == [200] * 200
        assert [sock for sock in slow if _answered(sock)] == []
        # The daemon lets go of them at header_timeout_s, with a 408.
        for sock in slow:
            sock.settimeout(60)  # a hang guard: the first one waits for the deadline
            answer = sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
            assert b"server.header_timeout_s" in answer
    finally:
        for sock in slow:
            sock.close()
        daemon.terminate()
        daemon.wait(30)


# -- the daemon's own collector -------------------------------------------------------------


async def test_the_idle_collector_collects_once_quiet_and_only_after_promotions() -> None:
    collector = IdleCollector(check_s=0.01, quiet_s=0.05, max_interval_s=60)
    busy = True
    async with anyio.create_task_group() as tg:
        tg.start_soon(collector.run, lambda: not busy)
        await anyio.sleep(0.05)
        gc.collect(1)  # survivors promoted into the old generation
        await anyio.sleep(0.2)
        assert collector.collections == 0  # runs executing: no full collection
        busy = False
        with anyio.fail_after(5):
            while collector.collections == 0:  # noqa: ASYNC110 - watching a counter
                await anyio.sleep(0.01)
        await anyio.sleep(0.2)
        assert collector.collections == 1  # nothing promoted since: nothing to do
        tg.cancel_scope.cancel()


async def test_a_full_collection_comes_at_the_latest_after_max_interval() -> None:
    collector = IdleCollector(check_s=0.01, quiet_s=60, max_interval_s=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(collector.run, lambda: False)  # never idle
        with anyio.fail_after(10):
            while collector.collections < 2:
                gc.collect(1)  # objects keep reaching the old generation
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


async def test_forced_collections_back_off_while_they_find_no_garbage() -> None:
    collector = IdleCollector(check_s=0.01, quiet_s=60, max_interval_s=0.02, few=1_000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(collector.run, lambda: False)  # never idle
        with anyio.fail_after(10):
            while collector.interval < 0.08:  # two forced collections found (next to) nothing
                gc.collect(1)
                await anyio.sleep(0.01)
        assert collector.interval <= 0.02 * 16
        found = collector.collections
        old = [_Cycle() for _ in range(5_000)]
        gc.collect(1)  # survivors moved to the old generation...
        old.clear()  # ...then garbage there, which only a full collection frees
        with anyio.fail_after(10):
            while collector.interval != 0.02:  # a collection that found it set the wait back
                gc.collect(1)
                await anyio.sleep(0.01)
        assert collector.collections > found
        tg.cancel_scope.cancel()
