"""Trajectories as data: pools of rollouts, their file format, and where
they are read from.

Owns ``Pool`` (the rollouts of one task or run: summaries, trajectories,
the expected answer), ``TrajectoryRecorder`` (an event sink that rebuilds
a run's top-level trajectories from its events), the export schema
(``TrajectoryRecord``, ``FORMAT`` at ``VERSION``: one record per rollout,
as JSONL or, with ``pyarrow``, Parquet) and ``read_pools``, which reads an
exported file or the daemon's run store (read only: the store's own API).
Must not print, run rollouts or aggregate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec

from agentrt.protocols._events import Event, RolloutFinished, RolloutStarted, StepRecorded
from agentrt.protocols._ids import RolloutId, is_top_level
from agentrt.protocols._run import RunResult
from agentrt.protocols._trajectory import Step, Trajectory, TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import ConfigError

FORMAT: Final = "agentrt.trajectories"
"""The ``format`` every record carries."""
VERSION: Final = 1
"""The schema version this agentrt writes and reads; a file of another
version is refused (naming the file, the line and both versions)."""

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"


@dataclass(slots=True)
class Pool:
    """The rollouts of one task (an eval) or one run (the daemon), which an
    aggregator chooses among.  ``group`` names it (the task's id, the run's
    id); ``expected``/``verifier`` are the task's, when known."""

    group: str
    task: str
    summaries: list[TrajectorySummary]
    trajectories: dict[str, Trajectory] = field(default_factory=dict)
    task_id: str | None = None
    expected: str | None = None
    verifier: str | None = None


class TrajectoryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One rollout of a pool, as a line of an exported file (schema
    ``agentrt.trajectories`` version 1; docs/evaluation.md)."""

    format: str = FORMAT
    version: int = VERSION
    group: str
    """The pool the rollout belongs to (a task id, a run id)."""
    task: str
    task_id: str | None = None
    expected: str | None = None
    verifier: str | None = None
    rollout_id: str
    answer: str | None = None
    status: str = ""
    """The trajectory's status (``finished``, ``failed``...); ``""`` when
    only the summary is known."""
    tokens: int = 0
    usd: float = 0.0
    model_calls: int = 0
    summary: TrajectorySummary
    trajectory: Trajectory | None = None


class _Head(msgspec.Struct, kw_only=True):
    format: Any = None
    version: Any = None


# -- recording ----------------------------------------------------------------------


class TrajectoryRecorder:
    """An event sink (forwarding every event to ``then``) keeping each
    top-level rollout's steps and end, for ``trajectories()`` (sub-agents'
    rollouts are inside their steps)."""

    def __init__(self, then: Callable[[Event], Awaitable[None]] | None = None) -> None:
        self._then = then
        self._started: dict[str, RolloutStarted] = {}
        self._steps: dict[str, list[Step]] = {}
        self._finished: dict[str, RolloutFinished] = {}
        self.run_id = ""
        self.agent = ""

    async def __call__(self, event: Event) -> None:
        match event:
            case RolloutStarted(rollout_id=rid) if is_top_level(rid):
                self._started[rid] = event
                self.run_id = event.run_id
            case StepRecorded(rollout_id=rid, step=step) if is_top_level(rid):
                self._steps.setdefault(rid, []).append(step)
            case RolloutFinished(rollout_id=rid) if is_top_level(rid):
                self._finished[rid] = event
            case _:
                pass
        if self._then is not None:
            await self._then(event)

    def trajectories(self, task: str) -> dict[str, Trajectory]:
        """Every top-level rollout seen, by id."""
        out: dict[str, Trajectory] = {}
        for rid in {*self._started, *self._steps, *self._finished}:
            start, end = self._started.get(rid), self._finished.get(rid)
            status = end.status if end is not None else "failed"
            out[rid] = Trajectory(
                run_id=end.run_id if end is not None else self.run_id,
                rollout_id=rid,
                agent=(start.agent or "") if start is not None else "",
                task=task,
                steps=self._steps.get(rid, []),
                answer=end.answer if end is not None else None,
                status=status if status in _STATUSES else "failed",  # type: ignore[arg-type]
                cost=end.cost if end is not None else Cost(),
                stop_reason=end.stop_reason if end is not None else None,
            )
        return out


_STATUSES: Final = ("running", "finished", "failed", "cancelled", "exhausted")


# -- writing ------------------------------------------------------------------------


def records(pools: Iterable[Pool]) -> list[TrajectoryRecord]:
    """One record per rollout of each pool, in pool and rollout order."""
    out: list[TrajectoryRecord] = []
    for pool in pools:
        for summary in pool.summaries:
            trajectory = pool.trajectories.get(summary.rollout_id)
            cost = trajectory.cost if trajectory is not None else summary.cost
            out.append(
                TrajectoryRecord(
                    group=pool.group,
                    task=pool.task,
                    task_id=pool.task_id,
                    expected=pool.expected,
                    verifier=pool.verifier,
                    rollout_id=summary.rollout_id,
                    answer=summary.answer,
                    status=trajectory.status if trajectory is not None else "",
                    tokens=cost.usage.total_tokens,
                    usd=cost.usd,
                    model_calls=cost.model_calls,
                    summary=summary,
                    trajectory=trajectory,
                )
            )
    return out


def export_run(path: str | Path, task: str, result: RunResult, recorder: TrajectoryRecorder) -> int:
    """Write one run (``agentrt run --export``): its rollouts' summaries and
    the trajectories ``recorder`` saw, as one pool named by the run's id."""
    pool = Pool(
        group=result.run_id,
        task=task,
        summaries=list(result.summaries),
        trajectories=recorder.trajectories(task),
    )
    return write_pools(path, [pool])


