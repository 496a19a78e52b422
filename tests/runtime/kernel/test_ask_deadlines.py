"""Ask deadlines (``AskDeadlines``): an ask answered in time leaves no timer
behind, however long its deadline; one not answered fails with
``AskTimeout`` when its deadline passes."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from agentrt.runtime.kernel._actor_errors import AskTimeout
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._deadlines import AskDeadlines

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]

ADDRESS = ActorAddress("test", "/user/echo")
MONTH_S = 30 * 24 * 3600.0


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
