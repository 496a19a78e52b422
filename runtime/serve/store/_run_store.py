"""The durable run store (``RunStore``): SQLite in WAL mode holding runs,
their events, steps, rollouts, summaries and checkpoints.

May import protocols and the engine's checkpoint types; nothing of HTTP.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, final

import anyio
import msgspec
from anyio.lowlevel import RunVar

from agentrt.protocols._api import RolloutInfo, RunDetail, RunInfo, RunPage, ThreadInfo
from agentrt.protocols._codec import decode_event
from agentrt.protocols._events import (
    CallReserved,
    CallSettled,
    ElicitationAnswered,
    ElicitationRequested,
    Event,
    RolloutFinished,
    RolloutStarted,
)
from agentrt.protocols._ids import RolloutId
from agentrt.protocols._run import RunRequest, RunResult, RunStatus
from agentrt.protocols._trajectory import Step, Trajectory, TrajectorySummary
from agentrt.protocols._usage import Cost, Usage
from agentrt.protocols._webhooks import WebhookDelivery
from agentrt.runtime.engine._checkpoint import JournaledCall
from agentrt.runtime.engine._runtime import RolloutCheckpoint, RunCheckpoint
from agentrt.runtime.kernel._errors import AgentrtError, ConfigError
from agentrt.runtime.serve.store._commit_queue import CommitQueue, Write
from agentrt.runtime.serve.store._store_sql import (
    ADDED_COLUMNS,
    ROLLOUTS_SQL,
    RUN_COLUMNS,
    SCHEMA,
    STEPS_SQL,
    Statement,
    event_statements,
    rollout_info_of,
    run_info_of,
    step_of,
)

#: Writes one group commit takes at most.
_BATCH: Final = 512
#: Writes queued before writers wait (backpressure on the event sinks).
_QUEUE: Final = 4096

Synchronous = Literal["normal", "full"]


class _AnyOwner(enum.Enum):
    ANY = "any"


ANY_OWNER: Final = _AnyOwner.ANY
"""``owner=`` for runs and threads of every key (the default)."""
Owner = str | None | Literal[_AnyOwner.ANY]
"""A key's name, ``None`` (the shared token) or ``ANY_OWNER``."""


def _thread_of(row: tuple[Any, ...], runs: list[RunInfo]) -> ThreadInfo:
    thread_id, created_at, metadata, owner = row
    return ThreadInfo(
        thread_id=thread_id,
        created_at=created_at,
        metadata=msgspec.json.decode(metadata, type=dict[str, str]),
        runs=runs,
        owner=owner,
    )


class StoreError(AgentrtError):
    """The run store failed or refused a write.  ``store``: the store's
    file; ``operation``: what it was doing; ``full``: the disk (or the
    file's size limit) is full, so the write may succeed once space is
    freed (the daemon answers 507 with ``Retry-After``)."""

    def __init__(
        self, message: str, *, store: str = "", operation: str = "", full: bool = False
    ) -> None:
        super().__init__(message)
        self.store = store
        self.operation = operation
        self.full = full


def _is_full(exc: BaseException) -> bool:
    """Whether a write failed for want of space: SQLite's ``SQLITE_FULL``
    (which it reports for ``ENOSPC``) or the ``OSError`` itself."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _describe(what: str | tuple[str, int]) -> str:
    """A write's ``what``: a description, or a run's event (run id, seq)."""
    return what if isinstance(what, str) else f"run {what[0]} event {what[1]}"


def _own(path: str) -> int:
    """Open the database file itself (created empty if missing) and hold an
    exclusive ``flock`` on it for the store's lifetime: one process per
    store, or two daemons would both resume (and run) the same unfinished
    runs.  The lock is on the file (its inode), so a symlink, a hard link or
    a deleted side file cannot let a second process in; ``flock`` is apart
    from SQLite's own POSIX locks, which closing another descriptor of the
    file would drop.  A file with several hard links is refused even when
    free: SQLite names its ``-wal`` and ``-shm`` after the name it was
    opened by, so two names would split the journal (committed writes in a
    WAL the other name never reads)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(os.fstat(fd))
        os.close(fd)
        raise ConfigError(
            f"the run store is in use by another agentrt process (pid {holder}); "
            "stop it, or give this one its own store (--store or [store] path)",
            where=path,
        ) from None
    except BaseException:
        os.close(fd)
        raise
    links = os.fstat(fd).st_nlink
    if links > 1:
        os.close(fd)
        raise ConfigError(
            f"the run store file has {links} hard links; SQLite keeps its write-ahead "
            "log by file name, so open it through one name only (remove the other links)",
            where=path,
        )
    return fd


