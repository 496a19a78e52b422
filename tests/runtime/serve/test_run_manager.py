"""``RunManager``'s lifecycle (opened once; a failed start closes what it
opened, in reverse order) and its state read from another thread while runs
start and finish (the daemon's API thread)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from agentrt.protocols import Budget, RunRequest, RunResult, ScalingSpec
from agentrt.protocols._api import TERMINAL_STATUSES
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve.store._run_store import RunStore

pytestmark = pytest.mark.anyio


class _FakeRuntime:
    """Stands in for ``Runtime``: records its lifecycle; its runs wait until
    cancelled (or fail to start, with ``fail``)."""

    prices = None

    def __init__(self, *, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.log: list[str] = []
        self.running = anyio.Event()

    async def __aenter__(self) -> _FakeRuntime:
        self.log.append("enter")
        if self.fail is not None:
            raise self.fail
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.log.append("exit")

    async def run(self, task: str, **_: Any) -> RunResult:
        self.log.append(f"run {task}")
        self.running.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.log.append(f"stopped {task}")
        raise AssertionError("unreachable")


async def _store_is_closed(path: str) -> bool:
    """The store file is free again (an open ``RunStore`` holds its lock)."""
    try:
        async with RunStore(path):
            return True
    except Exception:
        return False


async def _assert_closed_for_good(manager: RunManager) -> None:
    """Neither ready nor accepting, and it cannot be opened again."""
    assert (manager.ready, manager.accepting) == (False, False)
    with pytest.raises(RuntimeError, match="Cannot reopen a RunManager once it has been closed"):
        async with manager:
            pass


async def test_a_failed_runtime_start_closes_the_store_and_refuses_a_reopen(
    tmp_path: Path, daemon_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = daemon_kit.config(tmp_path)
    manager = RunManager(config)
    runtime = _FakeRuntime(fail=OSError("backend 'vllm' refused to start"))
    monkeypatch.setattr(manager, "runtime", runtime)
    with anyio.fail_after(10):
        with pytest.raises(OSError, match="refused to start"):
            async with manager:
                raise AssertionError("must not be reached")
    assert runtime.log == ["enter"]
    assert await _store_is_closed(manager.store.path)
    await _assert_closed_for_good(manager)


async def test_a_failed_resume_stops_the_resumed_runs_and_closes_everything(
    tmp_path: Path, daemon_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure lands after the task group is open and a resumed run is
    executing in it: the run is stopped, the task group closed, then the
    runtime, then the store; the error reaches the caller."""
    config = daemon_kit.config(tmp_path)
    async with RunStore(config.store.path) as store:
        await store.create_run("run-a", RunRequest(task="a"))
        await store.create_run("run-b", RunRequest(task="b"))
    manager = RunManager(config)
    runtime = _FakeRuntime()
    monkeypatch.setattr(manager, "runtime", runtime)
    read = manager.store.request
    calls = 0

    async def second_fails(run_id: str) -> RunRequest | None:
        nonlocal calls
        calls += 1
        if calls == 2:
            await runtime.running.wait()  # run-a executes in the task group
            raise OSError("disk I/O error")
        return await read(run_id)

    monkeypatch.setattr(manager.store, "request", second_fails)
    # Exiting this scope fails if a task group was left open inside it.
    with anyio.fail_after(10):
        with pytest.raises(OSError, match="disk I/O error"):
            async with manager:
                raise AssertionError("must not be reached")
    assert runtime.log == ["enter", "run a", "stopped a", "exit"]
    assert await _store_is_closed(config.store.path)
    with pytest.raises(RuntimeError, match="Cannot reopen"):
        async with manager:
            pass


async def test_a_manager_opens_once(tmp_path: Path, daemon_kit: Any) -> None:
    manager = RunManager(daemon_kit.config(tmp_path), backends=[daemon_kit.scripted(steps=0)])
    async with manager:
        assert (manager.ready, manager.accepting) == (True, True)
        with pytest.raises(RuntimeError, match="already open"):
            async with manager:
                pass
        info = await manager.submit(RunRequest(task="q", agent="solver"))
        assert (await manager.wait(info.run_id, timeout=10)).status in TERMINAL_STATUSES
    await _assert_closed_for_good(manager)


