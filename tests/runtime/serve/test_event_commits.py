"""What a run's events wait for (issue 31): the run waits for its call
journal's events to be committed, the others are committed in order behind
them, and an event that cannot be committed fails the run all the same."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from agentrt.protocols import Budget, ModelRequest, RunRequest, ScalingSpec, ToolMessage
from agentrt.protocols._events import ToolCalled
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve.store._commit_queue import CommitQueue, Write
from agentrt.runtime.serve.store._run_store import RunStore, StoreError
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedToolCall

pytestmark = pytest.mark.anyio

STEPS = 3


class _Witness:
    """A script that, at every model call, reads what the store has
    committed (its own connection, as a process reading the file after a
    ``kill -9`` would)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.problems: list[str] = []
        self.calls = 0

    def __call__(self, request: ModelRequest) -> ReplySpec:
        self.calls += 1
        rollout, _, step = (request.request_id or "").rpartition("-")
        with sqlite3.connect(self.db) as conn:
            seqs = [s for (s,) in conn.execute("SELECT seq FROM events ORDER BY seq")]
            journal = [
                msgspec.json.decode(body)
                for (body,) in conn.execute("SELECT body FROM events WHERE type = 'call_reserved'")
            ]
            steps = conn.execute(
                "SELECT COUNT(*) FROM steps WHERE rollout_id = ?", (rollout,)
            ).fetchone()[0]
        if request.request_id not in {e["request_id"] for e in journal}:
            self.problems.append(f"{request.request_id} sent before its CallReserved committed")
        if steps != int(step):
            self.problems.append(f"{request.request_id} sent with {steps} steps committed")
        if seqs != list(range(1, len(seqs) + 1)):
            self.problems.append(f"{request.request_id}: committed out of order {seqs}")
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        if done < STEPS:
            return ScriptedToolCall("calculator", {"expression": f"{done}+1"})
        return "42"