def _refuse_empty(path: str) -> None:
    """Refuse an existing store file of 0 bytes: SQLite would open it as a
    new, empty store, and a daemon would then serve as if every run it
    held were gone (a truncated copy, a disk that lost the file's data).
    A file this store makes is never empty once opened (WAL mode writes
    its header at once)."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return
    if size == 0:
        raise ConfigError(
            "the run store file is empty (0 bytes), so it holds no runs: if it should, "
            "restore it from a backup; to start a new store here, delete the file",
            where=path,
        )


def _holder(stat: os.stat_result) -> str:
    """The pid holding a ``flock`` on the file, from ``/proc/locks`` (Linux);
    ``unknown`` elsewhere."""
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; "->" marks a waiter.
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
                    return fields[4]
    except OSError:
        pass
    return "unknown"


def _connect(path: str, synchronous: Synchronous) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


@final
class _ReaderPool:
    """The store's read-only connections: at most ``size``, shared by every
    thread that reads (a read borrows one and gives it back), each closed
    once idle for ``idle_s`` (``reap``) and all of them at ``close``.  A
    thread finding every connection busy waits for one."""

    def __init__(self, path: str, synchronous: Synchronous, size: int, idle_s: float) -> None:
        self.path = path
        self.synchronous: Synchronous = synchronous
        self.size = size
        self.idle_s = idle_s
        self._idle: list[tuple[float, sqlite3.Connection]] = []
        """Free connections with when they were given back, most recent last."""
        self._count = 0
        """Connections open, free or lent."""
        self._closed = False
        self._cond = threading.Condition()

    @property
    def open_connections(self) -> int:
        with self._cond:
            return self._count

    def _acquire(self) -> sqlite3.Connection:
        with self._cond:
            while True:
                if self._closed:
                    raise StoreError("the run store is closed (reading)")
                if self._idle:
                    return self._idle.pop()[1]
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            conn = _connect(self.path, self.synchronous)
            conn.execute("PRAGMA query_only=ON")
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        return conn

    def _release(self, conn: sqlite3.Connection) -> None:
        with self._cond:
            if not self._closed:
                self._idle.append((time.monotonic(), conn))
                self._cond.notify()
                return
            self._count -= 1
        conn.close()

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        conn = self._acquire()
        try:
            yield conn
        finally:
            if conn.in_transaction:  # a read that failed inside its snapshot
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            self._release(conn)

    def reap(self) -> int:
        """Close the connections idle for ``idle_s`` or more; how many."""
        cutoff = time.monotonic() - self.idle_s
        with self._cond:
            stale = [conn for at, conn in self._idle if at <= cutoff]
            self._idle = [(at, conn) for at, conn in self._idle if at > cutoff]
            self._count -= len(stale)
        for conn in stale:
            conn.close()
        return len(stale)

    def close(self) -> None:
        """Close the free connections now and the lent ones when given back."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for _, conn in idle:
            conn.close()


