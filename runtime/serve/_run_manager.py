"""The run manager (``RunManager``): the one object every daemon interface
talks to.

The roof: may import every layer; only the daemon's interfaces import it.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Final, Self, TypeVar, final

import anyio
import msgspec
from anyio.abc import TaskGroup

from agentrt.agents._run_options import CLIENT_TOOL_STOP
from agentrt.aggregators._compose import parse_config
from agentrt.aggregators._judge import Judge
from agentrt.protocols._api import (
    TERMINAL_STATUSES,
    AgentInfo,
    ElicitationAnswer,
    RolloutInfo,
    RunDetail,
    RunInfo,
    RunPage,
    ThreadInfo,
)
from agentrt.protocols._codec import decode_event
from agentrt.protocols._events import (
    BudgetUpdated,
    CallReserved,
    CallSettled,
    ElicitationAnswered,
    ElicitationRequested,
    ErrorRaised,
    Event,
    McpAuthorizationRequired,
    RolloutFinished,
    RolloutQueued,
    RolloutRestarted,
    RolloutStarted,
    RunFinished,
    RunStarted,
    StepRecorded,
    TokenDelta,
)
from agentrt.protocols._ids import is_top_level, new_run_id
from agentrt.protocols._messages import AssistantMessage, ChatMessage, UserMessage
from agentrt.protocols._model import ModelReply
from agentrt.protocols._run import RunRequest, RunResult, RunStatus
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.protocols._webhooks import WebhookDelivery
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.config._daemon_config import DaemonConfig
from agentrt.runtime.engine._runtime import RunCheckpoint, Runtime
from agentrt.runtime.kernel._errors import ConfigError, UserError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._backend_health import BackendHealth, probe_backend
from agentrt.runtime.observe._log import get_logger, log_context
from agentrt.runtime.serve._api_problem import RETRY_AFTER_S, ApiProblem, invalid, not_found
from agentrt.runtime.serve._webhooks import WebhookSender, check_webhook
from agentrt.runtime.serve.store._run_store import ANY_OWNER, Owner, RunStore, StoreError
from agentrt.runtime.serve.store._store_sql import rollout_error
from agentrt.tools._tool import ElicitationReply, Tool

log = get_logger(__name__)

EventObserver = Callable[[Event], None]
"""Sees every committed event (metrics)."""

T = TypeVar("T")

#: A new run that asks for it (``RunRequest.stream_tokens``) streams its
#: model calls this long even before anyone follows it: the client that
#: posted it (the web page) connects a moment later.
TOKEN_GRACE_S: Final = 3.0
#: A follower that asked for tokens keeps them coming this long after its
#: last request (a follower asks again as soon as a batch is out).
TOKEN_LINGER_S: Final = 5.0
#: The events a run waits for the store to commit before it goes on: the
#: call journal's (a call is on record before it is sent, its reply before
#: its tools run).  The run's other events are committed in order behind
#: them without a wait each: a step is durable before the next call is
#: sent, and nothing is shown to a client (state, followers) before it is
#: committed.
_DURABLE_FIRST: Final = frozenset({CallReserved, CallSettled})
#: Events that change whether the run waits on a question: committed, then
#: the run's status follows in the store.
_ASKS: Final = frozenset({ElicitationRequested, ElicitationAnswered})
#: How long a probe of the backends' health is reused (``/readyz``).
HEALTH_CACHE_S: Final = 1.0
#: Token events an active run keeps for followers that fall behind (they
#: are never stored; the steps carry the whole text).
TOKEN_BACKLOG: Final = 1024


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


async def _enter_closing_cleanly(stack: AsyncExitStack, cm: AbstractAsyncContextManager[T]) -> T:
    """Enter ``cm`` on ``stack`` so that it closes as if the opener's body
    ended normally: a task group (the runs', the store's writer) would take
    the opener's error as its own and raise it wrapped in an
    ``ExceptionGroup``; this way it propagates as itself, and the group
    raises only for its own tasks' failures."""
    value = await cm.__aenter__()
    stack.push_async_callback(cm.__aexit__, None, None, None)
    return value


@dataclass(frozen=True, slots=True)
class EventBatch:
    """What ``RunManager.next_batch`` found: events in ``seq`` order, whether
    the run is over and all are out, the token cursor to ask with next."""

    events: list[Event]
    done: bool
    tokens_cursor: int | None = None


async def follow_batches(
    next_batch: Callable[[int, int | None], Awaitable[EventBatch]], *, after: int, tokens: bool
) -> AsyncIterator[Event]:
    """The events of successive ``next_batch(after, tokens_after)`` calls
    until a batch says the run is over: ``after`` moves past each stored
    event (a ``TokenDelta`` is never stored), ``tokens_after`` follows each
    batch's token cursor (``None`` unless ``tokens``)."""
    cursor = 0 if tokens else None
    while True:
        batch = await next_batch(after, cursor)
        cursor = batch.tokens_cursor
        for event in batch.events:
            if type(event) is not TokenDelta:
                after = event.seq
            yield event
        if batch.done:
            return


