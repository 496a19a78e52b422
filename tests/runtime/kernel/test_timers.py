"""The timers (``runtime/kernel/_timers.py``).  ``TaskDeadlines``: a deadline
per await, kept by loop timers shared per slot, that cancels the awaiting
task, told apart from every other cancellation; never early and at most 1/64
of its limit late.  ``AskDeadlines``: an ask answered in time leaves no timer
behind, however long its deadline; one not answered fails with
``AskTimeout`` when its deadline passes."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import anyio
import pytest

from agentrt.runtime.kernel._actor_errors import AskTimeout
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._timers import (
    MIN_GRAIN_S,
    AskDeadlines,
    TaskDeadlines,
    current_task,
    slot_time,
)

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]

ADDRESS = ActorAddress("test", "/user/echo")
MONTH_S = 30 * 24 * 3600.0


# --- the slot rule -------------------------------------------------------------


def test_a_slot_is_never_early_and_at_most_one_grain_late() -> None:
    for seconds in (0.0, 1e-6, 0.05, 1.0, 30.0, 300.0, MONTH_S):
        for when in (0.0, 0.1234567, 1234.5678, 98765.4321):
            slot = slot_time(when + seconds, seconds)
            assert slot >= when + seconds
            assert slot - (when + seconds) <= max(seconds / 64, MIN_GRAIN_S)
            assert slot_time(slot, seconds) == slot  # a slot is its own slot
    assert math.ldexp(1.0, -10) == MIN_GRAIN_S
    # Deadlines set together share a slot; a coarser grain for a longer limit.
    assert slot_time(100.0001, 30) == slot_time(100.0002, 30)
    assert slot_time(100.0001, 0.01) != slot_time(100.0011, 0.01)


# --- TaskDeadlines -------------------------------------------------------------


async def bounded(deadlines: TaskDeadlines, seconds: float | None, wait: float) -> str:
    """Await ``anyio.sleep(wait)`` under the deadline: "done" or "timed out"."""
    task = current_task()
    timer = deadlines.arm(task, seconds)
    try:
        await anyio.sleep(wait)
    except asyncio.CancelledError:
        if not await deadlines.expired(task, timer):
            raise
        return "timed out"
    finally:
        deadlines.disarm(task, timer)
    return "done"


async def test_a_deadline_cuts_a_wait_and_leaves_the_task_uncancelled() -> None:
    deadlines = TaskDeadlines()
    # "timed out", not "done": the 10 s wait was cut by the deadline.
    assert await bounded(deadlines, 0.05, 10) == "timed out"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await anyio.sleep(0.01)  # not cancelled again
    assert await bounded(deadlines, 1, 0.01) == "done"


async def test_no_limit_and_a_call_within_it_are_left_alone() -> None:
    deadlines = TaskDeadlines()
    task = current_task()
    assert deadlines.arm(task, None) is None
    assert await bounded(deadlines, None, 0.01) == "done"
    assert await bounded(deadlines, 5, 0.01) == "done"
    timer = deadlines.arm(task, 5)
    assert deadlines.disarm(task, timer) is False  # it never fired
    assert deadlines.disarm(task, timer) is False  # idempotent


async def test_an_enclosing_scope_that_fires_first_is_a_plain_cancellation() -> None:
    deadlines = TaskDeadlines()
    with anyio.move_on_after(0.05) as outer:
        await bounded(deadlines, 5, 10)
    assert outer.cancelled_caught


async def test_a_scope_cancelled_as_the_deadline_fires_wins() -> None:
    """The scope is cancelled, then the loop is held past the deadline: both
    reach the task in one iteration; the scope's cancellation must arrive
    (not a timeout), and nothing stays cancelled afterwards."""
    deadlines = TaskDeadlines()
    outcome: list[str] = []
    task = current_task()
    with anyio.CancelScope() as outer:
        timer = deadlines.arm(task, 0.02)
        try:
            outer.cancel()
            time.sleep(0.1)  # noqa: ASYNC251 - the point: the deadline passes meanwhile
            await anyio.sleep(10)
        except asyncio.CancelledError:
            if await deadlines.expired(task, timer):
                outcome.append("timed out")
            raise
        finally:
            deadlines.disarm(task, timer)
    assert outer.cancelled_caught
    assert outcome == []
    await anyio.sleep(0.01)


async def test_concurrent_tasks_each_have_their_own_deadline() -> None:
    deadlines = TaskDeadlines()
    results: dict[int, str] = {}

    async def one(index: int) -> None:
        results[index] = await bounded(deadlines, 0.05 if index % 2 else 5, 0.3)

    async with anyio.create_task_group() as tg:
        for index in range(20):
            tg.start_soon(one, index)
    assert {i: r for i, r in results.items() if i % 2} == dict.fromkeys(
        range(1, 20, 2), "timed out"
    )
    assert {i: r for i, r in results.items() if not i % 2} == dict.fromkeys(range(0, 20, 2), "done")


async def test_a_native_cancellation_with_the_deadline_is_not_taken_for_it() -> None:
    """Someone else cancels the task (``Task.cancel``) in the iteration the
    deadline fires: two cancellations, so the one that arrives is not the
    deadline's own."""
    deadlines = TaskDeadlines()
    task = current_task()
    taken: list[bool] = []

    async def call() -> None:
        timer = deadlines.arm(task, 0.02)
        try:
            task.get_loop().call_soon(task.cancel)
            time.sleep(0.1)  # noqa: ASYNC251 - the deadline passes meanwhile
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            taken.append(await deadlines.expired(task, timer))
            raise
        finally:
            deadlines.disarm(task, timer)

    with pytest.raises(asyncio.CancelledError):
        await call()
    assert taken == [False]
    assert task.uncancel() == 0  # the other cancellation, and only it, was left


