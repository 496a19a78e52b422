"""Regression tests for the daemon bugs schemathesis found (test_openapi_fuzz.py):
one deterministic test per bug."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.protocols import Event, RunFinished, RunRequest, ScalingSpec, decode_event
from agentrt.protocols._api import RunDetail
from agentrt.runtime.serve._openapi import MAX_EVENT_ID, decimal_at_most
from agentrt.runtime.serve._run_manager import RunManager

pytestmark = pytest.mark.anyio

TOO_BIG = str(1 << 70)


async def _finished_run(client: httpx.AsyncClient) -> str:
    created = await client.post("/v1/runs", json={"task": "add", "agent": "solver"})
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    with anyio.fail_after(20):
        while True:
            status = (await client.get(f"/v1/runs/{run_id}")).json()["run"]["status"]
            if status == "succeeded":
                return run_id
            await anyio.sleep(0.02)


async def test_numbers_too_big_for_sqlite_are_422_not_500(tmp_path: Path, daemon_kit: Any) -> None:
    """A cursor or event id past SQLite's int64 used to crash the store call:
    a 500 for ``GET /v1/runs``, a dropped connection mid-stream for SSE."""
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        run_id = await _finished_run(client)
        for path, headers, where in (
            (f"/v1/runs?cursor={TOO_BIG}", {}, "query.cursor"),
            (f"/v1/runs/{run_id}/events?after={TOO_BIG}", {}, "query.after"),
            (f"/v1/runs/{run_id}/events", {"Last-Event-ID": TOO_BIG}, "Last-Event-ID"),
            # Last-Event-ID wins, but a bad ?after= is still refused.
            (f"/v1/runs/{run_id}/events?after=x", {"Last-Event-ID": "1"}, "query.after"),
        ):
            response = await client.get(path, headers=headers)
            assert response.status_code == 422, (path, response.text)
            assert response.json()["where"] == where
        resumed = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events", last_event_id=2)
        assert resumed[0][0] == 3


@given(
    bound=st.sampled_from([0, 1, 9, 10, 19, 100, 1019, 90210, MAX_EVENT_ID]),
    n=st.integers(min_value=0, max_value=1 << 70),
    zeros=st.integers(min_value=0, max_value=3),
)
def test_the_decimal_pattern_matches_exactly_the_numbers_up_to_its_bound(
    bound: int, n: int, zeros: int
) -> None:
    pattern = re.compile(decimal_at_most(bound))
    for value in (n, n % (bound + 1), bound, bound + 1):
        assert bool(pattern.fullmatch("0" * zeros + str(value))) == (value <= bound), value
    assert pattern.fullmatch("")
    for bad in ("-1", "+1", " 1", "1_0", "\u0661"):
        assert not pattern.fullmatch(bad)


async def test_the_last_event_id_the_document_allows_is_the_one_the_daemon_takes(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """schemathesis sent ``Last-Event-ID: 13364902128039946354606722``, which
    the document's ``^[0-9]*$`` allowed and the daemon refused (ST202)."""
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        document = (await client.get("/openapi.json")).json()
        parameters = document["paths"]["/v1/runs/{run_id}/events"]["get"]["parameters"]
        (header,) = [p for p in parameters if p["name"] == "Last-Event-ID"]
        pattern = re.compile(header["schema"]["pattern"])
        run_id = await _finished_run(client)
        for value in (
            str(MAX_EVENT_ID),
            "0" * 30 + str(MAX_EVENT_ID),
            "0" * 5000 + "2",
            str(MAX_EVENT_ID + 1),
            "13364902128039946354606722",
            "9" * 5000,
            "+2",
            "2x",
        ):
            response = await client.get(
                f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": value}
            )
            allowed = pattern.fullmatch(value) is not None
            assert (response.status_code == 200) == allowed, (value[:40], response.text[:200])
            if not allowed:
                assert response.status_code == 422
                assert response.json()["where"] == "Last-Event-ID"
                assert len(response.json()["message"]) < 200
            elif value.endswith("2"):
                ids = [line for line in response.text.splitlines() if line.startswith("id:")]
                assert ids[0] == "id: 3", ids[:2]