def write_pools(path: str | Path, pools: Sequence[Pool]) -> int:
    """Write ``pools`` to ``path``: Parquet when it ends in ``.parquet``
    (needs ``pyarrow``), JSONL otherwise.  Returns the records written.
    Raises ``ConfigError`` for Parquet without ``pyarrow``."""
    target = Path(path)
    rows = records(pools)
    if target.suffix == ".parquet":
        _write_parquet(target, rows)
        return len(rows)
    encoder = msgspec.json.Encoder()
    with target.open("wb") as out:
        for row in rows:
            out.write(encoder.encode(row))
            out.write(b"\n")
    return len(rows)


def _pyarrow(where: str) -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(
            "Parquet needs pyarrow: pip install 'agentrt[parquet]' (or use .jsonl)", where=where
        ) from None
    return pyarrow


def _write_parquet(target: Path, rows: Sequence[TrajectoryRecord]) -> None:
    pa = _pyarrow(str(target))
    encode = msgspec.json.encode
    columns: dict[str, list[Any]] = {name: [] for name in TrajectoryRecord.__struct_fields__}
    for row in rows:
        for name, column in columns.items():
            value = getattr(row, name)
            if name in ("summary", "trajectory"):
                value = None if value is None else encode(value).decode()
            column.append(value)
    schema = pa.schema(
        [
            ("format", pa.string()),
            ("version", pa.int32()),
            ("group", pa.string()),
            ("task", pa.string()),
            ("task_id", pa.string()),
            ("expected", pa.string()),
            ("verifier", pa.string()),
            ("rollout_id", pa.string()),
            ("answer", pa.string()),
            ("status", pa.string()),
            ("tokens", pa.int64()),
            ("usd", pa.float64()),
            ("model_calls", pa.int64()),
            ("summary", pa.string()),
            ("trajectory", pa.string()),
        ]
    )
    pa.parquet.write_table(pa.table(columns, schema=schema), target)


# -- reading ------------------------------------------------------------------------


def _checked(head: _Head, where: str) -> None:
    if head.format != FORMAT:
        raise ConfigError(
            f"not an agentrt trajectory record (format {head.format!r}, expected {FORMAT!r})",
            where=where,
        )
    if head.version != VERSION:
        raise ConfigError(
            f"schema version {head.version!r}; this agentrt reads version {VERSION} "
            "(export it again with this version, or use the agentrt that wrote it)",
            where=where,
        )


