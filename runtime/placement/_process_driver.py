"""``ProcessPlacement``: a run's rollouts in worker processes of this host
(``[placement] kind = "local", workers = N``), no cluster needed.

Owns the driver's side: starting the worker processes (and the clear
errors when one cannot start), their lifetime (stopped when the placement
closes; killed by the kernel when this process dies), choosing a worker
per rollout (``pick_worker``), one pump per worker that reads its socket
in order (events to the run's stream, acknowledged once the run's sink
took them; its budget slices' asks and reports to its ``WorkerBooks``; memory bank calls
answered; rollouts' outcomes), taking a rollout up again on a surviving
worker, from its committed steps, when its worker dies, and replacing
the dead worker.  Must not know how rollouts are aggregated.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import socket
from collections.abc import Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Final, final

import anyio

from agentrt.agents._control import RolloutResult
from agentrt.protocols._trajectory import Step
from agentrt.runtime.config._runtime_config import PlacementConfig
from agentrt.runtime.kernel._errors import ConfigError, RuntimeFailure
from agentrt.runtime.memory._bank import MemoryStore
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.placement._frame_channel import FrameChannel
from agentrt.runtime.placement._placement import PlacedRun, RolloutJob
from agentrt.runtime.placement._process_worker import worker_main
from agentrt.runtime.placement._worker_books import (
    PlacedRollouts,
    Placing,
    WorkerBooks,
    WorkerInfo,
    WorkerLost,
    answer_bank_call,
    check_rebuildable,
    deliver_events,
    outcome_result,
    replacement_backoff,
    wait_to_replace,
    worker_infos,
)
from agentrt.runtime.placement._worker_wire import (
    TO_DRIVER,
    Acked,
    BankOut,
    Cancel,
    Close,
    Items,
    Outbound,
    Outcome,
    Place,
    PlacedRollout,
    Replies,
    Reply,
    RolloutOutcome,
    StepPrompts,
    WorkerReady,
    WorkerSpec,
)
from agentrt.tools._function import FunctionTool, reduce_function_tool

log = get_logger(__name__)

# The spec a worker is started with goes through multiprocessing's pickler:
# function tools travel as what rebuilds them (only this pickler; Ray's
# cloudpickle sends them by value).
ForkingPickler.register(FunctionTool, reduce_function_tool)

#: How errors name this placement.
PLACEMENT: Final = "local placement with workers"
#: How long a cancelled rollout's worker may take to send its last events.
FINAL_EVENTS_S: Final = 5.0
#: How long closing waits for the workers to end their rollouts and exit
#: before they are killed.
STOP_S: Final = 15.0
_LOST: Final = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


@dataclass(slots=True, eq=False)
class _Waiter:
    """A placed rollout's answer: its outcome (``None``: cancelled), or
    why its worker was lost."""

    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: RolloutOutcome | None = None
    lost: str | None = None


@dataclass(slots=True, eq=False)
class _Worker:
    index: int
    process: BaseProcess
    channel: FrameChannel
    books: WorkerBooks
    node_id: str = "local"  # a worker process of this host
    pid: int = 0
    load: int = 0
    placed: int = 0
    alive: bool = True
    lost: str = ""
    started: float = 0.0
    pumped: anyio.Event = field(default_factory=anyio.Event)
    prompts: StepPrompts = field(default_factory=StepPrompts)
    waiting: dict[int, _Waiter] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


@final
class ProcessPlacement:
    """Rollouts in ``config.workers`` worker processes of this host.

    An async context manager: entering starts the workers (each builds its
    ``Runtime`` from ``spec``) and waits until every one is ready; leaving
    stops them (they end their rollouts and close their Runtimes, and are
    killed past ``STOP_S``).  Raises ``ConfigError`` on entry when what the
    Runtime was given cannot be sent to a worker (it must pickle) or a
    worker cannot open its Runtime or is not ready within
    ``connect_timeout_s``."""

    def __init__(
        self, config: PlacementConfig, spec: WorkerSpec, *, bank: MemoryStore | None = None
    ) -> None:
        if config.workers is None:
            raise ValueError("a process placement needs [placement] workers")
        self.config = config
        self._count = config.workers
        self._spec = spec
        self._bank = bank
        self._workers: list[_Worker] = []
        self._rollouts: PlacedRollouts[_Worker] = PlacedRollouts()
        self._placing: Placing[_Worker] = Placing(
            PLACEMENT, config.affinity_slack, bank is not None, self._ask
        )
        self._stack = AsyncExitStack()
        self._starting: list[BaseProcess] = []
        self._closing = False
        self._backoff = replacement_backoff()

    @property
    def kind(self) -> str:
        return "local"

    @property
    def workers(self) -> list[WorkerInfo]:
        """Each worker: its process, its rollouts, whether it is alive."""
        return worker_infos(self._workers)

    def check_agent(self, agent: object) -> None:
        """Agents are rebuilt in the workers: by name or from a configuration."""
        check_rebuildable(agent, PLACEMENT)

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> ProcessPlacement:
        try:
            self._stack.push_async_callback(self._close_channels)
            self._stack.callback(self._kill_all)
            starting = [await self._spawn(index) for index in range(self._count)]
            self._workers.extend(starting)
            with anyio.fail_after(self.config.connect_timeout_s):
                for worker in starting:
                    await self._ready(worker)
            self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
            for worker in self._workers:
                self._tasks.start_soon(self._pump, worker)
        except TimeoutError:
            await self._stack.aclose()
            raise ConfigError(
                f"the {self._count} worker processes were not all ready within "
                f"{self.config.connect_timeout_s:g} s",
                where="placement.connect_timeout_s",
            ) from None
        except BaseException:
            await self._stack.aclose()
            raise
        log.info("process_placement_ready", workers=len(self._workers))
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            self._closing = True
            for worker in self._workers:
                if worker.alive:
                    with suppress(*_LOST):
                        await worker.channel.send(Close())
            with anyio.move_on_after(STOP_S):
                for worker in self._workers:
                    await worker.pumped.wait()
        self._tasks.cancel_scope.cancel()
        await self._stack.aclose()  # the pumps' task group, then the processes killed

    async def _spawn(self, index: int) -> _Worker:
        """Start a worker process (not waiting for it to be ready)."""
        context = multiprocessing.get_context("spawn")
        mine, theirs = socket.socketpair()
        process = context.Process(
            target=worker_main,
            args=(theirs, self._spec, os.getpid()),
            name=f"agentrt-rollout-worker-{index}",
            daemon=True,
        )
        try:
            process.start()  # the spec is pickled here: tools, agents, prices
        except Exception as error:
            mine.close()
            raise ConfigError(
                "what the Runtime was given cannot be sent to a worker process (tools and "
                f"agents given as objects must pickle): {type(error).__name__}: {error}",
                where="placement.workers",
            ) from None
        finally:
            theirs.close()
        self._starting.append(process)
        channel = await FrameChannel.of(mine)
        worker = _Worker(
            index,
            process,
            channel,
            WorkerBooks(self._rollouts.grants),
            started=anyio.current_time(),
        )

        def send(replies: list[Reply]) -> None:  # answers outside the worker's batch
            self._tasks.start_soon(self._send, worker, replies)

        worker.books.sends_with(send)
        return worker

    async def _ready(self, worker: _Worker) -> None:
        try:
            frame = TO_DRIVER.decode(await worker.channel.receive())
        except _LOST:
            raise ConfigError(
                f"rollout worker {worker.index} exited while starting "
                f"({await _exit_of(worker.process)})",
                where="placement.workers",
            ) from None
        if not isinstance(frame, WorkerReady):
            raise ConfigError(
                f"rollout worker {worker.index} answered {type(frame).__name__} first",
                where="placement.workers",
            )
        worker.pid = frame.pid
        if frame.error is not None:
            raise ConfigError(
                f"rollout worker {worker.index} could not open its runtime: {frame.error}",
                where="placement",
            )
        self._starting.remove(worker.process)

    async def _close_channels(self) -> None:
        for worker in self._workers:
            with suppress(Exception):
                await worker.channel.aclose()

    def _kill_all(self) -> None:
        for process in [*(w.process for w in self._workers), *self._starting]:
            with suppress(Exception):
                if process.is_alive():
                    process.kill()
                process.join(timeout=5.0)
                process.close()  # its sentinel pipe

    # -- rollouts -----------------------------------------------------------------

    async def run_rollout(self, run: PlacedRun, job: RolloutJob) -> RolloutResult:
        """Run ``job`` on a worker; when that worker dies, on another, from
        the rollout's committed steps (``RolloutRestarted`` says so)."""
        return await self._rollouts.run(run, job, self._workers, self._placing)

    async def _ask(
        self, worker: _Worker, placed: PlacedRollout, committed: Sequence[Step]
    ) -> RolloutResult:
        rid = next(worker.ids)
        waiter = worker.waiting[rid] = _Waiter()
        worker.load += 1
        worker.placed += 1
        try:
            with suppress(*_LOST):  # a dead worker's pump answers the waiter
                await worker.channel.send(Place(id=rid, placed=placed))
            await waiter.done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                with suppress(*_LOST):
                    await worker.channel.send(Cancel(id=rid))
                with anyio.move_on_after(FINAL_EVENTS_S):
                    await waiter.done.wait()  # its last events and charges reach the run
            raise
        finally:
            worker.load -= 1
            worker.waiting.pop(rid, None)
        if waiter.lost is not None:
            raise WorkerLost(waiter.lost)
        if waiter.outcome is None:
            raise RuntimeFailure(f"rollout {placed.rollout.rollout_id} was cancelled on its worker")
        return outcome_result(waiter.outcome, placed.rollout.rollout_id, committed)

    def _lose(self, worker: _Worker, why: str) -> None:
        worker.alive = False
        worker.lost = why
        for entry in self._rollouts.runs.values():
            if entry.home is worker:
                entry.home = None
        for waiter in worker.waiting.values():
            waiter.lost = why
            waiter.done.set()
        if not self._closing:
            self._tasks.start_soon(self._replace, worker)

    async def _replace(self, lost: _Worker) -> None:
        """Start a worker in place of ``lost`` (after a backoff that grows
        while workers keep dying); one that fails to start counts as one
        more crash, until the backoff gives up."""
        healthy_for = anyio.current_time() - lost.started
        while True:
            if not await wait_to_replace(self._backoff, healthy_for, lost.index):
                return
            worker = await self._spawn(len(self._workers))
            try:
                with anyio.fail_after(self.config.connect_timeout_s):
                    await self._ready(worker)
                break
            except (ConfigError, TimeoutError) as error:
                log.warning("rollout_worker_start_failed", lost=lost.index, error=str(error))
                with suppress(Exception):
                    worker.process.kill()
                await _exit_of(worker.process)
                self._starting.remove(worker.process)
                with suppress(ValueError):
                    worker.process.close()
                healthy_for = 0.0
        self._workers.append(worker)
        log.info("rollout_worker_replaced", lost=lost.index, worker=worker.index)
        await self._pump(worker)

    # -- the pump: one worker's socket, in order ----------------------------------

    async def _pump(self, worker: _Worker) -> None:
        why = ""
        try:
            while True:
                # The items of the frames that queued up are handled as one
                # batch (booked, delivered, acked once), up to an outcome:
                # a rollout's events are in before its result.
                items: list[Outbound] = []
                for frame in await worker.channel.receive_queued():
                    match TO_DRIVER.decode(frame):
                        case Items(items=more):
                            items += more
                        case Outcome(id=rid, outcome=outcome):
                            if items:
                                await self._handle(worker, items)
                                items = []
                            waiter = worker.waiting.get(rid)
                            if waiter is not None:
                                waiter.outcome = outcome
                                waiter.done.set()
                        case WorkerReady():
                            pass
                if items:
                    await self._handle(worker, items)
        except _LOST:
            why = await _exit_of(worker.process)
        except Exception as error:
            why = f"its socket failed: {error!r}"
            with suppress(Exception):
                worker.process.kill()
        finally:
            worker.books.lost()
            if worker.alive:
                self._lose(worker, why or "its pump stopped")
            worker.pumped.set()

    async def _handle(self, worker: _Worker, items: list[Outbound]) -> None:
        # The ledger first: a waiting call's answer goes back at once.
        answers: list[Reply] = list(worker.books.book(items))
        for item in items:
            if isinstance(item, BankOut):
                # Off the pump: a bank call does I/O; its answer goes back on its own.
                self._tasks.start_soon(self._bank_call, worker, item)
        if answers:
            await worker.channel.send(Replies(replies=answers))
        acked, failed = await deliver_events(self._rollouts.runs, items, worker.prompts)
        if acked:
            await worker.channel.send(Replies(replies=[Acked(ids=acked, failed=failed)]))

    async def _bank_call(self, worker: _Worker, item: BankOut) -> None:
        await self._send(worker, [await answer_bank_call(self._bank, item)])

    async def _send(self, worker: _Worker, replies: list[Reply]) -> None:
        """Answers outside the worker's batch (a bank call's, a waiting
        ask's once another worker gave budget back)."""
        with suppress(*_LOST):  # a lost worker's rollouts go on elsewhere
            await worker.channel.send(Replies(replies=replies))


async def _exit_of(process: BaseProcess) -> str:
    """How ``process`` ended (waits a little for it to be reaped)."""
    await anyio.to_thread.run_sync(process.join, 5.0)
    code = process.exitcode
    if code is None:
        return "its socket closed"
    if code < 0:
        return f"its process was killed by signal {-code}"
    return f"its process exited with code {code}"


__all__ = ["ProcessPlacement"]
