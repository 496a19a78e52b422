"""``LoopStalls`` tells the API loop's own work from waiting: the longest
stall carries the CPU time the loop's thread spent in it; and it times the
loop only while requests are served (an idle API thread does not wake)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest

from agentrt.runtime.serve._pauses import LoopStalls

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]


async def _stall_once(stalls: LoopStalls, block: object) -> None:
    stalls.enter()  # a request in progress
    async with anyio.create_task_group() as tg:
        tg.start_soon(stalls.watch)
        await anyio.lowlevel.checkpoint()  # the watcher sleeps now
        assert callable(block)
        block()  # holds the loop: the watcher wakes late
        await anyio.sleep(2 * stalls.period_s)  # the watcher records it
        tg.cancel_scope.cancel()


def _spin_cpu(seconds: float) -> None:
    """Busy on this thread until it used ``seconds`` of CPU."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


async def test_a_stall_of_the_loops_own_work_is_its_cpu_time() -> None:
    stalls = LoopStalls(period_s=0.001)
    await _stall_once(stalls, lambda: _spin_cpu(0.05))
    assert stalls.longest_cpu >= 0.05
    metrics = {m.name: m for m in stalls.collect()}
    assert metrics["agentrt_api_stall_longest_cpu_seconds"].samples[0].value >= 0.05


async def test_a_stall_spent_waiting_costs_the_loop_no_cpu() -> None:
    stalls = LoopStalls(period_s=0.001)
    await _stall_once(stalls, lambda: time.sleep(0.1))  # as if the GIL were held elsewhere
    assert stalls.longest >= 0.05
    assert stalls.longest_cpu < stalls.longest / 2


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while not condition():  # noqa: ASYNC110 (a state of the watcher, no event)
            await anyio.sleep(0.001)


async def test_the_watcher_wakes_while_requests_are_served_and_sleeps_when_idle() -> None:
    stalls = LoopStalls(period_s=0.001, linger_s=0.005)
    async with anyio.create_task_group() as tg:
        tg.start_soon(stalls.watch)
        await _until(lambda: stalls.idle)  # no request yet: it waits
        assert stalls.wakeups == 0
        stalls.enter()
        await _until(lambda: stalls.wakeups >= 3)  # a request in progress: timed
        await anyio.sleep(0.02)  # past the linger, the request still going
        assert not stalls.idle
        stalls.leave()
        await _until(lambda: stalls.idle)  # the linger after the last one is over
        idle_at = stalls.wakeups
        await anyio.sleep(0.05)
        assert stalls.wakeups == idle_at  # idle: not one wake-up
        stalls.enter()
        await _until(lambda: stalls.wakeups > idle_at)  # the next request wakes it
        stalls.leave()
        tg.cancel_scope.cancel()
