"""Dedup under concurrency: many rollouts storing the same note at once get
one item -- through one run's view, through separate views (as Ray workers
have), and through two banks on one file (two processes)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from agentrt.agents import Agent, AgentConfig, RolloutContext
from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.runtime.memory._admission import Candidate
from agentrt.runtime.memory._bank import MemoryBank, NewItem
from agentrt.runtime.memory._view import MemoryView
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools._memory_tools import memory_tools

pytestmark = pytest.mark.anyio

KEY = "the staging database password rotates every Monday at 06:00 UTC"
VALUE = "Ops runbook section 4.2: staging credentials rotate weekly, Monday 06:00 UTC."
ROLLOUTS = 32


def note(rollout: str, *, verified: bool = False) -> Candidate:
    return Candidate(key=KEY, value=VALUE, rollout_id=rollout, verified=verified)


async def test_many_rollouts_storing_the_same_note_at_once_store_it_once() -> None:
    """32 agent rollouts of one run, each calling ``memory_store`` with the
    same note in its first step, all at once (the backend answers together)."""

    def model(request: ModelRequest) -> ReplySpec:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return "done"
        return ScriptedToolCall("memory_store", {"key": KEY, "value": VALUE})

    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-1")
        backend = ScriptedBackend(model, latency_s=0.01)
        agent = Agent(
            AgentConfig(name="noter"), backends=[backend], tools=memory_tools(view), memory=view
        )
        replies: list[str] = []

        async def one(i: int) -> None:
            result = await agent.run("note it", RolloutContext.new(run_id="run-1", index=i))
            replies.append(result.trajectory.steps[0].tool_results[0].content)

        async with anyio.create_task_group() as tg:
            for i in range(ROLLOUTS):
                tg.start_soon(one, i)
        assert await bank.count() == 1
        stored = [r for r in replies if r.startswith("stored as item")]
        assert len(stored) == 1
        assert all(r.startswith("not stored: near-duplicate") for r in replies if r not in stored)
        assert (view.offered, view.admitted) == (ROLLOUTS, 1)


async def test_separate_views_on_one_bank_store_one_item() -> None:
    """Views that do not share a lock (one per Ray worker): the bank's
    unique key holds; every admitted offer gets the one item's id, and a
    verified copy marks it verified."""
    async with MemoryBank() as bank:
        views = [MemoryView(bank, run_id="run-1") for _ in range(ROLLOUTS)]
        ids: list[int | None] = []

        async def offer(i: int) -> None:
            _, item_id = await views[i].offer(note(f"r{i}", verified=i == ROLLOUTS - 1))
            ids.append(item_id)

        async with anyio.create_task_group() as tg:
            for i in range(ROLLOUTS):
                tg.start_soon(offer, i)
        assert await bank.count() == 1
        assert len({i for i in ids if i is not None}) == 1
        (hit,) = await bank.keys(views[0].owners)
        item = await bank.get(hit.id, views[0].owners, count_hit=False)
        assert item is not None
        assert item.key == KEY
        # Whichever order the offers landed in, the item is as good as the best.
        assert item.verified or ids.count(None) > 0


async def test_two_banks_on_one_file_store_one_item(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    async with MemoryBank(path) as first, MemoryBank(path) as second:
        ids: list[int] = []

        async def put(bank: MemoryBank, i: int) -> None:
            # Keys differing only in whitespace are one key.
            key = KEY if i % 2 else f"  {KEY.replace(' ', '  ')} "
            item = NewItem(scope="run", owner="run-1", key=key, value=VALUE, score=i / 100)
            ids.append(await bank.put(item))

        async with anyio.create_task_group() as tg:
            for i in range(ROLLOUTS):
                tg.start_soon(put, first if i % 2 else second, i)
        assert await first.count() == await second.count() == 1
        assert len(set(ids)) == 1
        item = await first.get(ids[0], [("run", "run-1")], count_hit=False)
        assert item is not None
        assert item.key == KEY
        assert item.score == pytest.approx((ROLLOUTS - 1) / 100)  # the highest offered


async def test_a_file_with_duplicates_from_before_is_deduplicated_on_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    async with MemoryBank(path) as bank:
        await bank.put(NewItem(scope="run", owner="o", key=KEY, value=VALUE))
    # What a bank without the unique key could leave behind.
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX items_version")
    conn.execute(
        "INSERT INTO items (scope, owner, key, value, created_at, bytes) "
        "SELECT scope, owner, key, value, created_at, bytes FROM items"
    )
    conn.commit()
    assert conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 2
    conn.close()
    async with MemoryBank(path) as bank:
        assert await bank.count() == 1
        hits = await bank.search("staging", [("run", "o")])
        assert len(hits) == 1
