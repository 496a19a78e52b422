"""``RayPlacement``: a run's rollouts on rollout workers of a Ray cluster.

Owns the driver's side: reaching the cluster (and the clear errors when it
cannot: an unreachable address, too few resources, a worker that cannot
import agentrt or open its configuration), the workers' lifetime, choosing
a worker per rollout (least loaded, a run's rollouts kept on one worker
within ``affinity_slack``), one pump per worker that drains its outbox in
order (events to the run's stream, acknowledged once the run's sink took
them; ledger items to its ``WorkerBooks``; memory bank calls answered),
taking a rollout up again on a surviving worker, from its committed
steps, when its worker is lost, and replacing the lost worker.  Must not know how rollouts are
aggregated; imports Ray, so it is imported only when configured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Final, final
from urllib.parse import urlsplit

import anyio
import ray
from ray.exceptions import RayActorError

from agentrt.agents._control import RolloutResult
from agentrt.protocols._trajectory import Step
from agentrt.runtime.config._runtime_config import PlacementConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.memory._bank import MemoryStore
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.placement._placement import (
    PlacedRun,
    RolloutJob,
)
from agentrt.runtime.placement._ray_worker import RolloutWorker
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
    ENCODER,
    OUTBOUND,
    OUTCOME,
    READY,
    Acked,
    BankOut,
    Outbound,
    PlacedRollout,
    Reply,
    StepPrompts,
    WorkerSpec,
)

log = get_logger(__name__)

#: Rollout workers when ``[placement] workers`` is not set.
RAY_WORKERS: Final = 2
#: How long a cancelled rollout's worker may take to send its last events.
FINAL_EVENTS_S: Final = 5.0
#: Concurrent calls one worker actor accepts (its rollouts are bounded by the driver).
MAX_CONCURRENCY: Final = 100_000
#: Attempts at a Ray Client session whose server fails to start its side of it.
CLIENT_INIT_ATTEMPTS: Final = 3
#: The pause before the n-th new attempt is n times this.
CLIENT_RETRY_PAUSE_S = 0.5


@dataclass(slots=True, eq=False)
class _Worker:
    index: int
    handle: Any  # a Ray ActorHandle (its methods are dynamic)
    books: WorkerBooks
    node_id: str = ""
    pid: int = 0
    load: int = 0
    placed: int = 0
    alive: bool = True
    lost: str = ""
    pumped: anyio.Event = field(default_factory=anyio.Event)
    prompts: StepPrompts = field(default_factory=StepPrompts)
    started: float = 0.0


@final
class RayPlacement:
    """Rollouts on ``config.workers`` (default 2) Ray actors (``[placement] kind = "ray"``).

    An async context manager: entering reaches the cluster, checks its
    resources and starts the workers (each builds its ``Runtime`` from
    ``spec``); leaving stops them, and the Ray session when this opened it.
    Raises ``ConfigError`` on entry (see ``open_placement``)."""

    def __init__(
        self, config: PlacementConfig, spec: WorkerSpec, *, bank: MemoryStore | None = None
    ) -> None:
        self.config = config
        self._count = config.workers or RAY_WORKERS
        self._spec = spec
        self._bank = bank
        self._workers: list[_Worker] = []
        self._rollouts: PlacedRollouts[_Worker] = PlacedRollouts()
        self._placing: Placing[_Worker] = Placing(
            "ray placement", config.affinity_slack, bank is not None, self._ask
        )
        self._stack = AsyncExitStack()
        self._starting: list[Any] = []
        """Replacement workers not ready yet (killed on exit)."""
        self._backoff = replacement_backoff()

    @property
    def kind(self) -> str:
        return "ray"

    @property
    def workers(self) -> list[WorkerInfo]:
        """Each worker: where it runs, its rollouts, whether it is alive."""
        return worker_infos(self._workers)

    def check_agent(self, agent: object) -> None:
        """Agents are rebuilt on the workers: by name or from a configuration."""
        check_rebuildable(agent, "ray placement")

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> RayPlacement:
        try:
            await self._connect()
            self._check_resources()
            await self._start_workers()
            pumps = await self._stack.enter_async_context(anyio.create_task_group())
            self._stack.callback(pumps.cancel_scope.cancel)  # before the group exits
            self._tasks = pumps
            for worker in self._workers:
                pumps.start_soon(self._pump, worker)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _connect(self) -> None:
        address = self.config.address
        if ray.is_initialized():
            return  # the application's own Ray session
        if address not in ("local", "auto"):
            await self._probe(address)
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        if address != "local":
            options["address"] = address
        try:
            with anyio.fail_after(self.config.connect_timeout_s):
                await self._init_ray(options)
        except TimeoutError:
            raise ConfigError(
                f"the Ray cluster at {address!r} did not answer within "
                f"{self.config.connect_timeout_s:g} s",
                where="placement.address",
            ) from None
        except Exception as error:
            raise ConfigError(
                f"cannot reach the Ray cluster at {address!r}: {error}", where="placement.address"
            ) from None
        self._stack.callback(ray.shutdown)

    async def _init_ray(self, options: dict[str, Any]) -> None:
        """``ray.init``; a Ray Client server that fails to start the session's
        own server process (``ConnectionAbortedError``: the head's proxy
        spawns one per client, and a spawn can die on a loaded head) is asked
        again, up to ``CLIENT_INIT_ATTEMPTS`` times within the connect
        timeout. Every other failure is final."""
        for attempt in range(1, CLIENT_INIT_ATTEMPTS + 1):
            try:
                await anyio.to_thread.run_sync(lambda: ray.init(**options))
                return
            except ConnectionAbortedError as error:
                if attempt == CLIENT_INIT_ATTEMPTS:
                    raise
                log.warning(
                    "ray_client_session_refused",
                    address=options.get("address"),
                    attempt=attempt,
                    of=CLIENT_INIT_ATTEMPTS,
                    error=_first_line(str(error)),
                )
                await anyio.sleep(CLIENT_RETRY_PAUSE_S * attempt)

    async def _probe(self, address: str) -> None:
        """A TCP connection to ``address`` first: an unreachable one is an
        error within ``connect_timeout_s``, not after Ray's own retries."""
        parts = urlsplit(address if "://" in address else f"gcs://{address}")
        try:
            host, port = parts.hostname, parts.port
        except ValueError:
            host, port = None, None
        if not host or port is None:
            raise ConfigError(
                f"{address!r} is not a Ray address: expected local, auto, HOST:PORT "
                "or ray://HOST:PORT",
                where="placement.address",
            )
        try:
            with anyio.fail_after(self.config.connect_timeout_s):
                stream = await anyio.connect_tcp(host, port)
        except (OSError, TimeoutError) as error:
            raise ConfigError(
                f"cannot reach the Ray cluster at {address!r}: {error or 'timed out'}",
                where="placement.address",
            ) from None
        await stream.aclose()

    def _needs(self) -> dict[str, float]:
        worker = self.config.worker
        needs = {"CPU": worker.num_cpus, **worker.resources}
        if worker.memory_mb is not None:
            needs["memory"] = worker.memory_mb * 2**20
        return {k: v for k, v in needs.items() if v > 0}

    def _check_resources(self) -> None:
        """Whether the cluster's nodes can hold every worker at once."""
        needs = self._needs()
        nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        room = 0
        for node in nodes:
            have: dict[str, float] = node.get("Resources", {})
            fits = [int(have.get(k, 0.0) // v) for k, v in needs.items()]
            room += min(fits) if fits else self._count
        if room < self._count:
            shown = ", ".join(f"{k}={v:g}" for k, v in needs.items()) or "nothing"
            nodes_shown = "; ".join(
                ", ".join(
                    f"{k}={v:g}"
                    for k, v in sorted(n.get("Resources", {}).items())
                    if not k.startswith("node:") and k != "object_store_memory"
                )
                for n in nodes
            )
            raise ConfigError(
                f"the Ray cluster cannot hold {self._count} rollout workers of "
                f"{shown} each (room for {room}); its {len(nodes)} nodes have: {nodes_shown}",
                where="placement.worker",
            )

    async def _start_workers(self) -> None:
        worker = self.config.worker
        actor = ray.remote(RolloutWorker)
        options: dict[str, Any] = {
            "num_cpus": worker.num_cpus,
            "resources": dict(worker.resources),
            "max_concurrency": MAX_CONCURRENCY,
            "max_restarts": 0,
            "scheduling_strategy": "SPREAD",
        }
        if worker.memory_mb is not None:
            options["memory"] = worker.memory_mb * 2**20
        self._stack.push_async_callback(self._stop_workers)
        self._actor, self._options = actor, options
        for index in range(self._count):
            try:
                handle = actor.options(**options).remote(self._spec)
            except Exception as error:  # the spec is pickled here: tools, agents, prices
                raise ConfigError(
                    "what the Runtime was given cannot be shipped to a rollout worker (tools "
                    f"and agents given as objects must pickle): {type(error).__name__}: {error}",
                    where="placement",
                ) from None
            pooled = _Worker(
                index, handle, WorkerBooks(self._rollouts.grants), started=anyio.current_time()
            )
            self._answers_to(pooled)
            self._workers.append(pooled)
        timeout = self.config.connect_timeout_s
        try:
            with anyio.fail_after(timeout):
                for w in self._workers:
                    ready = READY.decode(await w.handle.ready.remote())
                    w.node_id, w.pid = ready.node_id, ready.pid
                    if ready.error is not None:
                        raise ConfigError(
                            f"rollout worker {w.index} (node {ready.node_id[:12]}) could not "
                            f"open its runtime: {ready.error}",
                            where="placement",
                        )
        except TimeoutError:
            raise ConfigError(
                f"the {self._count} rollout workers were not all ready within "
                f"{timeout:g} s (is the cluster short of {self._needs()} per worker?)",
                where="placement.connect_timeout_s",
            ) from None
        except RayActorError as error:
            text = str(error)
            if "agentrt" in text and ("ModuleNotFoundError" in text or "No module" in text):
                raise ConfigError(
                    "a Ray worker cannot import agentrt: install the same agentrt on every "
                    f"node of the cluster ({_first_line(text)})",
                    where="placement",
                ) from None
            raise ConfigError(
                f"a rollout worker died while starting: {_first_line(text)}", where="placement"
            ) from None
        log.info(
            "ray_placement_ready",
            workers=len(self._workers),
            nodes=len({w.node_id for w in self._workers}),
        )

    async def _stop_workers(self) -> None:
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(10.0):
                async with anyio.create_task_group() as tg:
                    for w in self._workers:
                        if w.alive:
                            tg.start_soon(_close, w)
            for handle in [*(w.handle for w in self._workers), *self._starting]:
                with contextlib.suppress(Exception):
                    ray.kill(handle)

    # -- rollouts -----------------------------------------------------------------

    async def run_rollout(self, run: PlacedRun, job: RolloutJob) -> RolloutResult:
        """Run ``job`` on a worker; when that worker is lost, on another,
        from the rollout's committed steps (``RolloutRestarted`` says so)."""
        return await self._rollouts.run(run, job, self._workers, self._placing)

    async def _ask(
        self, worker: _Worker, placed: PlacedRollout, committed: Sequence[Step]
    ) -> RolloutResult:
        worker.load += 1
        worker.placed += 1
        ref = worker.handle.run.remote(ENCODER.encode(placed))
        try:
            data = await ref
        except RayActorError as error:
            self._lose(worker, _first_line(str(error)))
            raise WorkerLost(worker.lost) from error
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
                with anyio.move_on_after(FINAL_EVENTS_S), contextlib.suppress(Exception):
                    await ref  # its last events reach the run
            raise
        finally:
            worker.load -= 1
        return outcome_result(OUTCOME.decode(data), placed.rollout.rollout_id, committed)

    def _lose(self, worker: _Worker, why: str) -> None:
        if worker.alive:
            worker.alive = False
            worker.lost = why or "the actor died"
            for entry in self._rollouts.runs.values():
                if entry.home is worker:
                    entry.home = None
            self._tasks.start_soon(self._replace, worker)

    async def _replace(self, lost: _Worker) -> None:
        """Start a worker in place of ``lost`` (after a backoff that grows
        while workers keep dying); it takes rollouts once it is ready,
        which waits until the cluster has room for it.  A replacement that
        never started (Ray placed it on a node that was dying too, or it
        failed to set up) counts as one more crash: another is started
        after the next backoff, until the backoff gives up."""
        healthy_for = anyio.current_time() - lost.started
        while True:
            if not await wait_to_replace(self._backoff, healthy_for, lost.index):
                return
            handle: Any = self._actor.options(**self._options).remote(self._spec)
            self._starting.append(handle)
            try:
                ready = READY.decode(await handle.ready.remote())
                failure = ready.error
            except RayActorError as error:
                failure = _first_line(str(error))
            finally:
                self._starting.remove(handle)
            if failure is None:
                break
            log.warning("rollout_worker_start_failed", lost=lost.index, error=failure)
            with contextlib.suppress(Exception):
                ray.kill(handle)
            healthy_for = 0.0
        worker = _Worker(
            len(self._workers),
            handle,
            WorkerBooks(self._rollouts.grants),
            node_id=ready.node_id,
            pid=ready.pid,
            started=anyio.current_time(),
        )
        self._answers_to(worker)
        self._workers.append(worker)
        log.info("rollout_worker_replaced", lost=lost.index, worker=worker.index)
        await self._pump(worker)

    # -- the pump: one worker's outbox, in order ------------------------------------

    async def _pump(self, worker: _Worker) -> None:
        replies: list[Reply] = []
        try:
            while True:
                try:
                    data = await worker.handle.exchange.remote(ENCODER.encode(replies))
                except RayActorError as error:
                    self._lose(worker, _first_line(str(error)))
                    return
                replies = await self._handle(worker, OUTBOUND.decode(data))
        finally:
            worker.books.lost()
            worker.pumped.set()

    async def _handle(self, worker: _Worker, items: list[Outbound]) -> list[Reply]:
        # The ledger first: a waiting call's answer goes back sooner.
        replies: list[Reply] = self._book(worker, items)
        acked, failed = await deliver_events(self._rollouts.runs, items, worker.prompts)
        if acked:
            replies.append(Acked(ids=acked, failed=failed))
        return replies

    def _book(self, worker: _Worker, items: list[Outbound]) -> list[Reply]:
        replies: list[Reply] = list(worker.books.book(items))
        for item in items:
            if isinstance(item, BankOut):
                # Off the pump: a bank call does I/O; its answer goes back on its own.
                self._tasks.start_soon(self._bank_call, worker, item)
        return replies

    async def _bank_call(self, worker: _Worker, item: BankOut) -> None:
        await self._send(worker, [await answer_bank_call(self._bank, item)])

    def _answers_to(self, worker: _Worker) -> None:
        """Answers outside ``worker``'s exchange go with ``_send``."""

        def send(replies: list[Reply]) -> None:
            self._tasks.start_soon(self._send, worker, replies)

        worker.books.sends_with(send)

    async def _send(self, worker: _Worker, replies: list[Reply]) -> None:
        """Answers outside the worker's exchange (a bank call's, a waiting
        ask's once another worker gave budget back)."""
        with contextlib.suppress(RayActorError):  # a lost worker's rollouts go on elsewhere
            await worker.handle.deliver.remote(ENCODER.encode(replies))


async def _close(worker: _Worker) -> None:
    with contextlib.suppress(Exception):
        await worker.handle.close.remote()


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    useful = [line for line in lines if "Error" in line] or lines
    return useful[-1][:400] if useful else text[:400]


__all__ = ["RayPlacement", "WorkerInfo"]