async def test_a_405_lists_every_method_of_the_path(tmp_path: Path, daemon_kit: Any) -> None:
    """``/v1/runs`` was two routes, so its 405 said ``Allow: POST`` (no GET);
    and the error handler dropped ``Allow`` altogether on other paths."""
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        for path, methods in (
            ("/v1/runs", {"GET", "POST"}),
            ("/v1/runs/x/cancel", {"POST"}),
            ("/v1/agents", {"GET"}),
        ):
            response = await client.request("DELETE", path)
            assert response.status_code == 405
            assert response.json()["error"] == "method_not_allowed"
            allowed = {m.strip() for m in response.headers["allow"].split(",")}
            assert allowed - {"HEAD"} == methods, (path, allowed)


async def test_a_cancel_while_the_last_event_is_being_committed_still_settles_the_run(
    tmp_path: Path, daemon_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel landing while ``store.record`` awaited the commit of the run's
    own ``RunFinished`` left it committed but not applied to the live run;
    ``_settle`` then wrote a second ``RunFinished`` with the same seq, hit the
    UNIQUE constraint, and the run stayed ``running`` for good."""
    config = daemon_kit.config(tmp_path)
    async with RunManager(config, backends=[daemon_kit.scripted(steps=1)]) as manager:
        committed = anyio.Event()
        record = manager.store.record

        async def late_acknowledgement(event: Event) -> None:
            await record(event)
            if isinstance(event, RunFinished) and not committed.is_set():
                committed.set()
                await anyio.sleep(0.3)  # durable already; the caller hears late

        monkeypatch.setattr(manager.store, "record", late_acknowledgement)
        info = await manager.submit(RunRequest(task="add", agent="solver"))
        with anyio.fail_after(10):
            await committed.wait()
            await manager.cancel(info.run_id)
        stored = await manager.store.run_info(info.run_id)
        assert stored is not None
        events = [decode_event(b) for b in await manager.store.events(info.run_id, after=0)]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        finished = [e for e in events if isinstance(e, RunFinished)]
        assert len(finished) == 1
        assert finished[0] is events[-1]
        assert stored.status == finished[0].status


async def test_a_finished_run_in_memory_ends_as_stored_though_its_last_events_commit_later(
    tmp_path: Path, daemon_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's end time is read before its last queued events commit (the
    vote, the summaries); applying them afterwards must not move the time
    a client reads from memory past the one the store recorded.  A slow
    writer keeps those events queued when the run settles."""
    config = daemon_kit.config(tmp_path)
    async with RunManager(config, backends=[daemon_kit.scripted(steps=1)]) as manager:
        store = manager.store
        apply = store._apply

        def slow(batch: Any) -> None:
            time.sleep(0.02)  # on the writer thread: later events queue behind
            apply(batch)

        monkeypatch.setattr(store, "_apply", slow)
        assert store._queue is not None
        monkeypatch.setattr(store._queue, "_commit", slow)
        request = RunRequest(task="add", agent="solver", scaling=ScalingSpec(rollouts=3))
        info = await manager.submit(request)
        await manager.wait(info.run_id, timeout=30)
        stored = await store.detail(info.run_id)
        assert stored is not None
        from_memory = await manager.detail(info.run_id)
        assert from_memory is not None
        assert from_memory.run.updated_at == stored.run.updated_at
        assert from_memory == stored


async def test_finished_runs_are_served_from_memory_as_the_store_has_them(
    tmp_path: Path, daemon_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polling a finished run used to read the store on every request (four
    trips to a reader thread, slow while the daemon is busy); the most recent
    ones are now kept in memory, and must read exactly as the store has them."""
    config = daemon_kit.config(tmp_path, server={"finished_runs_cached": 2})
    async with RunManager(config, backends=[daemon_kit.scripted(steps=1)]) as manager:
        ids: list[str] = []
        for k in range(3):
            request = RunRequest(task=f"add {k}", agent="solver", scaling=ScalingSpec(rollouts=2))
            info = await manager.submit(request)
            await manager.wait(info.run_id, timeout=10)
            ids.append(info.run_id)
        stored = {run_id: await manager.store.detail(run_id) for run_id in ids}
        read: list[str] = []
        detail = manager.store.detail

        async def counted(run_id: str) -> RunDetail | None:
            read.append(run_id)
            return await detail(run_id)

        monkeypatch.setattr(manager.store, "detail", counted)
        for run_id in ids:
            from_manager = await manager.detail(run_id)
            assert from_manager is not None
            assert from_manager == stored[run_id]
            assert from_manager.run.status == "succeeded"
            assert len(from_manager.rollouts) == 2
            assert from_manager.result is not None
            assert await manager.get(run_id) == from_manager.run
        assert read == [ids[0]]  # the oldest made room; the store answers for it
