"""``Turns``: a burst of work on the API's loop goes on a slice per loop
turn, first come first served, the loop turning in between; and the
daemon's bridge resumes a burst of admitted runs through it.  Counted in
loop turns, never timed."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.protocols import RunRequest, ScalingSpec
from agentrt.runtime.serve._bridge import ManagerBridge
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve._turns import Turns

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


class _Clock:
    """Counts the loop's turns: one task steps once per turn."""

    def __init__(self) -> None:
        self.now = 0

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.now += 1


async def _burst(turns: Turns, clock: _Clock, n: int) -> list[tuple[int, int]]:
    """``n`` tasks taking ``turns`` in the same turn; (task, turn) as each went on."""
    went_on: list[tuple[int, int]] = []

    async def taker(k: int) -> None:
        await turns.take()
        went_on.append((k, clock.now))

    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.tick)
        await asyncio.sleep(0)  # the clock is running
        async with anyio.create_task_group() as burst:
            for k in range(n):
                burst.start_soon(taker, k)
        tg.cancel_scope.cancel()
    return went_on


async def test_a_spent_turn_sends_the_rest_of_a_burst_to_later_turns_in_order() -> None:
    turns = Turns(slice_s=0.0)  # a turn has room for its first taker only
    clock = _Clock()
    went_on = await _burst(turns, clock, 20)
    assert [k for k, _ in went_on] == list(range(20))  # first come, first served
    at = [t for _, t in went_on]
    assert all(b > a for a, b in itertools.pairwise(at)), at  # the loop turned between
    assert turns.turns == 20
    assert turns.waits == 19
    assert turns.waiting == 0


async def test_a_burst_that_fits_in_the_slice_goes_on_in_one_turn() -> None:
    turns = Turns(slice_s=3600.0)
    clock = _Clock()
    went_on = await _burst(turns, clock, 20)
    assert [k for k, _ in went_on] == list(range(20))
    assert len({t for _, t in went_on}) == 1
    assert turns.turns == 1
    assert turns.waits == 0


async def test_callbacks_wait_their_turn_in_order_with_tasks() -> None:
    turns = Turns(slice_s=0.0)
    clock = _Clock()
    order: list[str] = []
    all_in = anyio.Event()

    def went_on(name: str) -> None:
        order.append(name)
        if len(order) == 5:
            all_in.set()

    async def task(name: str) -> None:
        await turns.take()
        went_on(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.tick)
        await asyncio.sleep(0)
        async with anyio.create_task_group() as burst:
            burst.start_soon(task, "t0")
            await asyncio.sleep(0)  # t0 took this turn
            turns.run(lambda: went_on("c1"))
            burst.start_soon(task, "t2")
            await asyncio.sleep(0)
            turns.run(lambda: went_on("c3"))
            turns.run(lambda: went_on("c4"))
            await all_in.wait()
        tg.cancel_scope.cancel()
    assert order == ["t0", "c1", "t2", "c3", "c4"]
    assert turns.waiting == 0


async def test_a_cancelled_waiter_does_not_hold_up_the_ones_behind_it() -> None:
    turns = Turns(slice_s=0.0)
    went_on: list[int] = []
    scopes: dict[int, anyio.CancelScope] = {}

    async def taker(k: int) -> None:
        with anyio.CancelScope() as scope:
            scopes[k] = scope
            await turns.take()
            went_on.append(k)

    async with anyio.create_task_group() as tg:
        for k in range(5):
            tg.start_soon(taker, k)
        await asyncio.sleep(0)  # all five are in: 0 went on, 1-4 wait
        scopes[1].cancel()
        scopes[2].cancel()
    assert went_on == [0, 3, 4]
    assert turns.waiting == 0


def test_a_negative_slice_is_refused() -> None:
    with pytest.raises(ValueError, match="slice_s"):
        Turns(slice_s=-1.0)


async def test_a_burst_of_admitted_runs_comes_back_a_turn_at_a_time(
    tmp_path: Path, daemon_kit: Any
) -> None:
    """20 runs posted at once through the bridge: the store commits them
    together and the run loop answers them together; the API side takes
    them up one per turn (slice 0), not all in one."""
    config = daemon_kit.config(tmp_path, server={"max_active_runs": 20})
    turns = Turns(slice_s=0.0)
    clock = _Clock()
    request = RunRequest(task="what is 2+2", agent="solver", scaling=ScalingSpec(rollouts=1))
    answered: list[int] = []
    async with RunManager(config, backends=[daemon_kit.scripted(steps=0)]) as manager:
        bridge = ManagerBridge(manager, asyncio.get_running_loop(), turns)

        async def post() -> None:
            await bridge.submit(request)
            answered.append(clock.now)

        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.tick)
            async with anyio.create_task_group() as burst:
                for _ in range(20):
                    burst.start_soon(post)
            tg.cancel_scope.cancel()
        for run_id in [info.run_id for info in (await manager.list(limit=50)).runs]:
            await manager.wait(run_id, timeout=30)
    assert len(answered) == 20
    assert len(set(answered)) == 20, answered  # one answer per loop turn
    assert turns.waits > 0