def _read_jsonl(path: Path) -> list[TrajectoryRecord]:
    head_decoder = msgspec.json.Decoder(_Head)
    decoder = msgspec.json.Decoder(TrajectoryRecord)
    rows: list[TrajectoryRecord] = []
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                _checked(head_decoder.decode(line), where)
                rows.append(decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ConfigError(f"bad record: {exc}", where=where) from None
    return rows


def _read_parquet(path: Path) -> list[TrajectoryRecord]:
    pa = _pyarrow(str(path))
    try:
        table = pa.parquet.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ConfigError(f"cannot read Parquet: {exc}", where=str(path)) from None
    rows: list[TrajectoryRecord] = []
    for number, raw in enumerate(table.to_pylist(), 1):
        where = f"{path}: row {number}"
        _checked(_Head(format=raw.get("format"), version=raw.get("version")), where)
        try:
            for name in ("summary", "trajectory"):
                if raw.get(name) is not None:
                    raw[name] = msgspec.json.decode(raw[name])
            rows.append(msgspec.convert(raw, TrajectoryRecord))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ConfigError(f"bad record: {exc}", where=where) from None
    return rows


def pools_of(rows: Iterable[TrajectoryRecord]) -> list[Pool]:
    """Records grouped into pools (by ``group``, in first-seen order)."""
    pools: dict[str, Pool] = {}
    for row in rows:
        pool = pools.get(row.group)
        if pool is None:
            pool = pools[row.group] = Pool(
                group=row.group,
                task=row.task,
                summaries=[],
                task_id=row.task_id,
                expected=row.expected,
                verifier=row.verifier,
            )
        pool.summaries.append(row.summary)
        if row.trajectory is not None:
            pool.trajectories[row.rollout_id] = row.trajectory
    return list(pools.values())


async def read_pools(source: str | Path, runs: Sequence[str] = ()) -> list[Pool]:
    """The pools in ``source``: an exported ``.jsonl`` or ``.parquet`` file,
    or the daemon's run store (a SQLite file; ``runs`` picks run ids, all
    finished runs by default).  Raises ``ConfigError`` naming the file (and
    line) for a missing or unreadable source, a record of another schema
    version, or a run the store does not have."""
    path = Path(source)
    if await anyio.to_thread.run_sync(_is_store, path):
        return await _read_store(path, runs)
    if runs:
        raise ConfigError(
            "--run picks runs of a daemon store, not of an exported file", where=str(path)
        )
    return await anyio.to_thread.run_sync(read_file, path)


def _is_store(path: Path) -> bool:
    if not path.is_file():
        raise ConfigError("no such file", where=str(path))
    with path.open("rb") as probe:
        return probe.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC


def read_file(path: str | Path) -> list[Pool]:
    """The pools of an exported file (``.parquet``, else JSONL); raises
    ``ConfigError`` like ``read_pools``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such file", where=str(path))
    rows = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
    if not rows:
        raise ConfigError("no trajectory records", where=str(path))
    return pools_of(rows)


async def _read_store(path: Path, runs: Sequence[str]) -> list[Pool]:
    from agentrt.runtime.serve.store._run_store import RunStore, StoreError

    pools: list[Pool] = []
    missing: list[str] = []  # raised once the store is closed (its task group would wrap it)
    try:
        async with RunStore(path) as store:
            ids = list(runs) or await _finished_runs(store)
            for run_id in ids:
                info = await store.run_info(run_id)
                if info is None:
                    missing.append(run_id)
                    continue
                summaries = [s for s in await store.summaries(run_id) if _first_round(run_id, s)]
                trajectories: dict[str, Trajectory] = {}
                for summary in summaries:
                    found = await store.trajectory(run_id, summary.rollout_id)
                    if found is not None:
                        trajectories[summary.rollout_id] = found
                pools.append(
                    Pool(
                        group=run_id, task=info.task, summaries=summaries, trajectories=trajectories
                    )
                )
    except StoreError as exc:
        raise ConfigError(str(exc), where=str(path)) from None
    if missing:
        raise ConfigError(f"no run {missing[0]!r} in the store", where=str(path))
    if not pools:
        raise ConfigError("the store holds no finished run", where=str(path))
    return pools


async def _finished_runs(store: Any) -> list[str]:
    ids: list[str] = []
    cursor: int | None = None
    while True:
        page = await store.list_runs(status=None, limit=500, cursor=cursor)
        ids += [r.run_id for r in page.runs if r.status in ("succeeded", "failed")]
        if page.next_cursor is None:
            return list(reversed(ids))  # oldest first
        cursor = int(page.next_cursor)


def _first_round(run_id: str, summary: TrajectorySummary) -> bool:
    """A run's own rollouts (``<run>-r<i>``), not PDR's refinements."""
    try:
        rid = RolloutId.parse(run_id, summary.rollout_id)
    except ValueError:
        return False
    return not rid.path and rid.slot[:1] == "r" and rid.slot[1:].isdigit()


__all__ = [
    "FORMAT",
    "VERSION",
    "Pool",
    "TrajectoryRecord",
    "TrajectoryRecorder",
    "export_run",
    "pools_of",
    "read_file",
    "read_pools",
    "records",
    "write_pools",
]
