"""``MemoryBank``: (key -> value) items shared by rollouts (LTS), over SQLite
with FTS5/BM25 retrieval.

Must not import agents, tools or aggregators (runtime floor).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Protocol, Self, TypeVar, final

import anyio
import msgspec
from pydantic import BaseModel, ConfigDict, Field

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.observe._log import get_logger

log = get_logger(__name__)

Scope = Literal["run", "task", "global"]
SCOPES: Final[tuple[Scope, ...]] = ("run", "task", "global")

#: Column weights for ``bm25``: key, value.  Keys are what rollouts match on.
KEY_WEIGHT: Final = 4.0
VALUE_WEIGHT: Final = 1.0

_T = TypeVar("_T")

_TABLE = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    run_id TEXT NOT NULL DEFAULT '',
    task_id TEXT NOT NULL DEFAULT '',
    source_rollout TEXT NOT NULL DEFAULT '',
    source_step INTEGER NOT NULL DEFAULT -1,
    verified INTEGER NOT NULL DEFAULT 0,
    score REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    expires_at REAL,
    hits INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL,
    claim TEXT NOT NULL DEFAULT '',
    digest TEXT NOT NULL DEFAULT '',
    support INTEGER NOT NULL DEFAULT 1,
    sources TEXT NOT NULL DEFAULT '',
    shared INTEGER NOT NULL DEFAULT 1
);
"""
#: Columns added since the first schema: a file from before gets them on open.
_ADDED: Final = (
    ("claim", "TEXT NOT NULL DEFAULT ''"),
    ("digest", "TEXT NOT NULL DEFAULT ''"),
    ("support", "INTEGER NOT NULL DEFAULT 1"),
    ("sources", "TEXT NOT NULL DEFAULT ''"),
    ("shared", "INTEGER NOT NULL DEFAULT 1"),
)

_SCHEMA = """
CREATE INDEX IF NOT EXISTS items_owner ON items(scope, owner, score, created_at);
CREATE INDEX IF NOT EXISTS items_expiry ON items(expires_at);
CREATE INDEX IF NOT EXISTS items_claim ON items(scope, owner, claim);
-- One item per key, value (digest; empty for notes, which have one value per
-- key) and owner: concurrent rollouts (or processes sharing the file) that
-- store the same thing meet here, not in a check-then-insert race.
DROP INDEX IF EXISTS items_key;
DELETE FROM items WHERE id NOT IN
    (SELECT MIN(id) FROM items GROUP BY scope, owner, key, digest);
CREATE UNIQUE INDEX IF NOT EXISTS items_version ON items(scope, owner, key, digest);
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(
    key, value, content='items', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS items_ai AFTER INSERT ON items BEGIN
    INSERT INTO items_fts(rowid, key, value) VALUES (new.id, new.key, new.value);
END;
CREATE TRIGGER IF NOT EXISTS items_ad AFTER DELETE ON items BEGIN
    INSERT INTO items_fts(items_fts, rowid, key, value)
        VALUES ('delete', old.id, old.key, old.value);
END;
"""

#: How many rollouts' results, in all versions, answer an item's claim.
_ASKED = (
    "(SELECT COALESCE(SUM(j.support), 0) FROM items AS j WHERE i.claim != '' "
    "AND j.scope = i.scope AND j.owner = i.owner AND j.claim = i.claim)"
)


def _default_ttl() -> dict[Scope, float | None]:
    return {"run": None, "task": 7 * 86400.0, "global": 90 * 86400.0}


class MemoryLimits(BaseModel):
    """Caps and expiry of a memory bank, per scope and owner."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_items: int = Field(default=1000, ge=1)
    """Most items one owner of a scope may hold (a run, a task, the global library)."""
    max_bytes: int = Field(default=4_000_000, ge=1)
    """Most bytes of keys plus values one owner of a scope may hold."""
    max_value_bytes: int = Field(default=64_000, ge=1)
    """Largest value accepted; bigger values are cut (head kept) before storing."""
    ttl_s: dict[Scope, float | None] = Field(default_factory=_default_ttl)
    """Lifetime of new items per scope in seconds (``None``: no expiry)."""
    hit_bonus: float = Field(default=0.1, ge=0.0)
    """Score added to an item each time a rollout fetches its value (later use)."""


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    """One stored item with its metadata."""

    id: int
    scope: Scope
    owner: str
    key: str
    value: str
    run_id: str = ""
    task_id: str = ""
    source_rollout: str = ""
    source_step: int = -1
    verified: bool = False
    score: float = 0.0
    created_at: float = 0.0
    expires_at: float | None = None
    hits: int = 0
    claim: str = ""
    """What the value answers (a tool call); ``""`` for a note."""
    support: int = 1
    """How many rollouts stored this value (``sources`` names them)."""
    asked: int = 0
    """How many rollouts' results answer ``claim``, this value or another."""
    sources: list[str] = []


