"""The run store's SQL: the schema, the rows each event writes, and how a
run's row reads back as a ``RunInfo``.  ``store`` owns the connections and
the writer; this module only says what goes where.

May import protocols; nothing else of the project.
"""

from __future__ import annotations

import time
from typing import Any, Final

import msgspec

from agentrt.protocols._api import RolloutInfo, RunInfo
from agentrt.protocols._events import (
    BudgetUpdated,
    Event,
    RolloutFinished,
    RolloutStarted,
    RunStarted,
    StepRecorded,
    SummaryWritten,
)
from agentrt.protocols._run import RunRequest
from agentrt.protocols._trajectory import Step
from agentrt.protocols._usage import BudgetCut, Cost

#: ``events`` is a rowid table: its bodies (a step's JSON, kilobytes) in the
#: key b-tree of a ``WITHOUT ROWID`` table cost three times the writer's CPU
#: per insert (28 against 9 us, issue 31); a file made before keeps its table.
SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS runs (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    agent TEXT NOT NULL,
    task TEXT NOT NULL,
    request BLOB NOT NULL,
    rollouts INTEGER NOT NULL,
    aggregate TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    answer TEXT,
    error TEXT,
    result BLOB,
    cost BLOB,
    resumed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, n);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    ts REAL NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    body BLOB NOT NULL,
    committed_at REAL NOT NULL,
    seq INTEGER,
    PRIMARY KEY (run_id, rollout_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollouts (
    run_id TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    status TEXT NOT NULL,
    steps INTEGER NOT NULL DEFAULT 0,
    answer TEXT,
    cost BLOB,
    finished BLOB,
    started BLOB,
    PRIMARY KEY (run_id, rollout_id)
);
CREATE TABLE IF NOT EXISTS summaries (
    run_id TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (run_id, rollout_id)
);
CREATE TABLE IF NOT EXISTS threads (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    metadata BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS thread_runs (
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage (
    run_id TEXT PRIMARY KEY,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_prompt_tokens INTEGER NOT NULL,
    usd REAL NOT NULL,
    model_calls INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    delivery_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_run ON webhook_deliveries (run_id);
"""

#: Columns added after a store file may have been created: (table, column, type).
ADDED_COLUMNS: Final = (
    ("rollouts", "started", "BLOB"),
    ("runs", "owner", "TEXT"),
    ("threads", "owner", "TEXT"),
    ("runs", "stopped", "BLOB"),
    ("steps", "seq", "INTEGER"),
)

Statement = tuple[str, tuple[Any, ...]]

RUN_COLUMNS: Final = (
    "n, run_id, status, agent, task, rollouts, aggregate, created_at, updated_at, "
    "answer, error, cost, resumed, owner, stopped, request"
)


_INSERT_EVENT: Final = "INSERT INTO events (run_id, seq, type, ts, body) VALUES (?, ?, ?, ?, ?)"

_WITH_ROWS: Final = frozenset(
    {StepRecorded, RolloutStarted, RolloutFinished, SummaryWritten, BudgetUpdated, RunStarted}
)
"""The events that write more than their own row (most of a run's do not:
the call journal's, tool calls, signals; a ``RunFinished`` neither, the
run's row is settled by ``RunStore.finish`` with the whole result)."""


def event_statements(event: Event) -> list[Statement]:
    """The rows an event writes: its own row in ``events``, then the step,
    rollout, summary, usage or run rows it implies."""
    kind = type(event)
    run = event.run_id
    out: list[Statement] = [
        (
            _INSERT_EVENT,
            (run, event.seq, kind.__struct_config__.tag, event.ts, msgspec.json.encode(event)),
        ),
    ]
    if kind not in _WITH_ROWS:
        return out
    match event:
        case StepRecorded(rollout_id=rollout, step=step):
            # The step's body is its event's (``seq``): stored once.  An empty
            # ``body`` says so; a store an older agentrt wrote has the step's
            # JSON there and no ``seq`` (``STEPS_SQL`` reads both).
            out.append(
                (
                    "INSERT INTO steps (run_id, rollout_id, idx, body, committed_at, seq) "
                    "VALUES (?, ?, ?, X'', ?, ?)",
                    (run, rollout, step.index, time.time(), event.seq),
                )
            )
            out.append(
                (
                    "INSERT INTO rollouts (run_id, rollout_id, status, steps) "
                    "VALUES (?, ?, 'running', 1) ON CONFLICT (run_id, rollout_id) "
                    "DO UPDATE SET steps = steps + 1",
                    (run, rollout),
                )
            )
        case RolloutStarted(rollout_id=rollout):
            out.append(
                (
                    "INSERT INTO rollouts (run_id, rollout_id, status, started) "
                    "VALUES (?, ?, 'running', ?) ON CONFLICT (run_id, rollout_id) "
                    "DO UPDATE SET status = 'running', started = excluded.started",
                    (run, rollout, msgspec.json.encode(event)),
                )
            )
        case RolloutFinished(rollout_id=rollout, status=status, answer=answer, cost=cost):
            out.append(
                (
                    "INSERT INTO rollouts (run_id, rollout_id, status, answer, cost, finished) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, rollout_id) DO UPDATE SET "
                    "status = excluded.status, answer = excluded.answer, cost = excluded.cost, "
                    "finished = excluded.finished",
                    (
                        run,
                        rollout,
                        status,
                        answer,
                        msgspec.json.encode(cost),
                        msgspec.json.encode(event),
                    ),
                )
            )
        case SummaryWritten(summary=summary):
            out.append(
                (
                    "INSERT OR REPLACE INTO summaries (run_id, rollout_id, body) VALUES (?, ?, ?)",
                    (run, summary.rollout_id, msgspec.json.encode(summary)),
                )
            )
        case BudgetUpdated(spent=spent):
            u = spent.usage
            out.append(
                (
                    "INSERT OR REPLACE INTO usage (run_id, prompt_tokens, completion_tokens, "
                    "cached_prompt_tokens, usd, model_calls) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        run,
                        u.prompt_tokens,
                        u.completion_tokens,
                        u.cached_prompt_tokens,
                        spent.usd,
                        spent.model_calls,
                    ),
                )
            )
            out.append(
                ("UPDATE runs SET cost = ? WHERE run_id = ?", (msgspec.json.encode(spent), run))
            )
        case RunStarted():
            out.append(
                (
                    "UPDATE runs SET status = 'running' WHERE run_id = ? AND status = 'pending'",
                    (run,),
                )
            )
        case _:
            pass
    return out


def run_info_of(row: tuple[Any, ...]) -> RunInfo:
    (
        _,
        run_id,
        status,
        agent,
        task,
        rollouts,
        aggregate,
        created,
        updated,
        answer,
        error,
        cost,
        resumed,
        owner,
        stopped,
        request,
    ) = row
    meta = msgspec.json.decode(request, type=RunRequest).metadata if request else {}
    return RunInfo(
        run_id=run_id,
        status=status,
        agent=agent,
        task=task,
        created_at=created,
        updated_at=updated,
        rollouts=rollouts,
        aggregate=aggregate,
        answer=answer,
        error=error,
        cost=msgspec.json.decode(cost, type=Cost) if cost is not None else Cost(),
        resumed=resumed,
        metadata=dict(meta),
        owner=owner,
        stopped=msgspec.json.decode(stopped, type=BudgetCut) if stopped is not None else None,
    )


ROLLOUTS_SQL: Final = (
    "SELECT rollout_id, status, steps, answer, cost, finished FROM rollouts "
    "WHERE run_id = ? ORDER BY rowid"
)
"""A run's rollouts, in the order they started (``rollout_info_of`` decodes a row)."""


STEPS_SQL: Final = (
    "SELECT s.rollout_id, s.body, e.body FROM steps AS s "
    "LEFT JOIN events AS e ON e.run_id = s.run_id AND e.seq = s.seq WHERE s.run_id = ?"
)
"""A run's committed steps (``AND s.rollout_id = ?`` for one rollout's; ``step_of``
decodes a row): each step's JSON is its ``StepRecorded`` event's."""

_STEP_EVENT: Final = msgspec.json.Decoder(StepRecorded)


def step_of(row: tuple[Any, ...]) -> Step:
    """A ``STEPS_SQL`` row's step: from its event, or (a store an older
    agentrt wrote) from the step's own row."""
    own, event = row[1], row[2]
    if own:
        return msgspec.json.decode(own, type=Step)
    return _STEP_EVENT.decode(event).step


def rollout_error(status: str, stop_reason: str | None) -> str | None:
    """A rollout's ``RolloutInfo.error``: its stop reason, unless it answered."""
    return None if status in ("finished", "running", "queued") else stop_reason or status


def rollout_info_of(row: tuple[Any, ...]) -> RolloutInfo:
    rollout_id, status, steps, answer, cost, finished = row
    end = msgspec.json.decode(finished, type=RolloutFinished) if finished is not None else None
    return RolloutInfo(
        rollout_id=rollout_id,
        status=status,
        steps=steps,
        answer=answer,
        cost=msgspec.json.decode(cost, type=Cost) if cost is not None else Cost(),
        error=rollout_error(status, end.stop_reason) if end is not None else None,
    )


__all__ = [
    "ADDED_COLUMNS",
    "ROLLOUTS_SQL",
    "RUN_COLUMNS",
    "SCHEMA",
    "STEPS_SQL",
    "Statement",
    "event_statements",
    "rollout_error",
    "rollout_info_of",
    "run_info_of",
    "step_of",
]
