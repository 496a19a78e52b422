"""``RecordingSink`` records notifications in order and waits for one."""

from __future__ import annotations

import anyio
import pytest

from agentrt.testing import RecordingSink

pytestmark = pytest.mark.anyio


async def test_records_in_order_and_waits_for_a_match() -> None:
    sink = RecordingSink()
    async with anyio.create_task_group() as tg:

        async def later() -> None:
            await sink("log", {"message": "a"})
            await anyio.sleep(0.01)
            await sink("progress", {"progress": 2})

        tg.start_soon(later)
        found = await sink.wait_for("progress", lambda p: p["progress"] == 2, within=5)
    assert found == {"progress": 2}
    assert sink.events == [("log", {"message": "a"}), ("progress", {"progress": 2})]
    assert sink.of("log") == [{"message": "a"}]


async def test_wait_for_times_out() -> None:
    sink = RecordingSink()
    await sink("log", {"message": "a"})
    with pytest.raises(TimeoutError):
        await sink.wait_for("log", lambda p: p["message"] == "b", within=0.05)