class MemoryHit(msgspec.Struct, frozen=True, kw_only=True):
    """A search result: an item's id and key, and its rank (higher is better)."""

    id: int
    key: str
    rank: float
    scope: Scope
    verified: bool = False
    claim: str = ""
    support: int = 1
    """How many rollouts stored this value."""
    asked: int = 0
    """How many rollouts' results answer its claim, this value or another
    (``support / asked``: how far they agree; 0 for a note)."""


class NewItem(msgspec.Struct, frozen=True, kw_only=True):
    """An item to store (the bank assigns id, times and size)."""

    scope: Scope
    owner: str
    key: str
    value: str
    run_id: str = ""
    task_id: str = ""
    source_rollout: str = ""
    source_step: int = -1
    verified: bool = False
    score: float = 0.0
    claim: str = ""
    """What the value answers (a tool call): values of one claim are kept as
    versions, each with the rollouts that stored it; ``""`` (a note): one
    value per key."""
    min_support: int = 1
    """Rollouts that must store this value before readers see it."""
    confirmed: bool = False
    """A verifying tool confirmed the value: readers see it at once."""


Owners = Sequence[tuple[Scope, str]]
"""Which (scope, owner) pairs a read may see."""


class MemoryStore(Protocol):
    """What a ``MemoryView`` reads and writes: a ``MemoryBank``, or a bank
    in another process reached through it (a rollout on a Ray worker)."""

    async def search(self, match: str, owners: Owners, *, k: int = 5) -> list[MemoryHit]: ...

    async def get(
        self, item_id: int, owners: Owners, *, count_hit: bool = True
    ) -> MemoryItem | None: ...

    async def put(self, item: NewItem) -> int: ...

    async def promote(
        self,
        source: tuple[Scope, str],
        target: tuple[Scope, str],
        *,
        min_hits: int = 1,
        verified_only: bool = True,
    ) -> int: ...