async def test_a_call_is_sent_only_once_the_run_s_earlier_events_are_committed(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """The step before it, its ``CallReserved`` and every event before that
    are in the file when the model is asked, though the run waited for the
    journal's events only."""
    config = daemon_kit.config(tmp_path)
    witness = _Witness(str(config.store.path))
    async with RunManager(config, backends=[ScriptedBackend(witness)]) as manager:
        info = await manager.submit(
            RunRequest(task="q", agent="solver", scaling=ScalingSpec(rollouts=2))
        )
        with anyio.fail_after(30):
            done = await manager.wait(info.run_id)
        events = await manager.store.events(info.run_id, limit=10_000)
    assert done.status == "succeeded", done.error
    assert witness.calls == 2 * (STEPS + 1)
    assert witness.problems == []
    kinds = {msgspec.json.decode(body)["type"] for body in events}
    assert {"call_reserved", "call_settled", "step", "tool_call", "run_finished"} <= kinds


async def test_a_run_whose_unwaited_event_fails_to_commit_fails(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """A step the store refuses (a trigger here; a full disk in life) is not
    waited for, yet the run fails and says why rather than succeed with the
    step missing from the store."""
    config = daemon_kit.config(tmp_path)
    manager = RunManager(config, backends=[daemon_kit.scripted(steps=1)])
    async with manager:
        with sqlite3.connect(config.store.path) as conn:
            conn.execute(
                "CREATE TRIGGER refuse_steps BEFORE INSERT ON steps "
                "BEGIN SELECT RAISE(ABORT, 'planted: no room for steps'); END"
            )
        info = await manager.submit(RunRequest(task="q", agent="solver"))
        with anyio.fail_after(30):
            done = await manager.wait(info.run_id)
    assert done.status == "failed"
    assert "planted: no room for steps" in (done.error or ""), done.error


async def test_unwaited_writes_are_told_in_order_and_a_barrier_waits_for_them(
    tmp_path: Path,
) -> None:
    told: list[tuple[int, StoreError | None]] = []

    def tell(seq: int) -> Any:
        return lambda error: told.append((seq, error))

    async with RunStore(tmp_path / "runs.db") as store:
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "CREATE TRIGGER refuse_two BEFORE INSERT ON events WHEN NEW.seq = 2 "
                "BEGIN SELECT RAISE(ABORT, 'planted'); END"
            )
        for seq in (1, 2, 3):
            event = ToolCalled(
                run_id="r", rollout_id="r-0", seq=seq, call_id="c", tool="t", arguments=""
            )
            await store.record(event, then=tell(seq), wait=False)
        await store.barrier()
        assert [seq for seq, _ in told] == [1, 2, 3]
        assert told[0][1] is None
        assert told[2][1] is None
        failure = told[1][1]
        assert isinstance(failure, StoreError)
        assert "planted" in str(failure)
        assert [msgspec.json.decode(b)["seq"] for b in await store.events("r")] == [1, 3]


async def test_a_step_is_stored_once_in_its_event_and_older_stores_still_read(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """A step's row points at its ``step`` event instead of holding a second
    copy of its JSON; a store an older agentrt wrote (the JSON in the row,
    no event pointer) reads the same."""
    config = daemon_kit.config(tmp_path)
    async with RunManager(config, backends=[daemon_kit.scripted(steps=2)]) as manager:
        info = await manager.submit(RunRequest(task="q", agent="solver"))
        with anyio.fail_after(30):
            done = await manager.wait(info.run_id)
        assert done.status == "succeeded", done.error
        stored = await manager.store.steps(info.run_id)
        with sqlite3.connect(config.store.path) as conn:
            rows = conn.execute(
                "SELECT s.body, e.type, e.body FROM steps AS s "
                "LEFT JOIN events AS e ON e.run_id = s.run_id AND e.seq = s.seq"
            ).fetchall()
            assert rows, "no step was stored"
            assert [(bytes(own), kind) for own, kind, _ in rows] == [(b"", "step")] * len(rows)
            from_events = [msgspec.json.decode(body)["step"] for _, _, body in rows]
            as_json = [
                msgspec.json.decode(msgspec.json.encode(s)) for v in stored.values() for s in v
            ]
            assert as_json == from_events
            # As an older agentrt left it: the step's JSON in its row.
            conn.execute(
                "UPDATE steps SET seq = NULL, body = (SELECT json_extract(e.body, '$.step') "
                "FROM events AS e WHERE e.run_id = steps.run_id AND e.seq = steps.seq)"
            )
        assert await manager.store.steps(info.run_id) == stored


class _HangsAfterTheFirstStep:
    """A rollout's first call asks for a tool; every later call hangs (until
    the run is stopped).  ``hanging``: the calls hanging now."""

    def __init__(self) -> None:
        self.scripted = ScriptedBackend(
            lambda _request: ScriptedToolCall("calculator", {"expression": "1+1"})
        )
        self.hanging = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.scripted, name)

    async def _hang_after_the_first(self, request: ModelRequest) -> None:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            self.hanging += 1
            await anyio.sleep_forever()

    async def complete(self, request: ModelRequest) -> Any:
        await self._hang_after_the_first(request)
        return await self.scripted.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        await self._hang_after_the_first(request)
        async for delta in self.scripted.stream(request):
            yield delta


async def test_a_resumed_run_charges_every_committed_step_before_any_rollout_calls(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """Four rollouts committed a step each and had their second call in
    flight when the daemon stopped: the cap (8 calls) is spent.  The next
    daemon charges the 4 steps and the 4 cut calls before any rollout goes
    on, so it makes no call; charging a rollout's steps only when that
    rollout started let the first ones call past the cap."""
    config = daemon_kit.config(tmp_path)
    first = _HangsAfterTheFirstStep()
    request = RunRequest(
        task="q",
        agent="solver",
        scaling=ScalingSpec(rollouts=4),
        budget=Budget(max_model_calls=8),
    )
    async with RunManager(config, backends=[first]) as manager:
        info = await manager.submit(request)
        with anyio.fail_after(30):
            while first.hanging < 4:  # noqa: ASYNC110 (the backend's count, no event)
                await anyio.sleep(0.005)
        await manager.drain(0)
    second = ScriptedBackend(["42"], on_exhausted="repeat_last")
    async with RunManager(config, backends=[second]) as manager:
        with anyio.fail_after(30):
            done = await manager.wait(info.run_id)
    assert second.requests == [], f"{len(second.requests)} calls past the spent cap"
    assert done.cost.model_calls == 8, done.cost


async def test_a_write_is_queued_at_once_while_there_is_room_and_waits_once_full() -> None:
    """``offer`` queues a write with no wait while fewer than ``capacity``
    wait and refuses it (nothing queued) past that; ``put`` then waits for
    the writer to take a batch; every write is committed, in order; once
    closed, ``offer`` refuses and ``put`` raises."""
    taken = threading.Event()
    release = threading.Event()
    committed: list[str | tuple[str, int]] = []

    def commit(batch: Sequence[Write]) -> None:
        taken.set()
        release.wait(30)
        committed.extend(write.what for write in batch)

    queue = CommitQueue(commit, lambda write: RuntimeError(write.what), batch=1, capacity=2)
    put_done = anyio.Event()

    async def put_when_room(write: Write) -> None:
        await queue.put(write)
        put_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.run)
        assert queue.offer(Write([], "w0"))
        await anyio.to_thread.run_sync(taken.wait, 30)  # the writer holds w0
        assert queue.offer(Write([], "w1"))
        assert queue.offer(Write([], "w2"))
        assert not queue.offer(Write([], "refused"))
        assert queue.depth == 2
        tg.start_soon(put_when_room, Write([], "w3"))
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        assert not put_done.is_set()  # waits for room
        release.set()
        with anyio.fail_after(30):
            await put_done.wait()
        queue.close()
    assert committed == ["w0", "w1", "w2", "w3"]
    assert not queue.offer(Write([], "late"))
    with pytest.raises(anyio.ClosedResourceError):
        await queue.put(Write([], "late"))
