"""Memory with corroboration (issue 28, item 5): a tool result becomes shared
only when enough rollouts got the same result (or a verifying tool gave it);
conflicting results are kept as versions with their sources, and readers see
how far the rollouts agree."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentrt.runtime.memory._admission import AdmissionConfig
from agentrt.runtime.memory._bank import MemoryBank
from agentrt.runtime.memory._view import MemoryView, recheck_source

pytestmark = pytest.mark.anyio

CALL = '{"doc":"doc-alpha"}'


def weighs(kg: int) -> str:
    return f"fact alpha: alpha weighs {kg} kg (source: registry entry alpha)"


async def offer(view: MemoryView, rollout: str, kg: int, tool: str = "fetch") -> int:
    candidate = view.tool_candidate(tool, CALL, weighs(kg), rollout_id=rollout, step=1)
    assert candidate is not None
    decision, item_id = await view.offer(candidate)
    assert decision.admitted, decision.reason
    assert item_id is not None
    return item_id


async def test_a_result_is_shared_once_two_rollouts_got_it() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run")
        first = await offer(view, "r0", 42)
        assert await bank.keys(view.owners) == []  # one rollout's word is not shared
        assert await view.get(first) is None
        assert await offer(view, "r0", 42) == first  # the same rollout again: no support
        assert await bank.keys(view.owners) == []
        assert await offer(view, "r1", 42) == first
        [hit] = await bank.keys(view.owners)
        assert (hit.id, hit.support, hit.asked) == (first, 2, 2)
        item = await view.get(first)
        assert item is not None
        assert item.sources == ["r0", "r1"]
        assert view.note([hit]).endswith("(2 calls agree)")


async def test_a_conflicting_result_is_a_version_not_a_duplicate() -> None:
    """A wrong value stored first no longer shuts out the right one: each
    value of the call is kept with its sources, and the note says how many
    of the rollouts that made the call agree with each."""
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run")
        wrong = await offer(view, "r0", 45)
        right = await offer(view, "r1", 42)
        assert wrong != right
        await offer(view, "r2", 42)
        await offer(view, "r3", 45)
        await offer(view, "r4", 42)
        hits = {h.id: h for h in await view.search("alpha weighs")}
        assert set(hits) == {wrong, right}
        assert (hits[right].support, hits[right].asked) == (3, 5)
        assert (hits[wrong].support, hits[wrong].asked) == (2, 5)
        note = view.note([hits[right], hits[wrong]])
        assert "42 kg" in note.splitlines()[1]
        assert note.splitlines()[1].endswith("(3 of 5 calls agree)")
        assert note.splitlines()[2].endswith("(2 of 5 calls agree)")


async def test_a_verifying_tools_result_is_shared_at_once() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run", verifiers={"checked_fetch"})
        item_id = await offer(view, "r0", 42, tool="checked_fetch")
        [hit] = await bank.keys(view.owners)
        assert (hit.id, hit.support) == (item_id, 1)
        assert view.note([hit]).endswith(hit.key)  # no standing to report


async def test_corroborate_1_shares_the_first_result_as_before() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run", corroborate=1)
        item_id = await offer(view, "r0", 42)
        assert [h.id for h in await bank.keys(view.owners)] == [item_id]
    assert AdmissionConfig().corroborate == 2  # the runtime's default
    with pytest.raises(ValueError, match="corroborate must be >= 1"):
        MemoryView(bank, run_id="run", corroborate=0)


async def test_a_bank_file_from_before_versions_opens_with_its_items(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE items (id INTEGER PRIMARY KEY, scope TEXT NOT NULL, owner TEXT NOT NULL,
            key TEXT NOT NULL, value TEXT NOT NULL, run_id TEXT NOT NULL DEFAULT '',
            task_id TEXT NOT NULL DEFAULT '', source_rollout TEXT NOT NULL DEFAULT '',
            source_step INTEGER NOT NULL DEFAULT -1, verified INTEGER NOT NULL DEFAULT 0,
            score REAL NOT NULL DEFAULT 0, created_at REAL NOT NULL, expires_at REAL,
            hits INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL);
        CREATE UNIQUE INDEX items_key ON items(scope, owner, key);
        CREATE VIRTUAL TABLE items_fts USING fts5(
            key, value, content='items', content_rowid='id', tokenize='porter unicode61');
        CREATE TRIGGER items_ai AFTER INSERT ON items BEGIN
            INSERT INTO items_fts(rowid, key, value) VALUES (new.id, new.key, new.value);
        END;
        INSERT INTO items (scope, owner, key, value, verified, created_at, bytes)
            VALUES ('global', '', 'alpha weighs 42 kg', 'registry: alpha 42 kg', 1, 0, 40);
        """
    )
    conn.commit()
    conn.close()
    async with MemoryBank(path) as bank:
        [hit] = await bank.search("alpha", [("global", "")])
        assert (hit.key, hit.support, hit.asked) == ("alpha weighs 42 kg", 1, 0)


async def test_a_call_is_worth_a_second_call_until_the_bank_shares_a_result() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run", verifiers={"checked_fetch"})
        assert await view.wants_recheck("fetch", CALL)
        await offer(view, "r0", 42)
        assert await view.wants_recheck("fetch", CALL)  # one call's word is not shared
        await offer(view, recheck_source("r0"), 42)
        # The second call agreed: the two are two sources, and shared.
        [hit] = await bank.keys(view.owners)
        item = await view.get(hit.id)
        assert item is not None
        assert item.sources == ["r0", "r0/recheck"]
        assert not await view.wants_recheck("fetch", CALL)
        assert await view.wants_recheck("fetch", '{"doc":"doc-beta"}')
        # Never for a verifier (shared at once), a memory tool, or with
        # rechecks off or one call enough.
        assert not await view.wants_recheck("checked_fetch", CALL)
        assert not await view.wants_recheck("memory_get", '{"id":1}')
        assert not await MemoryView(bank, run_id="run", recheck=False).wants_recheck("f", CALL)
        assert not await MemoryView(bank, run_id="run", corroborate=1).wants_recheck("f", CALL)


async def test_a_call_whose_result_the_policy_refused_is_not_made_twice() -> None:
    """A second call of it would be refused too (here an empty answer; on
    bench/memory.py, searches whose keys are near-duplicates of others')."""
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run")
        candidate = view.tool_candidate("fetch", CALL, "not found", rollout_id="r0", step=1)
        assert candidate is not None
        decision, item_id = await view.offer(candidate)
        assert (decision.admitted, item_id) == (False, None)
        assert not await view.wants_recheck("fetch", CALL)
        assert await view.wants_recheck("fetch", '{"doc":"doc-beta"}')