@final
class MemoryBank:
    """An SQLite-backed bank of memory items: a short *key* (what rollouts
    see), the full *value* (fetched on demand) and metadata.  Items are
    scoped: ``run`` (owner = run id), ``task`` (owner = task id, across
    runs) or ``global`` (owner ``""``).  Search is FTS5 with BM25 ranking,
    the key weighing more than the value.  ``limits`` caps each scope and
    owner, evicting the lowest score first (the oldest among equals);
    expired items are never returned and are deleted on every write.  All
    SQLite work runs in one worker thread, one operation at a time.

    ``path``: a file (kept across runs, WAL journal) or ``None`` (in
    memory).  Use as ``async with MemoryBank(...) as bank``; it cannot be
    reopened once closed.  ``clock`` gives wall time for expiry (tests).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        limits: MemoryLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.limits = limits or MemoryLimits()
        self.clock = clock
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._limiter = anyio.CapacityLimiter(1)

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._closed:
            raise RuntimeError("Cannot reopen a MemoryBank once it has been closed")
        if self._conn is not None:
            raise RuntimeError("MemoryBank is already open")
        self._conn = await self._run(self._connect)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        self._closed = True
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)

    def _connect(self) -> sqlite3.Connection:
        where = str(self.path) if self.path is not None else ":memory:"
        try:
            conn = sqlite3.connect(where, check_same_thread=False, isolation_level=None)
            if self.path is not None:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA busy_timeout=5000")
            conn.executescript(_TABLE)
            have = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
            for column, kind in _ADDED:
                if column not in have:  # a file from before: the columns since
                    conn.execute(f"ALTER TABLE items ADD COLUMN {column} {kind}")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open memory bank: {exc}", where=where) from exc
        return conn

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await anyio.to_thread.run_sync(fn, limiter=self._limiter)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            state = "closed" if self._closed else "not open (use `async with`)"
            raise RuntimeError(f"MemoryBank {self.path or ':memory:'} is {state}")
        return self._conn

    # -- writing ---------------------------------------------------------------

    async def put(self, item: NewItem) -> int:
        """Store ``item``; returns its id.  An item is one value of a key
        (with a ``claim``, values of one key are kept apart as versions;
        without, one value per key, whitespace collapsed).  Storing a value
        that is there already stores nothing new and returns the existing
        item's id: it adds the storing rollout to the item's sources (its
        ``support``), keeps the higher score and marks it verified if either
        was -- atomic, so rollouts storing the same value at once get one
        item.  Readers see an item once ``min_support`` rollouts stored it
        or it is ``confirmed``.  Expired items go first, then the owner's
        caps are enforced (the new item may itself be evicted when it has
        the lowest score)."""
        conn = self._db()
        return await self._run(lambda: self._put(conn, item))

    def _put(self, conn: sqlite3.Connection, item: NewItem) -> int:
        now = self.clock()
        limit = self.limits.max_value_bytes
        value = item.value
        if len(value.encode()) > limit:
            value = value.encode()[:limit].decode(errors="ignore")
        ttl = self.limits.ttl_s.get(item.scope)
        key = normal_key(item.key)
        digest = hashlib.sha256(value.encode()).hexdigest()[:16] if item.claim else ""
        size = len(key.encode()) + len(value.encode())
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
            )
            row = conn.execute(
                "SELECT id, support, sources, shared FROM items "
                "WHERE scope = ? AND owner = ? AND key = ? AND digest = ?",
                (item.scope, item.owner, key, digest),
            ).fetchone()
            if row is not None:
                item_id, support, sources, shared = row
                names = sources.split("\n") if sources else []
                if item.source_rollout not in names:
                    support += 1
                    names.append(item.source_rollout)
                shown = bool(shared) or item.confirmed or support >= item.min_support
                conn.execute(
                    "UPDATE items SET support = ?, sources = ?, shared = ?, "
                    "verified = MAX(verified, ?), score = MAX(score, ?) WHERE id = ?",
                    (support, "\n".join(names), int(shown), int(item.verified), item.score,
                     item_id),
                )  # fmt: skip
                return int(item_id)
            cur = conn.execute(
                "INSERT INTO items (scope, owner, key, value, run_id, task_id, source_rollout, "
                "source_step, verified, score, created_at, expires_at, hits, bytes, claim, "
                "digest, support, sources, shared) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, 1, ?, ?) RETURNING id",
                (
                    item.scope,
                    item.owner,
                    key,
                    value,
                    item.run_id,
                    item.task_id,
                    item.source_rollout,
                    item.source_step,
                    int(item.verified),
                    item.score,
                    now,
                    None if ttl is None else now + ttl,
                    size,
                    item.claim,
                    digest,
                    item.source_rollout,
                    int(item.confirmed or item.min_support <= 1),
                ),
            )
            new_id = int(cur.fetchone()[0])
            self._enforce_caps(conn, item.scope, item.owner)
        return new_id

    def _enforce_caps(self, conn: sqlite3.Connection, scope: Scope, owner: str) -> None:
        count, total = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM items WHERE scope = ? AND owner = ?",
            (scope, owner),
        ).fetchone()
        if count <= self.limits.max_items and total <= self.limits.max_bytes:
            return
        victims: list[int] = []
        rows = conn.execute(
            "SELECT id, bytes FROM items WHERE scope = ? AND owner = ? "
            "ORDER BY score ASC, created_at ASC, id ASC",
            (scope, owner),
        )
        for item_id, size in rows:
            if count <= self.limits.max_items and total <= self.limits.max_bytes:
                break
            victims.append(item_id)
            count -= 1
            total -= size
        conn.executemany("DELETE FROM items WHERE id = ?", [(v,) for v in victims])
        log.debug("memory_evicted", scope=scope, owner=owner, items=len(victims))

    async def promote(
        self,
        source: tuple[Scope, str],
        target: tuple[Scope, str],
        *,
        min_hits: int = 1,
        verified_only: bool = True,
    ) -> int:
        """Copy the items of ``source`` that readers see, were used
        (``min_hits``) and, with ``verified_only``, verified, to ``target`` -- e.g. a finished
        run's useful findings into the global experience library.  Keys
        already present in ``target`` are skipped; caps and the target
        scope's expiry apply.  Returns how many were copied."""
        conn = self._db()
        return await self._run(lambda: self._promote(conn, source, target, min_hits, verified_only))

    def _promote(
        self,
        conn: sqlite3.Connection,
        source: tuple[Scope, str],
        target: tuple[Scope, str],
        min_hits: int,
        verified_only: bool,
    ) -> int:
        now = self.clock()
        ttl = self.limits.ttl_s.get(target[0])
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(
                "INSERT INTO items (scope, owner, key, value, run_id, task_id, source_rollout, "
                "source_step, verified, score, created_at, expires_at, hits, bytes, claim, "
                "digest, support, sources, shared) "
                "SELECT ?, ?, key, value, run_id, task_id, source_rollout, source_step, verified, "
                "score, ?, ?, 0, bytes, claim, digest, support, sources, shared FROM items AS s "
                "WHERE s.scope = ? AND s.owner = ? AND s.hits >= ? AND s.verified >= ? "
                "AND s.shared = 1 AND (s.expires_at IS NULL OR s.expires_at > ?) AND NOT EXISTS "
                "(SELECT 1 FROM items AS t WHERE t.scope = ? AND t.owner = ? AND t.key = s.key "
                "AND t.digest = s.digest) ORDER BY s.id",
                (
                    *target,
                    now,
                    None if ttl is None else now + ttl,
                    *source,
                    min_hits,
                    int(verified_only),
                    now,
                    *target,
                ),
            )
            copied = cur.rowcount
            self._enforce_caps(conn, *target)
        return copied

    async def purge_expired(self) -> int:
        """Delete expired items now; returns how many went."""
        conn = self._db()

        def purge() -> int:
            with conn:
                cur = conn.execute(
                    "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (self.clock(),),
                )
            return cur.rowcount

        return await self._run(purge)

    async def drop(self, scope: Scope, owner: str) -> int:
        """Delete every item of one owner of a scope (e.g. a finished run)."""
        conn = self._db()

        def delete() -> int:
            with conn:
                cur = conn.execute(
                    "DELETE FROM items WHERE scope = ? AND owner = ?", (scope, owner)
                )
            return cur.rowcount

        return await self._run(delete)

    # -- reading ---------------------------------------------------------------

    async def search(self, match: str, owners: Owners, *, k: int = 5) -> list[MemoryHit]:
        """The ``k`` best items readers see for an FTS5 ``match``
        expression (see ``retrieval.build_query``) among ``owners``, best
        first."""
        if not match or not owners or k <= 0:
            return []
        conn = self._db()
        return await self._run(lambda: self._search(conn, match, owners, k))

    def _search(
        self, conn: sqlite3.Connection, match: str, owners: Owners, k: int
    ) -> list[MemoryHit]:
        where = " OR ".join("(i.scope = ? AND i.owner = ?)" for _ in owners)
        params: list[object] = [match]
        for scope, owner in owners:
            params.extend((scope, owner))
        params.extend((self.clock(), k))
        # Only constants and "?" placeholders are formatted into the SQL.
        rows = conn.execute(
            f"SELECT i.id, i.key, bm25(items_fts, {KEY_WEIGHT}, {VALUE_WEIGHT}), i.scope, "  # noqa: S608
            f"i.verified, i.claim, i.support, {_ASKED} "
            "FROM items_fts JOIN items i ON i.id = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND ({where}) AND i.shared = 1 "
            "AND (i.expires_at IS NULL OR i.expires_at > ?) "
            f"ORDER BY bm25(items_fts, {KEY_WEIGHT}, {VALUE_WEIGHT}) LIMIT ?",
            params,
        ).fetchall()
        # bm25() is lower-is-better (negative); flip it so a rank reads naturally.
        return [
            MemoryHit(
                id=i,
                key=key,
                rank=-bm,
                scope=scope,
                verified=bool(v),
                claim=claim,
                support=support,
                asked=asked,
            )
            for i, key, bm, scope, v, claim, support, asked in rows
        ]

    async def get(
        self, item_id: int, owners: Owners, *, count_hit: bool = True
    ) -> MemoryItem | None:
        """The item ``item_id`` if one of ``owners`` holds it, readers see
        it and it has not expired; a fetch counts as a hit and raises its
        score."""
        conn = self._db()
        return await self._run(lambda: self._get(conn, item_id, owners, count_hit))

    def _get(
        self, conn: sqlite3.Connection, item_id: int, owners: Owners, count_hit: bool
    ) -> MemoryItem | None:
        # Only constants and "?" placeholders are formatted into the SQL.
        row = conn.execute(
            "SELECT id, scope, owner, key, value, run_id, task_id, source_rollout, "  # noqa: S608
            "source_step, verified, score, created_at, expires_at, hits, claim, support, "
            f"{_ASKED}, sources FROM items AS i WHERE id = ? AND shared = 1 "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (item_id, self.clock()),
        ).fetchone()
        if row is None or (row[1], row[2]) not in {(s, o) for s, o in owners}:
            return None
        item = _item(row)
        if not count_hit:
            return item
        with conn:
            conn.execute(
                "UPDATE items SET hits = hits + 1, score = score + ? WHERE id = ?",
                (self.limits.hit_bonus, item_id),
            )
        return msgspec.structs.replace(
            item, hits=item.hits + 1, score=item.score + self.limits.hit_bonus
        )

    async def keys(self, owners: Owners) -> list[MemoryHit]:
        """Every live item of ``owners`` that readers see (id, key), newest first."""
        if not owners:
            return []
        conn = self._db()

        def select() -> list[MemoryHit]:
            where = " OR ".join("(scope = ? AND owner = ?)" for _ in owners)
            params: list[object] = [x for pair in owners for x in pair]
            params.append(self.clock())
            # Only "?" placeholders are formatted into the SQL.
            rows = conn.execute(
                f"SELECT id, key, scope, verified, claim, support, {_ASKED} "  # noqa: S608
                f"FROM items AS i WHERE ({where}) AND shared = 1 "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, id DESC",
                params,
            ).fetchall()
            return [
                MemoryHit(
                    id=i,
                    key=key,
                    rank=0.0,
                    scope=s,
                    verified=bool(v),
                    claim=claim,
                    support=support,
                    asked=asked,
                )
                for i, key, s, v, claim, support, asked in rows
            ]

        return await self._run(select)

    async def count(self, scope: Scope | None = None) -> int:
        """How many items (of ``scope``, or all), expired ones not yet purged included."""
        conn = self._db()
        if scope is None:
            return await self._run(
                lambda: int(conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])
            )
        return await self._run(
            lambda: int(
                conn.execute("SELECT COUNT(*) FROM items WHERE scope = ?", (scope,)).fetchone()[0]
            )
        )