async def test_an_error_in_the_body_propagates_as_itself(
    tmp_path: Path, daemon_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not wrapped in the ``ExceptionGroup`` of the runs' task group, and the
    run still executing is stopped first."""
    manager = RunManager(daemon_kit.config(tmp_path))
    runtime = _FakeRuntime()
    monkeypatch.setattr(manager, "runtime", runtime)

    async def use() -> None:
        async with manager:
            await manager.submit(RunRequest(task="q"))
            await runtime.running.wait()
            raise LookupError("from the body")

    with anyio.fail_after(10), pytest.raises(LookupError, match="from the body"):
        await use()
    assert runtime.log == ["enter", "run q", "stopped q", "exit"]
    assert await _store_is_closed(manager.store.path)


class _SlowFromOtherThreads(dict[str, Any]):
    """A dict whose lookups from a thread other than ``owner`` sleep first
    (releasing the GIL): it widens every check-then-act window of a reader
    on the API thread, so an unguarded one loses the race within a few runs
    instead of once in a blue moon (or always, on a free-threaded build)."""

    def __init__(self, data: dict[str, Any], owner: int) -> None:
        super().__init__(data)
        self.owner = owner

    def _pause(self) -> None:
        if threading.get_ident() != self.owner:
            time.sleep(0.0005)

    def __contains__(self, key: object) -> bool:
        self._pause()
        return super().__contains__(key)

    def __getitem__(self, key: str) -> Any:
        self._pause()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._pause()
        return super().get(key, default)


async def test_reads_from_another_thread_while_runs_start_and_finish(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """The daemon's API thread lists and reads runs while the run loop adds,
    updates and drops them (``finished_runs_cached`` 2: finished runs are
    evicted all the time).  Unguarded, ``list`` raised ``KeyError`` when a
    run left ``_live`` between its membership test and its lookup."""
    config = daemon_kit.config(tmp_path, server={"finished_runs_cached": 2})
    errors: list[BaseException] = []
    reads = 0
    stop = threading.Event()

    async with RunManager(config, backends=[daemon_kit.scripted(steps=1)]) as manager:
        run_loop = threading.get_ident()
        manager._live = _SlowFromOtherThreads(manager._live, run_loop)
        manager._finished = _SlowFromOtherThreads(manager._finished, run_loop)

        async def hammer() -> None:
            nonlocal reads
            while not stop.is_set():
                page = await manager.list(limit=100)
                for info in page.runs[:5]:
                    await manager.get(info.run_id)
                    await manager.detail(info.run_id)
                manager.active()
                reads += 1

        def api_thread() -> None:
            try:
                anyio.run(hammer)
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        thread = threading.Thread(target=api_thread, name="test-api")
        thread.start()
        try:
            with anyio.fail_after(20):
                for _wave in range(5):
                    infos = [
                        await manager.submit(
                            RunRequest(
                                task="add",
                                agent="solver",
                                scaling=ScalingSpec(rollouts=2),
                                budget=Budget(max_model_calls=10),
                            )
                        )
                        for _ in range(16)
                    ]
                    for info in infos:
                        await manager.wait(info.run_id)
                    if errors:
                        break
        finally:
            stop.set()
            await anyio.to_thread.run_sync(thread.join)
    assert errors == []
    assert reads > 0


def test_a_live_runs_updated_at_follows_each_committed_event() -> None:
    """Most of a run's events change nothing of its ``RunInfo`` but the
    time (the call journal's, tool calls): ``apply`` keeps that time apart
    instead of a new ``RunInfo`` per event, and what clients read
    (``current``) carries it; an event that changes the run (its cost)
    moves the time the same way."""
    from agentrt.protocols._api import RunInfo
    from agentrt.protocols._events import BudgetUpdated, CallReserved, ToolCalled
    from agentrt.protocols._usage import Cost
    from agentrt.runtime.serve._run_manager import _Live

    info = RunInfo(
        run_id="r", status="running", agent="solver", task="t", created_at=1.0, updated_at=1.0
    )
    live = _Live(info=info, request=RunRequest(task="t"))
    assert live.current() is info

    before = time.time()
    live.apply(
        CallReserved(run_id="r", seq=1, call="c", model="m", prompt_tokens=5, completion_tokens=5)
    )
    first = live.current()
    assert first.updated_at >= before
    assert msgspec.structs.replace(first, updated_at=1.0) == info  # nothing else changed
    live.apply(
        ToolCalled(run_id="r", seq=2, rollout_id="r-r0", call_id="t", tool="x", arguments="{}")
    )
    assert live.current().updated_at >= first.updated_at

    live.apply(BudgetUpdated(run_id="r", seq=3, spent=Cost(usd=0.5)))
    costed = live.current()
    assert costed.cost == Cost(usd=0.5)
    assert costed.updated_at >= first.updated_at
