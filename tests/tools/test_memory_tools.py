"""The memory tools: search keys, get values, store through admission."""

from __future__ import annotations

import pytest

from agentrt.runtime.memory._admission import Candidate
from agentrt.runtime.memory._bank import MemoryBank
from agentrt.runtime.memory._view import NOTE_HEADER, MemoryView
from agentrt.tools._memory_tools import memory_tools
from agentrt.tools._tool import Tool, ToolContext

pytestmark = pytest.mark.anyio


async def test_store_search_and_get_round_trip() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-1")
        tools: dict[str, Tool] = {t.spec.name: t for t in memory_tools(view)}
        assert sorted(tools) == ["memory_get", "memory_search", "memory_store"]
        ctx = ToolContext(run_id="run-1", rollout_id="r0")

        stored = await tools["memory_store"].call(
            {"key": "zinc melts at 420 C", "value": "Zinc: melting point 419.5 C (CRC)"}, ctx
        )
        assert stored.text.startswith("stored as item ")
        item_id = int(stored.text.split()[3])

        dup = await tools["memory_store"].call(
            {"key": "Zinc melts at 420 C.", "value": "same again"}, ctx
        )
        assert dup.text.startswith("not stored: near-duplicate")

        found = await tools["memory_search"].call({"query": "zinc melting"}, ctx)
        assert found.text.startswith(NOTE_HEADER)
        assert f"[{item_id}] zinc melts at 420 C (unverified)" in found.text

        got = await tools["memory_get"].call({"id": item_id}, ctx)
        assert (got.text, got.is_error) == ("Zinc: melting point 419.5 C (CRC)", False)

        item = await bank.get(item_id, view.owners, count_hit=False)
        assert item is not None
        assert (item.source_rollout, item.verified, item.hits) == ("r0", False, 1)


async def test_bad_arguments_and_unknown_ids_are_errors_the_model_can_read() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-1")
        search, get, store = memory_tools(view)
        ctx = ToolContext()
        missing = await get.call({"id": 12345}, ctx)
        assert missing.is_error
        assert "no shared memory item 12345" in missing.text
        wrong = await get.call({"id": "7"}, ctx)
        assert wrong.is_error
        assert "must be an integer" in wrong.text
        empty = await store.call({"key": "  ", "value": "v"}, ctx)
        assert empty.is_error
        assert "'key'" in empty.text
        nothing = await search.call({"query": "anything at all"}, ctx)
        assert not nothing.is_error
        assert nothing.text.startswith("no shared memory matches")


async def test_another_runs_items_are_invisible() -> None:
    async with MemoryBank() as bank:
        mine = MemoryView(bank, run_id="run-1")
        theirs = MemoryView(bank, run_id="run-2")
        _, item_id = await mine.offer(
            Candidate(key="private finding", value="only for run 1", verified=True)
        )
        assert item_id is not None
        _, get, _ = memory_tools(theirs)
        result = await get.call({"id": item_id}, ToolContext())
        assert result.is_error