def normal_key(key: str) -> str:
    """A key as stored: runs of whitespace collapsed to one space, ends stripped."""
    return " ".join(key.split())


def _item(row: tuple[object, ...]) -> MemoryItem:
    (
        i,
        scope,
        owner,
        key,
        value,
        run_id,
        task_id,
        src,
        step,
        verified,
        score,
        created,
        expires,
        hits,
        claim,
        support,
        asked,
        sources,
    ) = row
    return MemoryItem(
        id=int(i),  # type: ignore[call-overload]
        scope=scope,  # type: ignore[arg-type]
        owner=str(owner),
        key=str(key),
        value=str(value),
        run_id=str(run_id),
        task_id=str(task_id),
        source_rollout=str(src),
        source_step=int(step),  # type: ignore[call-overload]
        verified=bool(verified),
        score=float(score),  # type: ignore[arg-type]
        created_at=float(created),  # type: ignore[arg-type]
        expires_at=None if expires is None else float(expires),  # type: ignore[arg-type]
        hits=int(hits),  # type: ignore[call-overload]
        claim=str(claim),
        support=int(support),  # type: ignore[call-overload]
        asked=int(asked),  # type: ignore[call-overload]
        sources=str(sources).split("\n") if sources else [],
    )


__all__ = [
    "KEY_WEIGHT",
    "SCOPES",
    "VALUE_WEIGHT",
    "MemoryBank",
    "MemoryHit",
    "MemoryItem",
    "MemoryLimits",
    "MemoryStore",
    "NewItem",
    "Owners",
    "Scope",
    "normal_key",
]