async def test_nested_deadlines_of_one_owner_in_one_task_each_get_their_own() -> None:
    """A tool that runs the same agent again: an inner deadline that fires
    is the inner call's timeout and the outer call goes on; the outer one
    firing during the inner call is the outer call's, not the inner's."""
    deadlines = TaskDeadlines()

    async def outer(outer_s: float, inner_s: float, inner_wait: float) -> tuple[str, str]:
        inner = "not run"

        async def body() -> None:
            nonlocal inner
            inner = await bounded(deadlines, inner_s, inner_wait)
            await anyio.sleep(0.05)

        task = current_task()
        timer = deadlines.arm(task, outer_s)
        try:
            await body()
        except asyncio.CancelledError:
            if not await deadlines.expired(task, timer):
                raise
            return "timed out", inner
        finally:
            deadlines.disarm(task, timer)
        return "done", inner

    assert await outer(5, 0.02, 10) == ("done", "timed out")
    assert await outer(0.05, 5, 10) == ("timed out", "not run")
    task = current_task()
    assert task.cancelling() == 0
    await anyio.sleep(0.01)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a loop whose call_at can be counted
async def test_deadlines_armed_together_share_a_loop_timer_and_none_fires_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deadlines = TaskDeadlines()
    loop = asyncio.get_running_loop()
    scheduled: list[float] = []
    call_at = loop.call_at

    def counted(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        if getattr(args[0], "__self__", None) is deadlines:  # not anyio.sleep's timers
            scheduled.append(when)
        return call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counted)
    # The 200 arms read one instant of the loop's clock (frozen until every
    # task has armed): how many timers they share does not depend on how fast
    # this machine runs 200 task steps.
    real_time = loop.time
    frozen = [real_time()]
    monkeypatch.setattr(loop, "time", lambda: frozen[0] if frozen else real_time())
    waited: list[float] = []

    async def one() -> None:
        started = loop.time()
        assert await bounded(deadlines, 0.05, 10) == "timed out"
        waited.append(loop.time() - started)

    async def thaw() -> None:
        frozen.clear()  # runs after every task above took its first step

    async with anyio.create_task_group() as tg:
        for _ in range(200):
            tg.start_soon(one)
        tg.start_soon(thaw)
    assert len(waited) == 200
    assert min(waited) >= 0.05
    # One timer for the slot all 200 fell in, not one per call.
    assert len(scheduled) == 1


# --- AskDeadlines --------------------------------------------------------------


async def test_an_answered_ask_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines()
    replies = [loop.create_future() for _ in range(3)]
    slots = [deadlines.watch(loop, reply, MONTH_S, ADDRESS, "ping") for reply in replies]
    assert len(deadlines) == 3
    assert deadlines.timers >= 1
    for reply, slot in zip(replies, slots, strict=True):
        reply.set_result("pong")
        deadlines.unwatch(slot, reply)
    assert len(deadlines) == 0
    assert deadlines.timers == 0  # before, each bucket's timer waited out its month


async def test_an_unanswered_ask_times_out_and_others_in_its_bucket_still_do() -> None:
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines()
    answered, waiting = loop.create_future(), loop.create_future()
    first = deadlines.watch(loop, answered, 0.05, ADDRESS, "ping")
    deadlines.watch(loop, waiting, 0.05, ADDRESS, "ping")
    answered.set_result("pong")
    deadlines.unwatch(first, answered)
    with anyio.fail_after(2):
        with pytest.raises(AskTimeout):
            await waiting
    assert deadlines.timers == 0
    assert len(deadlines) == 0
