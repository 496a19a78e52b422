"""What a rollout worker process hosts (a Ray actor's, or a worker process
of the local placement's): on an event loop of its own, in a second thread,
an agentrt ``Runtime`` opened from the run's configuration (backends, MCP
stdio servers on this node, agents) whose rollout actors run the rollouts
the driver places here, through ``LocalPlacement`` (``WorkerHost``).
Events go back to the driver in order through one outbox (``Outbox``),
which the worker's transport drains on the other loop;
a ``StepRecorded`` waits for the driver's acknowledgement (the step is
committed) before the rollout goes on; every call is booked on this
worker's slice of the run's budget (``RunSlice``), and what the slices
spent goes to the driver with each exchange.  Two loops so that a call
waiting for the driver's grant does not stop the reply from arriving.  Must not know how items
travel, nor how rollouts are chosen or aggregated.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import math
import threading
from collections import defaultdict, deque
from concurrent.futures import Future
from contextlib import AbstractContextManager, AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from typing import Final, TypeVar, final

import anyio
import anyio.from_thread
import msgspec
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._control import RolloutResult
from agentrt.agents._recording import EventEmitter
from agentrt.protocols._events import CallReserved, CallSettled, Event, StepRecorded
from agentrt.protocols._ids import is_top_level
from agentrt.protocols._trajectory import Step
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.engine._journal import EventJournal
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.kernel._actor_spec import RestartIntensity, SupervisorSpec
from agentrt.runtime.kernel._errors import BudgetExceeded, RuntimeFailure
from agentrt.runtime.memory._admission import ScoredAdmission
from agentrt.runtime.memory._bank import MemoryHit, MemoryItem, NewItem, Owners, Scope
from agentrt.runtime.memory._view import MemoryView
from agentrt.runtime.placement._local import LocalPlacement
from agentrt.runtime.placement._placement import PlacedRun, RolloutGaveUp, RolloutJob
from agentrt.runtime.placement._worker_slice import DRIVER_TIMEOUT_S, DriverLedger, RunSlice
from agentrt.runtime.placement._worker_wire import (
    Acked,
    BankAnswer,
    BankCall,
    BankGet,
    BankOut,
    BankPromote,
    BankPut,
    BankSearch,
    EventOut,
    FlushOut,
    Outbound,
    PlacedRollout,
    Reply,
    RolloutDone,
    RolloutOutcome,
    RolloutRaised,
    SliceGranted,
    StepPrompts,
    WorkerSpec,
    event_kinds,
)
from agentrt.tools.sandbox._workspaces import keep_run, release_rollout

T = TypeVar("T")

#: Items handed to the driver per exchange (a bound on one reply's size).
BATCH: Final = 4096
#: How long an idle ``exchange`` waits before answering empty (the driver
#: then asks again: a lost driver is noticed within this).
IDLE_S: Final = 5.0


@final
class Outbox:
    """The worker's ordered channel to the driver: items posted from the
    rollouts' loop, drained by ``take`` on the transport's loop; the futures
    the driver's replies complete."""

    def __init__(self) -> None:
        self._items: deque[Outbound] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Acks are awaited on the rollouts' loop and completed there, a
        # batch per call; a waiting reservation blocks its thread instead.
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._rollouts_loop: asyncio.AbstractEventLoop | None = None
        self._granted: dict[int, Future[SliceGranted]] = {}
        self._slices: dict[int, RunSlice] = {}
        self._dirty: dict[int, RunSlice] = {}
        """The slices whose rollouts spent or reserved since the last take."""
        self._answers: dict[int, asyncio.Future[BankAnswer]] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._prompts = StepPrompts()

    def next_id(self) -> int:
        return next(self._ids)

    def next_ids(self, count: int) -> int:
        """The first of ``count`` consecutive ids (on the rollouts' loop)."""
        first = next(self._ids)
        for _ in range(count - 1):
            next(self._ids)
        return first

    def post(self, item: Outbound) -> None:
        with self._lock:
            self._items.append(item)
            first = len(self._items) == 1 and not self._dirty
            loop, wake = self._loop, self._wake
        if first and loop is not None and wake is not None:
            loop.call_soon_threadsafe(wake.set)

    def touch(self, slice_: RunSlice) -> None:
        """``slice_`` has something to report: it goes with the next take."""
        with self._lock:
            if slice_.key in self._dirty:
                return
            first = not self._items and not self._dirty
            self._dirty[slice_.key] = slice_
            loop, wake = self._loop, self._wake
        if first and loop is not None and wake is not None:
            loop.call_soon_threadsafe(wake.set)

    def open_slice(self, prices: PriceTable) -> RunSlice:
        """A new slice of a run's budget (its grants are delivered to it)."""
        slice_ = RunSlice(self, self.next_id(), prices)
        with self._lock:
            self._slices[slice_.key] = slice_
        return slice_

    def end_slice(self, slice_: RunSlice) -> None:
        """The run's rollouts here ended: what ``slice_`` spent, and the
        rest of it back to the driver."""
        with self._lock:
            self._slices.pop(slice_.key, None)
        report = slice_.report(ended=True)
        assert report is not None
        self.post(report)

    def post_step(self, event: StepRecorded, ack: int) -> None:
        """Post ``event`` as a ``StepOut`` (its prompt as what changed; on
        the rollouts' loop, as every step's)."""
        self.post(self._prompts.encode(event, ack))

    def post_flush(self, ack: int, rollout: str) -> None:
        """Post the ``FlushOut`` that ends ``rollout`` (and its prompts)."""
        self._prompts.forget(rollout)
        self.post(FlushOut(ack=ack, rollout=rollout))

    def expect_ack(self) -> tuple[int, asyncio.Future[None]]:
        """An ack id and the future its ack completes (on the rollouts' loop)."""
        return self._expect(self._acks)

    def expect_answer(self) -> tuple[int, asyncio.Future[BankAnswer]]:
        """A bank call's id and the future its answer completes."""
        return self._expect(self._answers)

    def _expect(self, waiting: dict[int, asyncio.Future[T]]) -> tuple[int, asyncio.Future[T]]:
        """A new id and the future, in ``waiting``, that its answer
        completes on the rollouts' loop (the running one)."""
        loop = asyncio.get_running_loop()
        self._rollouts_loop = loop
        rid = self.next_id()
        future: asyncio.Future[T] = loop.create_future()
        waiting[rid] = future
        return rid, future

    def expect_granted(self, rid: int) -> Future[SliceGranted]:
        """The future the driver's grant for ask ``rid`` completes."""
        future: Future[SliceGranted] = Future()
        with self._lock:
            self._granted[rid] = future
        return future

    def deliver(self, replies: list[Reply]) -> None:
        """Complete what the driver answered (on the transport's loop)."""
        for reply in replies:
            match reply:
                case Acked(ids=ids, failed=failed):
                    loop = self._rollouts_loop
                    if loop is not None:
                        loop.call_soon_threadsafe(self._acked, ids, failed)
                case SliceGranted(id=rid, slice=key):
                    with self._lock:
                        slice_ = self._slices.get(key)
                        waiting = self._granted.pop(rid, None)
                    if slice_ is not None:
                        slice_.granted(reply)  # before the waiting call takes from it
                    if waiting is not None and not waiting.done():
                        waiting.set_result(reply)
                case BankAnswer():
                    loop = self._rollouts_loop
                    if loop is not None:
                        loop.call_soon_threadsafe(self._answered, reply)

    def _answered(self, answer: BankAnswer) -> None:
        future = self._answers.pop(answer.id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def _acked(self, ids: list[int], failed: dict[int, str]) -> None:
        for ack in ids:
            future = self._acks.pop(ack, None)
            if future is None or future.done():
                continue
            why = failed.get(ack)
            if why is None:
                future.set_result(None)
            else:
                future.set_exception(RuntimeFailure(f"the run's sink did not take it: {why}"))

    async def take(self, gather_s: float = 0.0) -> list[Outbound]:
        """The items posted since the last take (waits up to ``IDLE_S`` for
        one, then ``gather_s`` for more to join it)."""
        if self._wake is None:
            self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        wake = self._wake
        with anyio.move_on_after(IDLE_S):
            while True:
                with self._lock:
                    if self._items or self._dirty:
                        break
                    wake.clear()
                await wake.wait()
        if gather_s > 0 and (self._items or self._dirty):
            await anyio.sleep(gather_s)
        with self._lock:
            dirty = list(self._dirty.values())
            self._dirty.clear()
            count = min(len(self._items), BATCH)
            items = [self._items.popleft() for _ in range(count)]
        # What the slices spent first: a step's call is booked before it.
        reports: list[Outbound] = [r for s in dirty if (r := s.report()) is not None]
        return [*reports, *items] if reports else items


@final
class DriverBank:
    """The run's memory bank on the driver (a ``MemoryStore``): each call
    goes there through the outbox and waits for its answer."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    async def _call(self, call: BankCall) -> BankAnswer:
        rid, answered = self._outbox.expect_answer()
        self._outbox.post(BankOut(id=rid, call=call))
        with anyio.fail_after(DRIVER_TIMEOUT_S):
            answer = await answered
        if answer.error is not None:
            raise RuntimeFailure(f"the run's memory bank on the driver: {answer.error}")
        return answer

    async def search(self, match: str, owners: Owners, *, k: int = 5) -> list[MemoryHit]:
        return (await self._call(BankSearch(match=match, owners=list(owners), k=k))).hits

    async def get(
        self, item_id: int, owners: Owners, *, count_hit: bool = True
    ) -> MemoryItem | None:
        call = BankGet(item_id=item_id, owners=list(owners), count_hit=count_hit)
        return (await self._call(call)).item

    async def put(self, item: NewItem) -> int:
        return (await self._call(BankPut(item=item))).number

    async def promote(
        self,
        source: tuple[Scope, str],
        target: tuple[Scope, str],
        *,
        min_hits: int = 1,
        verified_only: bool = True,
    ) -> int:
        call = BankPromote(
            source=source, target=target, min_hits=min_hits, verified_only=verified_only
        )
        return (await self._call(call)).number


_Request = tuple[int, PlacedRollout, "Future[RolloutOutcome]"]


@dataclass(slots=True)
class _Shard:
    """One run's part on this worker: while it has rollouts here."""

    placed: PlacedRun
    committed: defaultdict[str, list[Step]] = field(default_factory=lambda: defaultdict(list))
    active: int = 0
    budget: RunSlice | None = None
    """This worker's slice of the run's budget, while it has rollouts here."""


@final
class WorkerHost:
    """What runs on the worker's own loop: its ``Runtime`` and the runs'
    shards placed on it."""

    def __init__(self, spec: WorkerSpec, outbox: Outbox) -> None:
        self._spec = spec
        self._outbox = outbox
        self._shards: dict[str, _Shard] = {}
        self._scopes: dict[int, anyio.CancelScope] = {}
        self._stack = AsyncExitStack()
        self._opening = anyio.Lock()
        self._names = itertools.count()
        self._local = LocalPlacement()
        self.rt: Runtime | None = None

    async def __aenter__(self) -> WorkerHost:
        spec = self._spec
        rt = Runtime(spec.config, tools=spec.tools, agents=spec.agents, prices=spec.prices)
        self.rt = await self._stack.enter_async_context(rt)
        self._loop = asyncio.get_running_loop()
        # Unbounded on purpose: the driver bounds the rollouts it places here.
        send, receive = anyio.create_memory_object_stream[_Request](math.inf)
        self._send = send
        tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(tg.cancel_scope.cancel)
        tg.start_soon(self._dispatch, receive, tg)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def submit(self, placed: PlacedRollout) -> tuple[int, Future[RolloutOutcome]]:
        """Run ``placed`` on this host's loop (called from another thread,
        without waiting for that loop: it may be waiting for the driver)."""
        rid = next(self._names)
        done: Future[RolloutOutcome] = Future()
        self._loop.call_soon_threadsafe(self._send.send_nowait, (rid, placed, done))
        return rid, done

    def cancel(self, rid: int) -> None:
        """Cancel what ``submit`` started (from another thread)."""
        self._loop.call_soon_threadsafe(self._cancel, rid)

    def _cancel(self, rid: int) -> None:
        scope = self._scopes.get(rid)
        if scope is not None:
            scope.cancel()

    async def _dispatch(self, requests: MemoryObjectReceiveStream[_Request], tg: TaskGroup) -> None:
        async with requests:
            async for request in requests:
                tg.start_soon(self._serve, *request)

    async def _serve(self, rid: int, placed: PlacedRollout, done: Future[RolloutOutcome]) -> None:
        if not done.set_running_or_notify_cancel():
            return
        with anyio.CancelScope() as scope:
            self._scopes[rid] = scope
            try:
                done.set_result(await self.run(placed))
            except BaseException as exc:
                done.set_exception(exc)
                raise
            finally:
                del self._scopes[rid]
        if scope.cancelled_caught and not done.done():
            done.set_exception(anyio.get_cancelled_exc_class()())

    async def run(self, placed: PlacedRollout) -> RolloutOutcome:
        async with self._opening:  # one shard per run, however many arrive at once
            shard = await self._shard(placed)
            shard.active += 1
            if shard.budget is None:
                shard.budget = self._outbox.open_slice(self._runtime().prices)
            budget = shard.budget
        rollout = placed.rollout
        if rollout.resume:
            shard.committed[rollout.rollout_id] = list(rollout.resume)
        upstream = DriverLedger(budget, self._outbox, placed.ledger)
        journal = (
            EventJournal(shard.placed.emit, rollout.run_id, dict(placed.replays))
            if placed.journaled
            else None
        )
        ledger = BudgetLedger(
            placed.ledger, prices=self._runtime().prices, upstream=upstream, journal=journal
        )
        job = RolloutJob(
            message=rollout,
            name=placed.name,
            ledger=ledger,
            committed=shard.committed[rollout.rollout_id],
        )
        try:
            result: RolloutResult = await self._local.run_rollout(shard.placed, job)
            outcome: RolloutOutcome = _done(result, shard.committed[rollout.rollout_id])
        except BudgetExceeded as exc:
            outcome = RolloutRaised(kind="budget", message=str(exc), limit=exc.limit)
        except RolloutGaveUp as exc:
            outcome = RolloutRaised(kind="gave_up", message=str(exc))
        except Exception as exc:
            outcome = RolloutRaised(kind="error", message=repr(exc))
        finally:
            shard.committed.pop(rollout.rollout_id, None)
            shard.active -= 1
            if shard.active == 0 and shard.budget is budget:
                shard.budget = None
                self._outbox.end_slice(budget)  # before the rollout's flush
            if (finished := self._runtime().run_services.rollout_finished) is not None:
                with anyio.CancelScope(shield=True):  # its own MCP connections close with it
                    await finished(rollout.run_id, rollout.rollout_id)
            if self._runtime().config.keep_workspaces:
                keep_run(rollout.run_id)
            else:
                await release_rollout(rollout.run_id, rollout.rollout_id)  # its workspace here
            with anyio.CancelScope(shield=True), anyio.move_on_after(DRIVER_TIMEOUT_S):
                await self._flush(rollout.rollout_id)
            if shard.active == 0 and self._shards.get(rollout.run_id) is shard:
                del self._shards[rollout.run_id]
                with anyio.CancelScope(shield=True):
                    await self._runtime().system.stop(shard.placed.supervisor)
        return outcome

    def _runtime(self) -> Runtime:
        assert self.rt is not None
        return self.rt

    async def _flush(self, rollout: str) -> None:
        ack, done = self._outbox.expect_ack()
        self._outbox.post_flush(ack, rollout)
        await done

    async def _shard(self, placed: PlacedRollout) -> _Shard:
        run_id = placed.rollout.run_id
        shard = self._shards.get(run_id)
        if shard is not None:
            return shard
        rt = self._runtime()
        agent: str | AgentConfig | None = placed.agent
        if placed.agent_config is not None:
            agent = AgentConfig.model_validate_json(placed.agent_config)
        holder: list[_Shard] = []

        async def forward(event: Event) -> None:
            # A step, and a journaled call's booking and end, are committed
            # by the driver before the rollout goes on.
            if not isinstance(event, StepRecorded | CallReserved | CallSettled):
                self._outbox.post(EventOut(event=event))
                return
            ack, committed = self._outbox.expect_ack()
            if isinstance(event, StepRecorded):
                self._outbox.post_step(event, ack)
            else:
                self._outbox.post(EventOut(event=event, ack=ack))
            with anyio.fail_after(DRIVER_TIMEOUT_S):
                await committed
            if isinstance(event, StepRecorded) and is_top_level(event.rollout_id):
                holder[0].committed[event.rollout_id].append(event.step)

        emitter = EventEmitter(forward, kinds=event_kinds(placed.events))
        check = BudgetLedger(f"{run_id}-worker", prices=rt.prices)
        memory = (
            MemoryView(
                DriverBank(self._outbox),
                run_id=run_id,
                admission=ScoredAdmission(rt.config.memory_admission),
                corroborate=rt.config.memory_admission.corroborate,
                verifiers=rt.config.memory_admission.verifiers,
                recheck=rt.config.memory_admission.recheck,
            )
            if placed.memory
            else None
        )
        runner = rt.runner(agent, emitter, check, memory)
        supervisor = await rt.system.spawn_supervisor(
            SupervisorSpec(
                f"{run_id}-shard{next(self._names)}",
                intensity=RestartIntensity(placed.restarts, within=float("inf")),
                on_exhausted="stop_child",
            )
        )
        shard = _Shard(
            PlacedRun(
                run_id=run_id,
                runner=runner,
                agent=agent,
                system=rt.system,
                supervisor=supervisor,
                emit=emitter.emit,
                restarts=placed.restarts,
            )
        )
        holder.append(shard)
        self._shards[run_id] = shard
        return shard


def _done(result: RolloutResult, committed: list[Step]) -> RolloutDone:
    """``result`` as it goes back: without the first steps of its
    trajectory that are the steps it committed (the driver has them)."""
    steps = result.trajectory.steps
    count = 0
    for step, sent in zip(steps, committed, strict=False):
        if step is not sent:
            break
        count += 1
    if count == 0:
        return RolloutDone(result=result)
    trajectory = msgspec.structs.replace(result.trajectory, steps=steps[count:])
    return RolloutDone(
        result=msgspec.structs.replace(result, trajectory=trajectory), committed=count
    )


@final
class HostedWorker:
    """A ``WorkerHost`` on a loop of its own, in a second thread, and its
    outbox: what a worker's transport (a Ray actor, a worker process's
    socket) drives from its own loop.  ``error`` says why it could not
    start (``None``: it did)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.outbox = Outbox()
        self._stack = ExitStack()
        self.error: str | None = None
        self._host = WorkerHost(spec, self.outbox)
        try:
            portal = self._stack.enter_context(
                anyio.from_thread.start_blocking_portal(
                    "asyncio", backend_options={"use_uvloop": has_uvloop()}
                )
            )
            hosted: AbstractContextManager[WorkerHost] = portal.wrap_async_context_manager(
                self._host
            )
            self._stack.enter_context(hosted)
            tune_collector()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self._stack.close()

    def submit(self, placed: PlacedRollout) -> tuple[int, Future[RolloutOutcome]]:
        """Start ``placed`` on the host's loop: its id (for ``cancel``) and
        its outcome to come (a cancelled rollout's raises ``CancelledError``
        once it ended: its last events and charges are out)."""
        return self._host.submit(placed)

    def cancel(self, rid: int) -> None:
        """Cancel what ``submit`` started."""
        self._host.cancel(rid)

    async def run(self, placed: PlacedRollout) -> RolloutOutcome:
        """Run ``placed`` on the host's loop (from the transport's); on a
        cancellation of the awaiting task (Ray's, edge-triggered), the
        rollout is cancelled and its end awaited (it flushes its last events
        and charges to the driver, which waits for this reply, so its run
        reads a settled ledger)."""
        rid, done = self._host.submit(placed)
        try:
            return await asyncio.shield(asyncio.wrap_future(done))
        except asyncio.CancelledError:
            self._host.cancel(rid)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(done)), DRIVER_TIMEOUT_S)
            raise

    def close(self) -> None:
        """Stop the rollouts and close the ``Runtime`` (MCP servers too);
        blocks: call it in a thread, so that the rollouts' last events
        still reach the driver."""
        self._stack.close()


def tune_collector() -> None:
    """For a process that is a rollout worker's own: its start-up heap (the
    modules, the Runtime) leaves the generations, and collections are rarer
    (as sim-server does): with thousands of rollouts' live state, the
    default thresholds spent about a quarter of the worker's CPU collecting."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)


def has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = [
    "DriverBank",
    "HostedWorker",
    "Outbox",
    "WorkerHost",
    "has_uvloop",
    "tune_collector",
]