@final
class RunStore:
    """Runs (request, status, result, cost), every event by
    ``(run_id, seq)``, steps by ``(run_id, rollout_id, index)``, rollouts,
    summaries, and the checkpoint a resumed run starts from.
    ``async with RunStore(path) as store:``; ``path=":memory:"`` is refused
    (readers need the file).

    One writer task commits in groups (``CommitQueue``): a write is
    committed before its ``await`` returns (``record(wait=False)``: queued,
    and reported to its ``then`` once committed, in order), writes queued
    together share a commit, and each fails alone (a write of several
    statements runs in a savepoint).  A committed write
    survives ``kill -9`` (``synchronous=NORMAL``); power loss needs
    ``synchronous="full"``.  Reads run on worker threads, each borrowing one
    of at most ``readers`` connections; a connection idle for
    ``reader_idle_s`` is closed, and every one at exit (no descriptor
    outlives its use).

    The database file itself is locked (``flock`` on its inode) before
    anything is read: a second process opening the same file, through any
    name, gets a ``ConfigError`` naming the holder's pid.  ``path`` is
    resolved (symlinks followed) so SQLite's ``-wal``/``-shm`` files sit
    next to the real file."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "normal",
        readers: int = 4,
        reader_idle_s: float = 10.0,
    ) -> None:
        if str(path) == ":memory:" or not str(path):
            raise StoreError("the run store needs a file path (readers open their own connections)")
        if readers < 1 or reader_idle_s <= 0:
            raise StoreError(
                f"readers must be 1 or more and reader_idle_s above 0 "
                f"(got {readers}, {reader_idle_s})"
            )
        self.path = os.path.realpath(path)
        self.synchronous: Synchronous = synchronous
        self._writer: sqlite3.Connection | None = None
        self._pool = _ReaderPool(self.path, synchronous, readers, reader_idle_s)
        self._reaper: anyio.CancelScope | None = None
        self._read_limiter: RunVar[anyio.CapacityLimiter] = RunVar(f"agentrt-store-{id(self)}")
        self._queue: CommitQueue | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.commits = 0
        self.writes = 0
        self._owner_fd: int | None = None

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        _refuse_empty(self.path)
        self._owner_fd = _own(self.path)
        try:
            self._writer = await anyio.to_thread.run_sync(self._open_writer)
        except sqlite3.Error as exc:
            self._close()
            raise StoreError(f"cannot open the run store {self.path}: {exc}") from exc
        except BaseException:
            self._close()
            raise
        self._queue = CommitQueue(self._apply, self._failure, batch=_BATCH, capacity=_QUEUE)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._write_loop, self._queue)
        self._reaper = anyio.CancelScope()
        self._tg.start_soon(self._reap_loop, self._reaper)
        return self

    async def _reap_loop(self, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                await anyio.sleep(self._pool.idle_s / 2)
                self._pool.reap()

    def _open_writer(self) -> sqlite3.Connection:
        conn = _connect(self.path, self.synchronous)
        conn.executescript(SCHEMA)
        for table, column, kind in ADDED_COLUMNS:  # a file an older agentrt made
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        return conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._reaper is not None:
                self._reaper.cancel()
            if self._queue is not None:
                self._queue.close()
            if self._tg is not None:
                await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._close()

    def _close(self) -> None:
        self._pool.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._owner_fd is not None:
            os.close(self._owner_fd)  # releases the lock, after SQLite let go of the file
            self._owner_fd = None

    @property
    def reader_connections(self) -> int:
        """Read connections open now (a gauge for /metrics and the tests)."""
        return self._pool.open_connections

    @property
    def queue_depth(self) -> int:
        """Writes waiting for the writer (a gauge for /metrics)."""
        return 0 if self._queue is None else self._queue.depth

    # -- writing -------------------------------------------------------------

    async def _write_loop(self, queue: CommitQueue) -> None:
        # Shielded: it serves every write until ``__aexit__`` closes the
        # queue, so writes made while the owner is being cancelled still land.
        with anyio.CancelScope(shield=True):
            await queue.run()

    def _apply(self, batch: Sequence[Write]) -> None:
        conn = self._writer
        assert conn is not None
        # One cursor for the batch: ``conn.execute`` makes (and registers)
        # a cursor per statement, a sixth of the writer's CPU per row.
        cursor = conn.cursor()
        execute = cursor.execute
        execute("BEGIN IMMEDIATE")
        try:
            for write in batch:
                statements = write.statements
                if not statements:  # a barrier
                    continue
                if len(statements) == 1:  # a statement that fails leaves nothing behind
                    sql, params = statements[0]
                    try:
                        execute(sql, params)
                    except sqlite3.Error as exc:
                        if not conn.in_transaction:  # SQLite rolled it all back (a full disk)
                            raise
                        write.error = exc
                    continue
                execute("SAVEPOINT w")
                try:
                    for sql, params in statements:
                        execute(sql, params)
                except sqlite3.Error as exc:
                    execute("ROLLBACK TO w")
                    write.error = exc
                execute("RELEASE w")
            execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        self.commits += 1
        self.writes += len(batch)

    def _failure(self, write: Write) -> StoreError:
        error = write.error
        assert error is not None
        what = _describe(write.what)
        full = _is_full(error)
        hint = "; free space on its disk, then retry" if full else ""
        failure = StoreError(
            f"run store {self.path}, {what}: {error}{hint}",
            store=self.path,
            operation=what,
            full=full,
        )
        failure.__cause__ = error
        return failure

    async def _write(
        self,
        statements: list[Statement],
        *,
        what: str | tuple[str, int],
        then: Callable[[StoreError | None], None] | None = None,
        wait: bool = True,
    ) -> None:
        """Queue a write; with ``wait``, return once it is committed (raise
        ``StoreError`` if it failed); ``then`` is told either way, in queue
        order.  ``what``: what it is, for errors (or a run id and event seq)."""
        await self._send(Write(statements, what, then=then), wait=wait)

    async def _send(self, write: Write, *, wait: bool) -> None:
        """``_write`` of a ``Write`` made."""
        if self._queue is None:
            raise StoreError(f"the run store is not open ({_describe(write.what)})")
        try:
            await (self._queue.commit if wait else self._queue.put)(write)
        except anyio.ClosedResourceError:
            raise StoreError(f"the run store is closed ({_describe(write.what)})") from None
        if write.error is not None:
            raise self._failure(write) from write.error

    async def barrier(self) -> None:
        """Return once every write queued before this call is committed (and told)."""
        await self._write([], what="a barrier")

    async def create_run(
        self,
        run_id: str,
        request: RunRequest,
        *,
        thread_id: str | None = None,
        owner: str | None = None,
    ) -> RunInfo:
        """Record a new run of the key ``owner`` (``None``: the shared token)
        (the next of thread ``thread_id``, in the same transaction, when given)."""
        now = time.time()
        in_thread: list[Statement] = []
        if thread_id is not None:
            in_thread.append(
                (
                    "INSERT INTO thread_runs (thread_id, seq, run_id) VALUES (?, (SELECT "
                    "COALESCE(MAX(seq) + 1, 0) FROM thread_runs WHERE thread_id = ?), ?)",
                    (thread_id, thread_id, run_id),
                )
            )
        await self._write(
            [
                *in_thread,
                (
                    "INSERT INTO runs (run_id, status, agent, task, request, rollouts, aggregate, "
                    "created_at, updated_at, owner) VALUES (?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        request.agent,
                        request.task,
                        msgspec.json.encode(request),
                        request.scaling.rollouts,
                        request.scaling.aggregate,
                        now,
                        now,
                        owner,
                    ),
                ),
            ],
            what=f"creating run {run_id}",
        )
        return RunInfo(
            run_id=run_id,
            status="pending",
            agent=request.agent,
            task=request.task,
            created_at=now,
            updated_at=now,
            rollouts=request.scaling.rollouts,
            aggregate=request.scaling.aggregate,
            metadata=dict(request.metadata),
            owner=owner,
        )

    async def record(
        self,
        event: Event,
        *,
        then: Callable[[StoreError | None], None] | None = None,
        wait: bool = True,
    ) -> None:
        """Commit ``event`` (and the step, rollout, summary or usage rows it
        implies); with ``wait``, returns once it is durable (raising
        ``StoreError`` if it failed), else once it is queued.  ``then`` is
        told when it is committed (``None``) or failed (the error), in the
        order events were recorded."""
        write = Write(event_statements(event), (event.run_id, event.seq), then=then)
        if not wait and self._queue is not None and self._queue.offer(write):
            return  # queued: most of a run's events (no coroutine more each)
        await self._send(write, wait=wait)

    async def set_status(self, run_id: str, status: RunStatus, *, resumed: bool = False) -> None:
        await self._write(
            [
                (
                    "UPDATE runs SET status = ?, updated_at = ?, resumed = resumed + ? "
                    "WHERE run_id = ?",
                    (status, time.time(), int(resumed), run_id),
                )
            ],
            what=f"run {run_id} status",
        )

    async def finish(
        self,
        run_id: str,
        status: RunStatus,
        result: RunResult | None,
        error: str | None,
        *,
        at: float | None = None,
    ) -> None:
        """Settle a run: its final status, result and cost (``at``: when, by
        the wall clock; now by default)."""
        await self._write(
            [
                (
                    "UPDATE runs SET status = ?, updated_at = ?, answer = ?, error = ?, "
                    "result = ?, cost = COALESCE(?, cost), stopped = ? WHERE run_id = ?",
                    (
                        status,
                        time.time() if at is None else at,
                        result.answer if result is not None else None,
                        error,
                        msgspec.json.encode(result) if result is not None else None,
                        msgspec.json.encode(result.cost) if result is not None else None,
                        msgspec.json.encode(result.stopped)
                        if result is not None and result.stopped is not None
                        else None,
                        run_id,
                    ),
                )
            ],
            what=f"finishing run {run_id}",
        )

    # -- reading -------------------------------------------------------------

    def _read_slots(self) -> anyio.CapacityLimiter:
        """The calling event loop's read threads: as many as there are read
        connections (the daemon reads from two loops), so a burst of reads
        neither starts more threads nor queues on the connections."""
        try:
            return self._read_limiter.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(self._pool.size)
            self._read_limiter.set(limiter)
            return limiter

    async def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        def query() -> list[tuple[Any, ...]]:
            with self._pool.connection() as conn:
                return conn.execute(sql, params).fetchall()

        return await anyio.to_thread.run_sync(query, limiter=self._read_slots())

    async def run_info(self, run_id: str) -> RunInfo | None:
        sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?"  # noqa: S608 - constant columns
        rows = await self._read(sql, (run_id,))
        return run_info_of(rows[0]) if rows else None

    async def request(self, run_id: str) -> RunRequest | None:
        rows = await self._read("SELECT request FROM runs WHERE run_id = ?", (run_id,))
        return msgspec.json.decode(rows[0][0], type=RunRequest) if rows else None

    async def detail(self, run_id: str) -> RunDetail | None:
        """A run with its request, rollouts and result, read in one go (one
        trip to a reader thread, one snapshot of the database)."""

        def query() -> RunDetail | None:
            with self._pool.connection() as conn:
                conn.execute("BEGIN")  # one snapshot: the rows agree with each other
                sql = f"SELECT {RUN_COLUMNS}, result FROM runs WHERE run_id = ?"  # noqa: S608
                row = conn.execute(sql, (run_id,)).fetchone()
                rollouts = conn.execute(ROLLOUTS_SQL, (run_id,)).fetchall()
                conn.execute("COMMIT")
            if row is None:
                return None
            *columns, result = row
            info = run_info_of(tuple(columns))
            request = columns[-1]
            return RunDetail(
                run=info,
                request=msgspec.json.decode(request, type=RunRequest),
                rollouts=[rollout_info_of(r) for r in rollouts],
                result=msgspec.json.decode(result, type=RunResult) if result is not None else None,
            )

        return await anyio.to_thread.run_sync(query, limiter=self._read_slots())

    # -- threads -----------------------------------------------------------

    async def create_thread(
        self, thread_id: str, metadata: dict[str, str], *, owner: str | None = None
    ) -> ThreadInfo:
        now = time.time()
        await self._write(
            [
                (
                    "INSERT INTO threads (thread_id, created_at, metadata, owner) "
                    "VALUES (?, ?, ?, ?)",
                    (thread_id, now, msgspec.json.encode(metadata), owner),
                )
            ],
            what=f"creating thread {thread_id}",
        )
        return ThreadInfo(thread_id=thread_id, created_at=now, metadata=dict(metadata), owner=owner)

    async def thread(self, thread_id: str) -> ThreadInfo | None:
        """The thread with its runs, oldest first (``None``: no such thread)."""

        def query() -> ThreadInfo | None:
            with self._pool.connection() as conn:
                conn.execute("BEGIN")  # one snapshot: the thread and its runs agree
                row = conn.execute(
                    "SELECT thread_id, created_at, metadata, owner FROM threads "
                    "WHERE thread_id = ?",
                    (thread_id,),
                ).fetchone()
                runs = conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM thread_runs JOIN runs USING (run_id) "  # noqa: S608
                    "WHERE thread_runs.thread_id = ? ORDER BY thread_runs.seq",
                    (thread_id,),
                ).fetchall()
                conn.execute("COMMIT")
            if row is None:
                return None
            return _thread_of(row, [run_info_of(r) for r in runs])

        return await anyio.to_thread.run_sync(query, limiter=self._read_slots())

    async def list_threads(self, *, limit: int, owner: Owner = ANY_OWNER) -> list[ThreadInfo]:
        """The newest ``limit`` threads (of ``owner`` only, when given),
        without their runs."""
        sql = "SELECT thread_id, created_at, metadata, owner FROM threads"
        params: tuple[str | None, ...] = ()
        if owner is not ANY_OWNER:
            sql, params = f"{sql} WHERE owner IS ?", (owner,)
        rows = await self._read(f"{sql} ORDER BY n DESC LIMIT ?", (*params, limit))
        return [_thread_of(r, []) for r in rows]

    async def delete_thread(self, thread_id: str) -> None:
        """Forget the thread (its runs stay, as runs)."""
        await self._write(
            [
                ("DELETE FROM thread_runs WHERE thread_id = ?", (thread_id,)),
                ("DELETE FROM threads WHERE thread_id = ?", (thread_id,)),
            ],
            what=f"deleting thread {thread_id}",
        )

    async def list_runs(
        self,
        *,
        status: RunStatus | None,
        limit: int,
        cursor: int | None,
        owner: Owner = ANY_OWNER,
    ) -> RunPage:
        """The newest ``limit`` runs before ``cursor`` (of ``owner`` only, when given)."""
        where: list[str] = []
        params: list[Any] = []
        if owner is not ANY_OWNER:
            where.append("owner IS ?")
            params.append(owner)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if cursor is not None:
            where.append("n < ?")
            params.append(cursor)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        # Only fixed fragments are interpolated; every value is a parameter.
        sql = f"SELECT {RUN_COLUMNS} FROM runs {clause} ORDER BY n DESC LIMIT ?"  # noqa: S608
        rows = await self._read(
            sql,
            (*params, limit + 1),
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return RunPage(
            runs=[run_info_of(r) for r in rows],
            next_cursor=str(rows[-1][0]) if more and rows else None,
        )

    async def unfinished(self) -> list[str]:
        rows = await self._read(
            "SELECT run_id FROM runs WHERE status IN ('pending', 'running', 'waiting') ORDER BY n"
        )
        return [r[0] for r in rows]

    async def count_by_status(self) -> dict[str, int]:
        rows = await self._read("SELECT status, COUNT(*) FROM runs GROUP BY status")
        return {str(status): int(count) for status, count in rows}

    async def events(self, run_id: str, *, after: int = 0, limit: int = 500) -> list[bytes]:
        """Stored events of a run with ``seq > after``, in order, as JSON."""
        rows = await self._read(
            "SELECT body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after, limit),
        )
        return [bytes(r[0]) for r in rows]

    async def rollouts(self, run_id: str) -> list[RolloutInfo]:
        rows = await self._read(ROLLOUTS_SQL, (run_id,))
        return [rollout_info_of(r) for r in rows]

    async def steps(self, run_id: str, rollout_id: str | None = None) -> dict[str, list[Step]]:
        """Committed steps by rollout, each list in index order."""
        sql = STEPS_SQL
        params: tuple[Any, ...] = (run_id,)
        if rollout_id is not None:
            sql += " AND s.rollout_id = ?"
            params = (run_id, rollout_id)
        rows = await self._read(sql + " ORDER BY s.rollout_id, s.idx", params)
        out: dict[str, list[Step]] = {}
        for row in rows:
            out.setdefault(row[0], []).append(step_of(row))
        return out

    async def summaries(self, run_id: str) -> list[TrajectorySummary]:
        rows = await self._read(
            "SELECT body FROM summaries WHERE run_id = ? ORDER BY rowid", (run_id,)
        )
        return [msgspec.json.decode(r[0], type=TrajectorySummary) for r in rows]

    async def trajectory(self, run_id: str, rollout_id: str) -> Trajectory | None:
        info = await self.run_info(run_id)
        if info is None:
            return None
        rows = await self._read(
            "SELECT status, answer, cost, finished, started FROM rollouts "
            "WHERE run_id = ? AND rollout_id = ?",
            (run_id, rollout_id),
        )
        if not rows:
            return None
        status, answer, cost, finished, started = rows[0]
        end = msgspec.json.decode(finished, type=RolloutFinished) if finished else None
        start = msgspec.json.decode(started, type=RolloutStarted) if started else None
        steps = (await self.steps(run_id, rollout_id)).get(rollout_id, [])
        known = ("running", "finished", "failed", "cancelled", "exhausted")
        return Trajectory(
            run_id=run_id,
            rollout_id=rollout_id,
            agent=start.agent if start is not None and start.agent else info.agent,
            task=start.task if start is not None and start.task is not None else info.task,
            parent_rollout_id=start.parent_rollout_id if start is not None else None,
            steps=steps,
            answer=answer,
            status=status if status in known else "failed",
            cost=msgspec.json.decode(cost, type=Cost) if cost is not None else Cost(),
            stop_reason=end.stop_reason if end is not None else None,
        )

    async def checkpoint(self, run_id: str) -> RunCheckpoint:
        """What the run committed: every rollout's steps, end and summary."""
        steps = await self.steps(run_id)
        rows = await self._read(
            "SELECT rollout_id, finished FROM rollouts WHERE run_id = ?", (run_id,)
        )
        finished = {
            r[0]: msgspec.json.decode(r[1], type=RolloutFinished) for r in rows if r[1] is not None
        }
        summaries = {s.rollout_id: s for s in await self.summaries(run_id)}
        last = await self._read("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,))
        # Started ones too (a pipeline's own rollout records no step).
        rollout_ids: Iterable[str] = {*(r[0] for r in rows), *steps, *finished, *summaries}
        rollouts: dict[RolloutId, RolloutCheckpoint] = {}
        for rid in rollout_ids:
            try:
                key = RolloutId.parse(run_id, rid)
            except ValueError:
                # Not a rollout the engine named (an aggregator's placeholder
                # summary): nothing to resume from.
                continue
            rollouts[key] = RolloutCheckpoint(
                steps=steps.get(rid, []), finished=finished.get(rid), summary=summaries.get(rid)
            )
        return RunCheckpoint(
            next_seq=(last[0][0] or 0) + 1, rollouts=rollouts, calls=await self._journal(run_id)
        )

    async def _journal(self, run_id: str) -> list[JournaledCall]:
        """The run's journal of model calls (``CallReserved`` events, each
        with its ``CallSettled`` if one was committed), in order."""
        rows = await self._read(
            "SELECT body FROM events WHERE run_id = ? AND type IN (?, ?) ORDER BY seq",
            (run_id, CallReserved.__struct_config__.tag, CallSettled.__struct_config__.tag),
        )
        reserved: dict[str, CallReserved] = {}
        settled: dict[str, CallSettled] = {}
        for (body,) in rows:
            event = decode_event(body)
            if isinstance(event, CallReserved):
                reserved[event.call] = event
            elif isinstance(event, CallSettled):
                settled[event.call] = event
        calls: list[JournaledCall] = []
        for call, booked in reserved.items():
            end = settled.get(call)
            calls.append(
                JournaledCall(
                    request_id=booked.request_id,
                    model=booked.model,
                    reserved=Usage(
                        prompt_tokens=booked.prompt_tokens,
                        completion_tokens=booked.completion_tokens,
                    ),
                    settled=end is not None,
                    usage=end.usage if end is not None else None,
                    reply=end.reply if end is not None else None,
                )
            )
        return calls

    async def questions(
        self, run_id: str
    ) -> tuple[dict[str, ElicitationRequested], dict[str, ElicitationAnswered]]:
        """The questions the run asked (``ElicitationRequested``) and how
        those that ended were answered (``ElicitationAnswered``), by id."""
        rows = await self._read(
            "SELECT body FROM events WHERE run_id = ? AND type IN (?, ?) ORDER BY seq",
            (
                run_id,
                ElicitationRequested.__struct_config__.tag,
                ElicitationAnswered.__struct_config__.tag,
            ),
        )
        asked: dict[str, ElicitationRequested] = {}
        answered: dict[str, ElicitationAnswered] = {}
        for (body,) in rows:
            event = decode_event(body)
            if isinstance(event, ElicitationRequested):
                asked.setdefault(event.question_id, event)  # the first: its deadline
            elif isinstance(event, ElicitationAnswered):
                answered[event.question_id] = event
        return asked, answered

    async def record_delivery(self, delivery: WebhookDelivery) -> None:
        """Write a webhook delivery's current state (one row per delivery)."""
        await self._write(
            [
                (
                    "INSERT INTO webhook_deliveries (delivery_id, run_id, body) VALUES (?, ?, ?) "
                    "ON CONFLICT (delivery_id) DO UPDATE SET body = excluded.body",
                    (delivery.delivery_id, delivery.run_id, msgspec.json.encode(delivery)),
                )
            ],
            what=f"run {delivery.run_id} webhook delivery {delivery.delivery_id}",
        )

    async def deliveries(self, run_id: str) -> list[WebhookDelivery]:
        """The run's webhook deliveries, in the order they were made."""
        rows = await self._read(
            "SELECT body FROM webhook_deliveries WHERE run_id = ? ORDER BY rowid", (run_id,)
        )
        return [msgspec.json.decode(body, type=WebhookDelivery) for (body,) in rows]

    async def pending_deliveries(self) -> list[WebhookDelivery]:
        """Webhook deliveries not yet delivered nor given up (an earlier
        daemon stopped before their last try), oldest first."""
        rows = await self._read("SELECT body FROM webhook_deliveries ORDER BY rowid")
        found = [msgspec.json.decode(body, type=WebhookDelivery) for (body,) in rows]
        return [d for d in found if d.status == "pending"]

    async def integrity_check(self) -> str:
        rows = await self._read("PRAGMA integrity_check")
        return str(rows[0][0])


__all__ = ["ANY_OWNER", "Owner", "RunStore", "StoreError", "Synchronous"]