@dataclass(slots=True)
class _Live:
    """An active run's state, kept current from its events (``apply`` and
    changes to ``info`` under the manager's lock)."""

    info: RunInfo
    """The run as last changed, but for ``updated_at`` (see ``current``)."""
    request: RunRequest
    rollouts: dict[str, RolloutInfo] = field(default_factory=dict)
    scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    detached: bool = False
    """Shutting down: the run is being stopped and records nothing more."""
    write_failed: StoreError | None = None
    """An event the run did not wait for could not be committed."""
    changed: anyio.Event | None = None
    """Set on the next committed event; made only when a follower waits
    (most runs have none, and an event per event is garbage to collect)."""
    done: anyio.Event = field(default_factory=anyio.Event)
    last_seq: int = 0
    finished: bool = False
    """A ``RunFinished`` event was committed."""
    tokens: deque[TokenDelta] = field(default_factory=lambda: deque(maxlen=TOKEN_BACKLOG))
    """The latest token events (never stored)."""
    tokens_total: int = 0
    """Token events ever kept: a follower's cursor into ``tokens``."""
    tokens_until: float = 0.0
    """Until when (``time.monotonic``) the run's model calls stream."""
    asking: set[str] = field(default_factory=set)
    """The questions the run waits on (``waiting`` while there are any)."""
    touched: float = 0.0
    """When an event that changed nothing else of ``info`` was committed
    (most of a run's: kept apart, not a new ``RunInfo`` for each)."""

    def current(self) -> RunInfo:
        """``info`` as clients see it: updated when its last event was."""
        info = self.info
        if self.touched > info.updated_at:
            return msgspec.structs.replace(info, updated_at=self.touched)
        return info

    def answered(self, question: str, now: float) -> None:
        """``question`` waits no more: the run is ``running`` again when no
        other question waits."""
        self.asking.discard(question)
        if not self.asking and self.info.status == "waiting":
            self.info = msgspec.structs.replace(self.info, status="running", updated_at=now)

    def listening(self) -> bool:
        """Whether someone reads this run's tokens now."""
        return time.monotonic() < self.tokens_until

    def keep_token(self, event: TokenDelta) -> None:
        self.tokens.append(event)
        self.tokens_total += 1

    def tokens_after(self, cursor: int) -> tuple[list[TokenDelta], int]:
        """The token events past ``cursor`` still kept, and the new cursor."""
        first = self.tokens_total - len(self.tokens)
        skip = max(cursor, first) - first
        return list(itertools.islice(self.tokens, skip, None)), self.tokens_total

    def notify(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    def next_change(self) -> anyio.Event:
        if self.changed is None:
            self.changed = anyio.Event()
        return self.changed

    def apply(self, event: Event) -> None:
        info = self.info
        now = time.time()
        self.last_seq = max(self.last_seq, event.seq)
        match event:
            case RunStarted():
                self.info = msgspec.structs.replace(info, status="running", updated_at=now)
            case RolloutStarted(rollout_id=rid):
                old = self.rollouts.get(rid)
                self.rollouts[rid] = RolloutInfo(
                    rollout_id=rid, status="running", steps=old.steps if old else 0
                )
            case RolloutQueued(rollout_id=rid):
                self.rollouts[rid] = RolloutInfo(rollout_id=rid, status="queued")
            case RolloutRestarted(rollout_id=rid, resumed_steps=steps):
                # The new incarnation goes on from its committed steps.
                self.rollouts[rid] = RolloutInfo(rollout_id=rid, status="running", steps=steps)
            case StepRecorded(rollout_id=rid):
                old = self.rollouts.get(rid) or RolloutInfo(rollout_id=rid, status="running")
                self.rollouts[rid] = msgspec.structs.replace(old, steps=old.steps + 1)
            case RolloutFinished(rollout_id=rid, status=status, answer=answer, cost=cost):
                old = self.rollouts.get(rid) or RolloutInfo(rollout_id=rid, status=status)
                self.rollouts[rid] = msgspec.structs.replace(
                    old,
                    status=status,
                    answer=answer,
                    cost=cost,
                    error=rollout_error(status, event.stop_reason),
                )
            case ErrorRaised(rollout_id=str(rid), where=where, message=message) if (
                where.startswith("rollout ") and rid in self.rollouts
            ):
                # The run gave up on the rollout (a crash past its restarts...).
                old = self.rollouts[rid]
                self.rollouts[rid] = msgspec.structs.replace(
                    old, status="failed", error=old.error or message
                )
            case ElicitationRequested(question_id=question):
                self.asking.add(question)
                self.info = msgspec.structs.replace(info, status="waiting", updated_at=now)
            case ElicitationAnswered(question_id=question):
                self.answered(question, now)
            case RunFinished():
                self.finished = True
            case BudgetUpdated(spent=spent):
                self.info = msgspec.structs.replace(info, cost=spent, updated_at=now)
            case _:
                self.touched = now


@final
class RunManager:
    """Admits runs (``submit``) and executes them through ``Runtime.run`` in
    its task group; commits every event to the ``RunStore`` in order,
    waiting for the call journal's (a step is durable before the next call
    is sent) and showing each once it is committed; keeps active runs'
    state in memory (``get``/``detail`` touch no database); lets callers
    ``follow`` a run's events; cancels runs; and on opening resumes every run
    an earlier daemon left unfinished, from its committed steps.  Runs
    execute on the loop that opened it; other threads may call ``get``,
    ``detail``, ``list`` and ``active`` (a lock, never held across an
    ``await``, guards the shared state).

    ``backends``/``tools``/``prices``/``judge``
    are handed to the ``Runtime`` (tests and embedders pass fakes here);
    ``observer`` sees every committed event (the daemon's metrics).

    An async context manager, opened once: ``async with RunManager(...) as
    manager:`` opens the store, the runtime and the task group the runs
    execute in, then resumes unfinished runs; a failure at any of these
    steps closes what was opened, in reverse order, and raises.  Raises
    ``RuntimeError`` when opened twice or reopened once closed."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
        tools: Sequence[Tool] | None = None,
        prices: PriceTable | None = None,
        judge: Judge | None = None,
        observer: EventObserver | None = None,
    ) -> None:
        self.config = config
        self.store = RunStore(
            config.store.path,
            synchronous=config.store.synchronous,
            readers=config.store.readers,
            reader_idle_s=config.store.reader_idle_s,
        )
        self.runtime = Runtime(
            config.runtime,
            backends=backends,
            tools=config.tools.build() if tools is None else tools,
            prices=prices,
            judge=judge,
            on_elicitation="events",  # answered with answer_elicitation (the REST API)
            on_mcp_authorization=self._authorization_needed,
        )
        self._authorizations: dict[str, tuple[float, McpAuthorizationRequired]] = {}
        """Per MCP server: the approval it waits for (and when that ends)."""
        self.observer = observer
        self.webhooks = WebhookSender(config.server.webhook, self.store)
        """Posts each ended run's webhook (``RunRequest.webhook``, ``server.webhook``)."""
        self._lock = threading.Lock()
        self._thread_admission = anyio.Lock()
        """Held while a thread's next run is checked and recorded."""
        self._live: dict[str, _Live] = {}
        self._finished: dict[str, RunDetail] = {}
        """Recently finished runs, oldest first."""
        self._slots = anyio.CapacityLimiter(config.server.max_active_runs)
        self._admitting: dict[str | None, int] = {}  # by owner
        """Runs being admitted (counted against the limit before they are live)."""
        self._state = _State.UNOPENED
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self.accepting = False
        self.ready = False
        self.resumed: list[str] = []
        self._health: tuple[float, dict[str, BackendHealth]] | None = None

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is _State.OPEN:
            raise RuntimeError("Cannot open a RunManager that is already open.")
        if self._state is _State.CLOSED:
            raise RuntimeError("Cannot reopen a RunManager once it has been closed.")
        self._state = _State.OPEN
        try:
            async with AsyncExitStack() as stack:
                await _enter_closing_cleanly(stack, self.store)
                await stack.enter_async_context(self.runtime)
                await stack.enter_async_context(self.webhooks)
                self._tg = await _enter_closing_cleanly(stack, anyio.create_task_group())
                # Runs first detach, then the task group waits for them
                # (callbacks unwind in reverse).
                stack.callback(self._stop_runs)
                self.accepting = True
                await self._resume_unfinished()
                self.ready = True
                self._stack = stack.pop_all()
        except BaseException:
            self._state = _State.CLOSED
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state is not _State.OPEN or self._stack is None:
            raise RuntimeError(f"Cannot close a RunManager that is {self._state.value}.")
        self._state = _State.CLOSED
        stack, self._stack = self._stack, None
        await stack.__aexit__(exc_type, exc, tb)

    def _stop_runs(self) -> None:
        self.accepting = self.ready = False
        self._detach_all()
        self._tg = None

    def _detach_all(self) -> None:
        for live in self._live.values():
            live.detached = True
            if live.scope is not None:
                live.scope.cancel()
            else:
                live.cancel_requested = True

    async def drain(self, grace_s: float) -> list[str]:
        """Refuse new runs, give running ones ``grace_s`` to finish, then
        stop the rest (they stay unfinished in the store and resume on the
        next start).  Returns the ids of the runs stopped."""
        self.accepting = False
        with anyio.move_on_after(grace_s):
            for live in list(self._live.values()):
                await live.done.wait()
        stopped = [rid for rid, live in self._live.items() if not live.done.is_set()]
        if stopped:
            log.info("shutdown_checkpointing_runs", runs=len(stopped), grace_s=grace_s)
        self._detach_all()
        return stopped

    # -- agents --------------------------------------------------------------

    def agents(self) -> list[AgentInfo]:
        rc = self.config.runtime
        out: list[AgentInfo] = []
        for name, entry in rc.agents.items():
            if isinstance(entry, str):
                out.append(
                    AgentInfo(
                        name=name,
                        model=f"agentrt/{name}",
                        kind="spec",
                        description=entry,
                        default=name == rc.default_agent,
                    )
                )
            else:
                first = entry.instructions.strip().splitlines()[0] if entry.instructions else ""
                out.append(
                    AgentInfo(
                        name=name,
                        model=f"agentrt/{name}",
                        description=first,
                        default=name == rc.default_agent,
                    )
                )
        if rc.default_agent not in rc.agents:
            out.insert(
                0,
                AgentInfo(
                    name=rc.default_agent,
                    model=f"agentrt/{rc.default_agent}",
                    description="A plain assistant on the default model.",
                    default=True,
                ),
            )
        return out

    @property
    def usd_caps(self) -> bool:
        """Whether a run may cap its cost in USD (``Budget.max_usd``): the
        daemon has model prices."""
        return self.runtime.prices is not None

    def resolve_agent(self, name: str) -> str:
        """The configured agent a request's ``agent`` names (``default``: the
        default agent), or an ``ApiProblem`` listing the known ones."""
        rc = self.config.runtime
        if name in ("default", "") or name == rc.default_agent:
            return rc.default_agent
        if name in rc.agents:
            return name
        known = ", ".join(a.name for a in self.agents())
        raise ApiProblem(404, "not_found", f"unknown agent {name!r}; known: {known}", where="agent")

    # -- MCP authorization -----------------------------------------------------

    async def _authorization_needed(self, prompt: McpAuthorizationRequired) -> None:
        """An MCP server needs a person to approve agentrt's access: kept for
        ``GET /v1/mcp/authorizations`` (and logged) until it is approved or
        expires."""
        log.warning(
            "mcp_authorization_needed",
            server=prompt.server,
            server_url=prompt.server_url,
            authorization_url=prompt.authorization_url,
        )
        with self._lock:
            self._authorizations[prompt.server] = (
                time.monotonic() + prompt.expires_in_s,
                prompt,
            )

    async def mcp_authorizations(self) -> list[McpAuthorizationRequired]:
        """The approvals MCP servers wait for now, oldest first: an entry
        goes once its server is connected or its wait has expired."""
        status = await self.runtime.mcp_status() if self._authorizations else {}
        ready = {name for name, s in status.items() if s.state == "ready"}
        now = time.monotonic()
        with self._lock:
            for server in [
                s for s, (until, _) in self._authorizations.items() if until <= now or s in ready
            ]:
                del self._authorizations[server]
            pending = [prompt for _, prompt in self._authorizations.values()]
        return sorted(pending, key=lambda p: p.ts)

    # -- runs ----------------------------------------------------------------

    def _validate(self, request: RunRequest) -> RunRequest:
        if not request.task.strip():
            raise invalid("the task is empty", where="task")
        agent = self.resolve_agent(request.agent)
        scaling = request.scaling
        limit = self.config.server.max_rollouts
        if not 1 <= scaling.rollouts <= limit:
            raise invalid(
                f"rollouts must be between 1 and {limit} (server.max_rollouts), got "
                f"{scaling.rollouts}",
                where="scaling.rollouts",
            )
        try:
            parse_config(
                {**scaling.options, "name": scaling.aggregate}, "scaling.aggregate", strict=True
            )
        except ConfigError as exc:
            raise invalid(str(exc.args[0]) if exc.args else str(exc), where=exc.where) from None
        check_webhook(request.webhook, self.config.server.webhook)
        budget = request.budget  # its caps are >= 0 and finite (``Budget`` checks)
        if budget.max_usd is not None and self.runtime.prices is None:
            raise invalid(
                "a max_usd cap needs model prices, and this daemon has none configured",
                where="budget.max_usd",
            )
        return msgspec.structs.replace(request, agent=agent)

    async def submit(
        self,
        request: RunRequest,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        owner: str | None = None,
    ) -> RunInfo:
        """Validate and admit a run of the key ``owner`` (``None``: the
        shared token) (the next of ``thread_id``, when given:
        ``submit_in_thread``); it starts as soon as a slot is free."""
        if not self.accepting or self._tg is None:
            raise ApiProblem(503, "unavailable", "the daemon is shutting down; retry elsewhere")
        request = self._validate(request)
        run_id = run_id or new_run_id()
        self._reserve_admission(owner)
        try:
            info = await self.store.create_run(run_id, request, thread_id=thread_id, owner=owner)
            live = _Live(info=info, request=request)
            if request.stream_tokens:  # its client follows it at once
                live.tokens_until = time.monotonic() + TOKEN_GRACE_S
            with self._lock:
                self._live[run_id] = live
        finally:
            with self._lock:
                self._admitting[owner] -= 1
        self._tg.start_soon(self._execute, live, None)
        log.info("run_submitted", run_id=run_id, agent=request.agent, rollouts=info.rollouts)
        return info

    # -- threads -------------------------------------------------------------

    async def create_thread(
        self, metadata: dict[str, str], *, owner: str | None = None
    ) -> ThreadInfo:
        return await self.store.create_thread(new_run_id("thread"), metadata, owner=owner)

    async def thread(self, thread_id: str) -> ThreadInfo | None:
        return await self.store.thread(thread_id)

    async def list_threads(
        self, *, limit: int = 50, owner: Owner = ANY_OWNER
    ) -> builtins.list[ThreadInfo]:
        return await self.store.list_threads(limit=limit, owner=owner)

    async def delete_thread(self, thread_id: str) -> bool:
        """Forget the thread (its runs stay); ``False``: there was none."""
        if await self.store.thread(thread_id) is None:
            return False
        await self.store.delete_thread(thread_id)
        return True

    async def thread_history(self, thread: ThreadInfo) -> builtins.list[ChatMessage]:
        """The conversation ``thread`` holds: the one its last succeeded run
        ended (``conversation_of``: that run's conversation, which holds the
        turns before it, and its answer); a failed or cancelled run adds
        nothing.  A thread with an unfinished run is a 409 naming it."""
        last: str | None = None
        for run in thread.runs:
            if run.status not in TERMINAL_STATUSES:
                raise ApiProblem(
                    409,
                    "thread_busy",
                    f"thread {thread.thread_id!r} has run {run.run_id} {run.status}: one run "
                    f"at a time; wait for it (GET /v1/runs/{run.run_id}) or cancel it",
                    where="thread_id",
                )
            if run.status == "succeeded":
                last = run.run_id
        detail = await self.detail(last) if last is not None else None
        return await self.conversation_of(detail) if detail is not None else []

    async def submit_in_thread(
        self, thread_id: str, request: RunRequest, *, owner: str | None = None
    ) -> RunInfo:
        """The thread's next run: the thread's conversation (``thread_history``)
        then the run's task as a user message; or, when ``options`` holds a
        conversation, that one, which must go on from the thread's (a caller
        that read ``thread_history`` and added to it: else a 409, the thread
        moved on).  One run at a time (a 409 naming the unfinished one); an
        unknown thread, a 404."""
        async with self._thread_admission:  # the check and the insert, together
            thread = await self.store.thread(thread_id)
            if thread is None:
                raise not_found("thread", thread_id, where="thread_id")
            history = await self.thread_history(thread)
            given = request.options.conversation
            if given and given[: len(history)] != history:
                raise ApiProblem(
                    409,
                    "thread_moved",
                    f"thread {thread_id!r} went on while this run was asked for; ask again",
                    where="thread_id",
                )
            if history and not given:
                conversation = [*history, UserMessage(content=request.task)]
                options = msgspec.structs.replace(request.options, conversation=conversation)
                request = msgspec.structs.replace(request, options=options)
            return await self.submit(request, thread_id=thread_id, owner=owner)

    def _reserve_admission(self, owner: str | None) -> None:
        """Count one more run of ``owner`` in, or refuse it (429) when pending
        and running runs fill ``max_active_runs + max_pending_runs``, or the
        key's own unfinished runs its ``max_active_runs``."""
        server = self.config.server
        limit = server.max_active_runs + server.max_pending_runs
        key = server.keys.get(owner) if owner is not None else None
        with self._lock:
            if key is not None and key.max_active_runs is not None:
                own = self._admitting.get(owner, 0) + sum(
                    1 for live in self._live.values() if live.info.owner == owner
                )
                if own >= key.max_active_runs:
                    raise ApiProblem(
                        429,
                        "too_many_runs",
                        f"key {owner!r} has {own} unfinished runs, its limit "
                        f"(server.keys.{owner}.max_active_runs); retry after Retry-After "
                        "seconds, or when one ends",
                        where=f"server.keys.{owner}.max_active_runs",
                        retry_after=RETRY_AFTER_S,
                    )
            if len(self._live) + sum(self._admitting.values()) >= limit:
                raise ApiProblem(
                    429,
                    "too_many_runs",
                    f"the daemon holds its limit of {limit} unfinished runs "
                    f"({server.max_active_runs} running, server.max_active_runs, plus "
                    f"{server.max_pending_runs} pending); retry after Retry-After seconds",
                    where="server.max_pending_runs",
                    retry_after=RETRY_AFTER_S,
                )
            self._admitting[owner] = self._admitting.get(owner, 0) + 1

    def admission(self) -> dict[str, int]:
        """Runs admitted and not finished, by state, and their limit (``/metrics``)."""
        server = self.config.server
        with self._lock:
            unfinished = len(self._live)
        running = min(int(self._slots.borrowed_tokens), unfinished)
        return {
            "running": running,
            "pending": unfinished - running,
            "limit": server.max_active_runs + server.max_pending_runs,
        }

    async def _resume_unfinished(self) -> None:
        assert self._tg is not None
        for run_id in await self.store.unfinished():
            request = await self.store.request(run_id)
            info = await self.store.run_info(run_id)
            if request is None or info is None:
                continue
            asked, answered = await self.store.questions(run_id)
            checkpoint = dataclasses.replace(
                await self.store.checkpoint(run_id),
                incarnation=info.resumed + 1,
                asked=asked,
                answered=answered,
            )
            # Waiting again once it asks again (an answered question is not).
            status: RunStatus = "running" if info.status == "waiting" else info.status
            await self.store.set_status(run_id, status, resumed=True)
            live = _Live(
                info=msgspec.structs.replace(info, status=status, resumed=info.resumed + 1),
                request=request,
                last_seq=checkpoint.next_seq - 1,
            )
            for rollout in await self.store.rollouts(run_id):
                live.rollouts[rollout.rollout_id] = rollout
            with self._lock:
                self._live[run_id] = live
            self.resumed.append(run_id)
            steps = sum(len(c.steps) for c in checkpoint.rollouts.values())
            log.info("run_resumed", run_id=run_id, committed_steps=steps)
            self._tg.start_soon(self._execute, live, checkpoint)

    async def _sink(self, live: _Live, event: Event) -> None:
        if live.detached:
            return  # being checkpointed: only what was committed counts
        if type(event) is TokenDelta:  # for followers only, never stored
            live.keep_token(event)
            live.notify()
            return
        if live.write_failed is not None:
            raise live.write_failed
        kind = type(event)
        then = partial(self._committed, live, event)
        if kind in _ASKS:
            # Shielded: the run's status in the store follows its questions
            # (listed and resumed as waiting after a restart too).
            with anyio.CancelScope(shield=True):
                before = live.info.status
                await self.store.record(event, then=then)
                after = live.info.status
                if "waiting" in (before, after) and before != after:
                    await self.store.set_status(live.info.run_id, after)
            if type(event) is ElicitationRequested:
                await self.webhooks.run_waiting(live.current(), live.request, event)
            return
        # The run's state, its followers and the metrics see an event once it
        # is committed (``_committed``, in commit order), whether or not the
        # run waits for it here; a cancel landing mid-wait leaves it applied.
        await self.store.record(event, then=then, wait=kind in _DURABLE_FIRST)

    def _committed(self, live: _Live, event: Event, error: StoreError | None) -> None:
        if error is not None:  # raised to the run at its next event
            live.write_failed = live.write_failed or error
            return
        with self._lock:
            live.apply(event)
        if self.observer is not None:
            self.observer(event)
        live.notify()

    async def _execute(self, live: _Live, checkpoint: RunCheckpoint | None) -> None:
        run_id, request = live.info.run_id, live.request
        status: RunStatus = "failed"
        result: RunResult | None = None
        error: str | None = None
        try:
            # Shielded: a run stops only through its own scope (cancel, or
            # ``drain``/exit detaching it first), never half-recorded by an
            # outer cancellation racing the detach.
            with (
                anyio.CancelScope(shield=True),
                log_context(run_id=run_id),
                anyio.CancelScope() as scope,
            ):
                live.scope = scope
                if live.cancel_requested:
                    scope.cancel()
                async with self._slots:
                    result = await self.runtime.run(
                        request.task,
                        agent=request.agent
                        if request.agent in self.config.runtime.agents
                        else None,
                        scaling=request.scaling,
                        budget=request.budget,
                        events=partial(self._sink, live),
                        run_id=run_id,
                        checkpoint=checkpoint,
                        tokens=live.listening,
                        options=request.options,
                        journal=True,
                    )
            if scope.cancelled_caught or result is None:
                status, error = "cancelled", "cancelled by a client"
            else:
                status, error = result.status, result.error
        except UserError as exc:
            status, error = "failed", str(exc)
        except Exception as exc:
            log.error("run_crashed", run_id=run_id, exc_info=exc)
            status, error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            if not live.detached:
                with anyio.CancelScope(shield=True):
                    if await self._settle(live, status, result, error):
                        self._remember(live, result)
                        await self.webhooks.run_ended(live.current(), live.request)
            live.done.set()
            live.notify()
            with self._lock:
                self._live.pop(run_id, None)

    async def _settle(
        self, live: _Live, status: RunStatus, result: RunResult | None, error: str | None
    ) -> bool:
        """Record the run's end; whether that worked (if not, the store is
        the truth and the run's row says what it could)."""
        now = time.time()
        try:
            # The run's events still queued are committed and applied first
            # (``last_seq``, ``finished``).
            await self.store.barrier()
            failed = live.write_failed
            if failed is not None and failed.full:
                # Its end is not recorded either: the next start resumes the
                # run from what was committed (a full disk loses no run).
                raise failed
            if failed is not None and status == "succeeded":
                status, error = "failed", str(failed)
            if not live.finished:  # cancelled, or crashed before the engine said so
                end = RunFinished(
                    run_id=live.info.run_id, seq=live.last_seq + 1, ts=time.time(), status=status
                )
                await self.store.record(end)
                with self._lock:
                    live.apply(end)
                if self.observer is not None:
                    self.observer(end)
            await self.store.finish(live.info.run_id, status, result, error, at=now)
        except Exception as exc:
            log.error("run_settle_failed", run_id=live.info.run_id, exc_info=exc)
            return False
        with self._lock:
            live.info = msgspec.structs.replace(
                live.info,
                status=status,
                answer=result.answer if result else None,
                error=error,
                cost=result.cost if result else live.info.cost,
                stopped=result.stopped if result else None,
                updated_at=now,
            )
            live.touched = now  # its end, as stored: events applied since do not move it
        log.info("run_finished", run_id=live.info.run_id, status=status)
        return True

    def _remember(self, live: _Live, result: RunResult | None) -> None:
        """Keep a finished run's final state (what the store now holds) for
        the clients still polling it; the oldest make room."""
        capacity = self.config.server.finished_runs_cached
        if capacity == 0:
            return
        detail = RunDetail(
            run=live.current(),
            request=live.request,
            rollouts=list(live.rollouts.values()),
            result=result,
        )
        with self._lock:
            self._finished[live.info.run_id] = detail
            while len(self._finished) > capacity:
                del self._finished[next(iter(self._finished))]

    async def get(self, run_id: str) -> RunInfo | None:
        with self._lock:
            live = self._live.get(run_id)
            if live is not None:
                return live.current()
            finished = self._finished.get(run_id)
        if finished is not None:
            return finished.run
        return await self.store.run_info(run_id)

    async def detail(self, run_id: str) -> RunDetail | None:
        with self._lock:
            live = self._live.get(run_id)
            if live is not None:
                return RunDetail(
                    run=live.current(),
                    request=live.request,
                    rollouts=list(live.rollouts.values()),
                )
            finished = self._finished.get(run_id)
        if finished is not None:
            return finished
        return await self.store.detail(run_id)

    async def list(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        owner: Owner = ANY_OWNER,
    ) -> RunPage:
        """A page of runs, newest first (of ``owner`` only, when given)."""
        if not 1 <= limit <= 500:
            raise invalid(f"must be between 1 and 500, got {limit}", where="query.limit")
        position: int | None = None
        if cursor is not None:
            try:
                position = int(cursor)
            except ValueError:
                raise invalid(
                    f"not a cursor this daemon issued: {cursor!r}", where="query.cursor"
                ) from None
        page = await self.store.list_runs(status=status, limit=limit, cursor=position, owner=owner)
        with self._lock:
            current = [self._live.get(r.run_id) for r in page.runs]
        runs = [
            r if live is None else live.current()
            for r, live in zip(page.runs, current, strict=True)
        ]
        if status is not None:
            runs = [r for r in runs if r.status == status]
        return RunPage(runs=runs, next_cursor=page.next_cursor)

    async def cancel(self, run_id: str) -> RunInfo | None:
        live = self._live.get(run_id)
        if live is None:
            return await self.get(run_id)
        live.cancel_requested = True
        if live.scope is not None:
            live.scope.cancel()
        await live.done.wait()
        return await self.get(run_id)

    async def answer_elicitation(
        self, run_id: str, question_id: str, answer: ElicitationAnswer
    ) -> RunInfo | None:
        """Answer a question the run asked through its ``ElicitationRequested``
        event (an MCP server's, or a tool's approval); None for an unknown
        run, an ``ApiProblem``: 409 when the run waits on no question, 404
        when it waits on others."""
        live = self._live.get(run_id)
        if live is None or not live.asking:
            info = await self.get(run_id)
            if info is None:
                return None
            raise ApiProblem(
                409,
                "not_waiting",
                f"run {run_id!r} is {info.status} and waits on no question; "
                "there is nothing to answer",
                where="run_id",
            )
        reply = ElicitationReply(action=answer.action, content=answer.content)
        if not self.runtime.answer_elicitation(question_id, reply, run_id=run_id):
            raise ApiProblem(
                404,
                "not_found",
                f"run {run_id!r} has no question {question_id!r} waiting for an answer "
                f"(answered, timed out, or never asked); it waits on: "
                f"{', '.join(sorted(live.asking))}",
                where="question_id",
            )
        with self._lock:  # a reader right after this sees it running again
            live.answered(question_id, time.time())
            status = live.info.status
        if status == "running":  # its event, applied later, changes nothing more
            await self.store.set_status(run_id, status)
        return await self.get(run_id)

    async def questions(
        self, *, run_id: str | None = None, owner: Owner = ANY_OWNER
    ) -> builtins.list[ElicitationRequested]:
        """The questions runs wait on (``run_id``'s; of ``owner``'s runs
        only, when given), oldest first."""
        found = self.runtime.waiting_questions(run_id)
        if owner is ANY_OWNER:
            return found
        with self._lock:
            owners = {rid: live.info.owner for rid, live in self._live.items()}
        return [q for q in found if q.run_id in owners and owners[q.run_id] == owner]

    async def webhook_deliveries(self, run_id: str) -> builtins.list[WebhookDelivery]:
        """The run's webhook deliveries, as the store records them."""
        return await self.store.deliveries(run_id)

    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunInfo:  # noqa: ASYNC109
        """The run once it is terminal (``TimeoutError`` after ``timeout``)."""
        with anyio.fail_after(timeout):
            live = self._live.get(run_id)
            if live is not None:
                await live.done.wait()
        info = await self.get(run_id)
        if info is None:
            raise ApiProblem(404, "not_found", f"no run {run_id!r}", where="run_id")
        return info

    def follow(self, run_id: str, *, after: int = 0, tokens: bool = False) -> AsyncIterator[Event]:
        """The run's events with ``seq > after``: stored ones, then live ones
        as they are committed; ends when the run is terminal and all are out.
        With ``tokens``, the run's model calls stream while this is followed
        and its ``TokenDelta`` events come too (never stored: a follower
        that comes late gets those still kept, ``TOKEN_BACKLOG``)."""
        return follow_batches(
            lambda after, cursor: self.next_batch(run_id, after=after, tokens_after=cursor),
            after=after,
            tokens=tokens,
        )

    async def next_events(
        self, run_id: str, *, after: int = 0, wait_s: float = 15.0
    ) -> tuple[builtins.list[Event], bool]:
        """The next batch of the run's stored events after ``after`` (waiting
        up to ``wait_s`` for one), and whether the run is over and all are out."""
        batch = await self.next_batch(run_id, after=after, wait_s=wait_s)
        return batch.events, batch.done

    async def next_batch(
        self,
        run_id: str,
        *,
        after: int = 0,
        tokens_after: int | None = None,
        wait_s: float = 15.0,
    ) -> EventBatch:
        """The next batch of the run's events after ``after`` (waiting up to
        ``wait_s`` for one); with ``tokens_after`` (a cursor: 0, then the
        batch's ``tokens_cursor``), its token events too, in ``seq`` order
        with the rest, and the run streams while this is asked for."""
        with anyio.move_on_after(wait_s):
            while True:
                live = self._live.get(run_id)
                changed = live.next_change() if live is not None else None
                tokens: builtins.list[TokenDelta] = []
                cursor = tokens_after
                if live is not None and tokens_after is not None:
                    until = time.monotonic() + wait_s + TOKEN_LINGER_S
                    live.tokens_until = max(live.tokens_until, until)
                    # Taken before the store is read: a rollout's events
                    # before its tokens are committed by then (in this batch).
                    tokens, cursor = live.tokens_after(tokens_after)
                bodies = await self.store.events(run_id, after=after)
                if bodies or tokens:
                    events: builtins.list[Event] = [decode_event(body) for body in bodies]
                    if tokens:
                        events = sorted([*events, *tokens], key=lambda e: e.seq)
                    return EventBatch(events, False, cursor)
                if live is None or live.done.is_set():
                    info = await self.store.run_info(run_id)
                    if info is None or info.status in TERMINAL_STATUSES or run_id not in self._live:
                        return EventBatch([], True, cursor)
                    continue
                assert changed is not None
                await changed.wait()
        return EventBatch([], False, tokens_after)

    async def trajectory(self, run_id: str, rollout_id: str) -> Trajectory | None:
        return await self.store.trajectory(run_id, rollout_id)

    async def final_reply(self, run_id: str, rollouts: Sequence[RolloutInfo]) -> ModelReply | None:
        """The last model reply of the run's (one) top-level rollout, when it
        answered or ended on client tool calls."""
        for rollout in rollouts:
            if not is_top_level(rollout.rollout_id):
                continue
            trajectory = await self.store.trajectory(run_id, rollout.rollout_id)
            if trajectory is None or not trajectory.steps:
                continue
            ended_on_calls = trajectory.stop_reason == CLIENT_TOOL_STOP
            if trajectory.answer is not None or ended_on_calls:
                for step in reversed(trajectory.steps):
                    if step.reply is not None and step.reply.choices:
                        return step.reply
        return None

    async def conversation_of(self, detail: RunDetail) -> builtins.list[ChatMessage]:
        """The conversation a succeeded run ended: its conversation (or its
        task) and its answer, as native messages (its client tool calls,
        when it ended on them)."""
        options = detail.request.options
        turns: builtins.list[ChatMessage] = list(options.conversation) or [
            UserMessage(content=detail.request.task)
        ]
        clients = {t.name for t in options.client_tools}
        reply = await self.final_reply(detail.run.run_id, detail.rollouts) if clients else None
        message = reply.message if reply is not None else None
        calls = [c for c in message.tool_calls if c.function.name in clients] if message else []
        if message is not None and calls:
            turns.append(AssistantMessage(content=message.content or None, tool_calls=calls))
        else:
            turns.append(AssistantMessage(content=detail.run.answer or ""))
        return turns

    async def summaries(self, run_id: str) -> builtins.list[TrajectorySummary]:
        return await self.store.summaries(run_id)

    def active(self) -> int:
        with self._lock:
            return len(self._live)

    async def backend_health(self) -> dict[str, BackendHealth]:
        """Each model backend's health (``probe_backend``, all at once; the
        answer is reused for ``HEALTH_CACHE_S`` so probes do not pile up)."""
        now = time.monotonic()
        if self._health is not None and now - self._health[0] < HEALTH_CACHE_S:
            return self._health[1]
        found: dict[str, BackendHealth] = {}

        async def probe(name: str, backend: ModelBackend) -> None:
            found[name] = await probe_backend(backend)

        async with anyio.create_task_group() as tg:
            for name, backend in self.runtime.backends.items():
                tg.start_soon(probe, name, backend)
        health = {name: found[name] for name in sorted(found)}
        self._health = (time.monotonic(), health)
        return health

    def queue_depths(self) -> dict[str, int]:
        """What waits, by queue: runs for a run slot, rollouts for their
        backend's slot, writes for the store (``/metrics``)."""
        depths = {"runs": self._slots.statistics().tasks_waiting}
        for backend, waiting in self.runtime.waiting().items():
            depths[f"rollouts:{backend}"] = waiting
        depths["store_writes"] = self.store.queue_depth
        return depths


__all__ = ["TOKEN_GRACE_S", "EventBatch", "EventObserver", "RunManager", "follow_batches"]
