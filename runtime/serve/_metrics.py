"""Prometheus metrics of the daemon: ``DaemonMetrics`` and ``GET /metrics``.

Part of the daemon (``agentrt.runtime.serve``): may import any layer; only
the daemon imports it.
"""

from __future__ import annotations

import inspect
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar, cast, final

import anyio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentrt.protocols._events import (
    BudgetUpdated,
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutStarted,
    RunFinished,
    RunStarted,
    SignalRaised,
    StepRecorded,
    ToolCalled,
    VoteCast,
)
from agentrt.protocols._trajectory import Step
from agentrt.protocols._usage import Cost, Usage
from agentrt.runtime.models._replicas import ReplicaStatus
from agentrt.runtime.models._retry import RetryStats
from agentrt.runtime.observe._log import get_logger
from agentrt.tools.mcp._server_actor import McpServerStatus

log = get_logger(__name__)

T = TypeVar("T")

_go_float = cast(Callable[[float], str], floatToGoString)
"""A bucket's bound as Prometheus writes it (``5.0``, ``+Inf``)."""

Source = Callable[[], T | Awaitable[T]]
"""A scrape-time reading: a plain or an async callable (async for a store query)."""

#: Seconds; a step is a model call plus its tool calls.
STEP_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Seconds; one run, from ``RunStarted`` to ``RunFinished``.
RUN_BUCKETS: Final = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: Seconds; one tool call.
TOOL_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 120.0)

#: Why 10,000: the per-run state (agent, start time, cost accounted so far)
#: is ~200 bytes; a run whose ``RunFinished`` never arrives (the daemon was
#: killed) must not pin memory forever, so the oldest are dropped past this.
DEFAULT_TRACKED_RUNS: Final = 10_000

#: A scrape must answer even when a source hangs (a locked store).
DEFAULT_SOURCE_TIMEOUT_S: Final = 2.0


@dataclass(slots=True)
class _RunState:
    agent: str
    started_ts: float
    accounted: Cost = field(default_factory=Cost)


@dataclass(slots=True)
class _Scrape:
    """What the scrape-time sources returned for one ``render``."""

    runs_by_status: Mapping[str, int] | None = None
    active_runs: int | None = None
    store_queue_depth: int | None = None
    mailbox_depths: Mapping[str, int] | None = None
    backends: Mapping[str, object] | None = None
    mcp_servers: Mapping[str, McpServerStatus] | None = None
    admission: Mapping[str, int] | None = None


@final
class _FoldedCounter:
    """A counter by label values, kept as plain numbers: ``inc`` is a dict
    update (prometheus_client's takes a lock and a child lookup, and the
    run loop folds several events per model call); ``_EventFamilies``
    exposes it at scrape time like a ``Counter`` (``_total``, ``_created``)."""

    __slots__ = ("created", "doc", "labels", "name", "values")

    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.doc = doc
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {}
        self.created: dict[tuple[str, ...], float] = {}
        if not labels:  # a counter without labels shows 0 from the start
            self.values[()] = 0.0
            self.created[()] = time.time()

    def inc(self, key: tuple[str, ...], amount: float = 1.0) -> None:
        values = self.values
        before = values.get(key)
        if before is None:
            self.created[key] = time.time()  # before the value: see ``_row``
            before = 0.0
        values[key] = before + amount

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        created = self.created
        for key, value in list(self.values.items()):
            family.add_metric(list(key), value, created=created.get(key))
        return family


@final
class _FoldedHistogram:
    """A histogram by label values, kept as plain numbers (see
    ``_FoldedCounter``): per label set, the observations in each bucket
    (``le`` inclusive; the last is past the largest bound) and their sum."""

    __slots__ = ("bounds", "created", "doc", "labels", "name", "values")

    def __init__(
        self, name: str, doc: str, bounds: Sequence[float], labels: tuple[str, ...]
    ) -> None:
        self.name = name
        self.doc = doc
        self.labels = labels
        self.bounds = tuple(b for b in bounds if b != float("inf"))
        self.values: dict[tuple[str, ...], list[float]] = {}
        """Per label set: a count per bucket, then the sum."""
        self.created: dict[tuple[str, ...], float] = {}
        if not labels:
            self._row(())

    def _row(self, key: tuple[str, ...]) -> list[float]:
        # ``created`` first: a scrape on the API thread reads ``created`` for
        # every key it finds in ``values``.
        self.created[key] = time.time()
        row = self.values[key] = [0.0] * (len(self.bounds) + 2)
        return row

    def observe(self, key: tuple[str, ...], value: float) -> None:
        row = self.values.get(key)
        if row is None:
            row = self._row(key)
        row[bisect_left(self.bounds, value)] += 1
        row[-1] += value

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        edges = [_go_float(b) for b in (*self.bounds, float("inf"))]
        for key, live in list(self.values.items()):
            row = list(live)  # one reading: the buckets and the sum agree
            cumulative, buckets = 0.0, []
            for edge, count in zip(edges, row[:-1], strict=True):
                cumulative += count
                buckets.append((edge, cumulative))
            family.add_metric(list(key), buckets, row[-1])
            family.samples.append(
                Sample(
                    f"{self.name}_created",
                    dict(zip(self.labels, key, strict=True)),
                    self.created[key],
                )
            )
        return family


@final
class _EventFamilies(Collector):
    """The event-fed counters and histograms as metric families, read at scrape."""

    def __init__(self) -> None:
        self.metrics: list[_FoldedCounter | _FoldedHistogram] = []

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        for metric in self.metrics:
            yield metric.family()


@final
class DaemonMetrics:
    """The daemon's Prometheus registry, fed by run events and scrape-time sources.

    ``observe`` is called with every event the daemon's runs emit (it is
    cheap and never raises on a well-formed event); the ``watch_*`` methods
    register the callables read at scrape time; ``render`` produces the
    exposition.  The registry is the instance's own, never the process-wide
    default.  Per-agent totals (``agentrt_tokens_total``,
    ``agentrt_model_calls_total``, ``agentrt_cost_usd_total``) count all a
    run spent, aggregation and warm-up included (from the ledger's
    ``BudgetUpdated`` snapshots and the final cost).  The prefix-cache hit
    ratio per model is ``agentrt_step_tokens_total{kind="cached"}`` over
    ``{kind="prompt"}``.
    """

    def __init__(
        self,
        *,
        max_tracked_runs: int = DEFAULT_TRACKED_RUNS,
        source_timeout_s: float = DEFAULT_SOURCE_TIMEOUT_S,
        process_metrics: bool = True,
    ) -> None:
        if max_tracked_runs < 1:
            raise ValueError(
                f"DaemonMetrics: max_tracked_runs must be >= 1, got {max_tracked_runs}"
            )
        self.registry = CollectorRegistry(auto_describe=False)
        self._max_runs = max_tracked_runs
        self._source_timeout_s = source_timeout_s
        self._runs: OrderedDict[str, _RunState] = OrderedDict()
        self._sources: dict[str, Source[object]] = {}
        self._scrape = _Scrape()
        self._render_lock = anyio.Lock()
        r = self.registry
        folded = _EventFamilies()
        r.register(folded)

        def counter(name: str, doc: str, *labels: str) -> _FoldedCounter:
            metric = _FoldedCounter(name, doc, labels)
            folded.metrics.append(metric)
            return metric

        def histogram(
            name: str, doc: str, buckets: Sequence[float], *labels: str
        ) -> _FoldedHistogram:
            metric = _FoldedHistogram(name, doc, buckets, labels)
            folded.metrics.append(metric)
            return metric

        self.events = counter("agentrt_events", "Run events observed, by type.", "type")
        self.runs_started = counter("agentrt_runs_started", "Runs started, by agent.", "agent")
        self.runs_finished = counter(
            "agentrt_runs_finished", "Runs finished, by agent and final status.", "agent", "status"
        )
        self.run_duration = histogram(
            "agentrt_run_duration_seconds",
            "Wall time of a run, RunStarted to RunFinished, by final status.",
            RUN_BUCKETS,
            "status",
        )
        self.rollouts_started = counter("agentrt_rollouts_started", "Rollouts started.")
        self.rollouts_finished = counter(
            "agentrt_rollouts_finished", "Rollouts finished, by status.", "status"
        )
        self.steps = counter(
            "agentrt_steps", "Steps recorded, by the model that served them.", "model"
        )
        self.step_errors = counter(
            "agentrt_step_errors", "Steps that recorded an error, by model.", "model"
        )
        self.step_duration = histogram(
            "agentrt_step_duration_seconds",
            "Wall time of a step (model call plus tool calls), by model.",
            STEP_BUCKETS,
            "model",
        )
        self.model_call_duration = histogram(
            "agentrt_model_call_duration_seconds",
            "Latency of a step's model call as the backend measured it, by model.",
            STEP_BUCKETS,
            "model",
        )
        self.step_tokens = counter(
            "agentrt_step_tokens",
            "Tokens of steps' model calls by model and kind (prompt, completion, cached); "
            "cached/prompt is the prefix-cache hit ratio.",
            "model",
            "kind",
        )
        self.tokens = counter(
            "agentrt_tokens",
            "Tokens runs spent (steps, warm-up, summaries, aggregation) by agent and kind.",
            "agent",
            "kind",
        )
        self.model_calls = counter(
            "agentrt_model_calls", "Model calls runs made, by agent.", "agent"
        )
        self.cost_usd = counter(
            "agentrt_cost_usd", "Money runs spent in US dollars, by agent.", "agent"
        )
        self.tool_calls = counter("agentrt_tool_calls", "Tool calls, by tool.", "tool")
        self.tool_errors = counter(
            "agentrt_tool_call_errors", "Tool calls that failed, by tool.", "tool"
        )
        self.tool_duration = histogram(
            "agentrt_tool_call_duration_seconds", "Wall time of a tool call.", TOOL_BUCKETS
        )
        self.signals = counter("agentrt_signals", "Behaviour signals raised, by signal.", "signal")
        self.errors = counter(
            "agentrt_errors", "Errors runs reported, by whether they ended the run.", "fatal"
        )
        self.aggregation_rounds = counter(
            "agentrt_aggregation_rounds",
            "Aggregation decisions (votes, tournament rounds), by aggregator.",
            "aggregator",
        )
        # Not fed by events (the scrape, the API thread): prometheus_client's own.
        self.source_errors = Counter(
            "agentrt_metrics_source_errors",
            "Scrape-time sources that failed or timed out, by source.",
            ["source"],
            registry=r,
        )
        self.limits_hit = Counter(
            "agentrt_limit_refusals",
            "Requests and connections refused by a [server] limit, by the limit's key.",
            ["limit"],
            registry=r,
        )
        r.register(_ScrapeCollector(lambda: self._scrape))
        if process_metrics:
            ProcessCollector(registry=r)

    # -- events --------------------------------------------------------------

    def observe(self, event: Event) -> None:
        """Fold one run event into the counters and histograms."""
        self.events.inc((str(type(event).__struct_config__.tag),))
        match event:
            case RunStarted(run_id=run_id, agent=agent, ts=ts):
                self.runs_started.inc((agent,))
                self._track(run_id, _RunState(agent=agent, started_ts=ts))
            case RunFinished():
                self._run_finished(event)
            case BudgetUpdated(run_id=run_id, spent=spent):
                self._account(self._state(run_id), spent)
            case RolloutStarted():
                self.rollouts_started.inc(())
            case RolloutFinished(status=status):
                self.rollouts_finished.inc((status,))
            case StepRecorded(step=step):
                self._step(step)
            case ToolCalled(tool=tool, is_error=is_error, duration_s=duration_s):
                self.tool_calls.inc((tool,))
                if is_error:
                    self.tool_errors.inc((tool,))
                self.tool_duration.observe((), duration_s)
            case SignalRaised(signal=signal):
                self.signals.inc((signal,))
            case ErrorRaised(fatal=fatal):
                self.errors.inc(("true" if fatal else "false",))
            case VoteCast(aggregator=aggregator):
                self.aggregation_rounds.inc((aggregator,))
            case _:
                pass

    def _state(self, run_id: str) -> _RunState:
        state = self._runs.get(run_id)
        if state is None:  # resumed after a restart: no RunStarted seen
            state = _RunState(agent="unknown", started_ts=0.0)
            self._track(run_id, state)
        return state

    def _run_finished(self, event: RunFinished) -> None:
        state = self._runs.pop(event.run_id, None)
        if state is None:
            state = _RunState(agent="unknown", started_ts=0.0)
        elif state.started_ts > 0 and event.ts >= state.started_ts:
            self.run_duration.observe((event.status,), event.ts - state.started_ts)
        self._account(state, event.cost)
        self.runs_finished.inc((state.agent, event.status))

    def _step(self, step: Step) -> None:
        reply = step.reply
        if reply is not None:
            model = reply.model
        else:
            model = step.routing.model if step.routing is not None else "none"
        self.steps.inc((model,))
        self.step_duration.observe((model,), step.duration_s)
        if step.error is not None:
            self.step_errors.inc((model,))
        if reply is not None:
            self.model_call_duration.observe((model,), reply.latency_s)
            usage = reply.usage
            self.step_tokens.inc((model, "prompt"), usage.prompt_tokens)
            self.step_tokens.inc((model, "completion"), usage.completion_tokens)
            self.step_tokens.inc((model, "cached"), usage.cached_prompt_tokens)

    def _track(self, run_id: str, state: _RunState) -> None:
        self._runs[run_id] = state
        self._runs.move_to_end(run_id)
        while len(self._runs) > self._max_runs:
            self._runs.popitem(last=False)

    def _account(self, state: _RunState, total: Cost) -> None:
        """Add what ``total`` (a run's cumulative spend) grew since the last one."""
        seen, agent = state.accounted, state.agent
        usage, seen_usage = total.usage, seen.usage
        for kind, now, before in (
            ("prompt", usage.prompt_tokens, seen_usage.prompt_tokens),
            ("completion", usage.completion_tokens, seen_usage.completion_tokens),
            ("cached", usage.cached_prompt_tokens, seen_usage.cached_prompt_tokens),
        ):
            if now > before:
                self.tokens.inc((agent, kind), now - before)
        if total.model_calls > seen.model_calls:
            self.model_calls.inc((agent,), total.model_calls - seen.model_calls)
        if total.usd > seen.usd:
            self.cost_usd.inc((agent,), total.usd - seen.usd)
        state.accounted = Cost(
            usd=max(total.usd, seen.usd),
            usage=Usage(
                prompt_tokens=max(usage.prompt_tokens, seen_usage.prompt_tokens),
                completion_tokens=max(usage.completion_tokens, seen_usage.completion_tokens),
                cached_prompt_tokens=max(
                    usage.cached_prompt_tokens, seen_usage.cached_prompt_tokens
                ),
            ),
            model_calls=max(total.model_calls, seen.model_calls),
        )

    # -- scrape-time sources -------------------------------------------------

    def watch_runs_by_status(self, source: Source[Mapping[str, int]]) -> None:
        """Runs in the store by status (``agentrt_runs{status}``)."""
        self._sources["runs_by_status"] = source

    def watch_active_runs(self, source: Source[int]) -> None:
        """Runs executing in this process now (``agentrt_active_runs``)."""
        self._sources["active_runs"] = source

    def watch_store_queue(self, source: Source[int]) -> None:
        """Writes waiting for the store's writer (``agentrt_store_queue_depth``)."""
        self._sources["store_queue_depth"] = source

    def watch_admission(self, source: Source[Mapping[str, int]]) -> None:
        """The run queue: runs admitted by state (``running``, ``pending``)
        and ``limit``, past which new runs get 429
        (``agentrt_run_queue{state}``, ``agentrt_run_queue_limit``)."""
        self._sources["admission"] = source

    def limit_hit(self, key: str) -> None:
        """A request or connection was refused by the ``[server]`` limit ``key``."""
        self.limits_hit.labels(key).inc()

    def watch_mailboxes(self, source: Source[Mapping[str, int]]) -> None:
        """Work waiting per queue or mailbox (``agentrt_mailbox_depth{actor}``):
        the daemon reports runs waiting for a run slot, rollouts waiting for
        their backend's slot and writes waiting for the store.

        Keep the keys few (queues, actor kinds): each is a series."""
        self._sources["mailbox_depths"] = source

    def watch_backends(self, source: Source[Mapping[str, object]]) -> None:
        """The model backends by name: their retry counters (OpenAI-compatible
        and SGLang backends) and replica health and load (SGLang)."""
        self._sources["backends"] = source

    def watch_mcp_servers(self, source: Source[Mapping[str, McpServerStatus]]) -> None:
        """The MCP server connections the runtime holds, as their actors
        report them (``agentrt_mcp_server_ready{server}``,
        ``agentrt_mcp_server_restarts{server}``)."""
        self._sources["mcp_servers"] = source

    async def _read_sources(self) -> _Scrape:
        scrape = _Scrape()
        for name, source in self._sources.items():
            try:
                with anyio.fail_after(self._source_timeout_s):
                    value = source()
                    if inspect.isawaitable(value):
                        value = await value
            except Exception as exc:  # one bad source must not fail the scrape
                self.source_errors.labels(name).inc()
                log.warning("metrics source failed", source=name, error=repr(exc))
                continue
            setattr(scrape, name, value)
        return scrape

    async def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition for a scrape and its content type (negotiated from
        the ``Accept`` header: Prometheus text by default, OpenMetrics on request)."""
        encoder, content_type = choose_encoder(accept)
        async with self._render_lock:
            self._scrape = await self._read_sources()
            try:
                return encoder(self.registry), content_type
            finally:
                self._scrape = _Scrape()


@final
class _ScrapeCollector(Collector):
    """Turns the current scrape's readings into metric families."""

    def __init__(self, current: Callable[[], _Scrape]) -> None:
        self._current = current

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._current()
        if s.runs_by_status is not None:
            yield _by_key(
                "agentrt_runs", "Runs in the store, by status.", "status", s.runs_by_status
            )
        if s.active_runs is not None:
            yield GaugeMetricFamily(
                "agentrt_active_runs", "Runs executing in this process.", value=s.active_runs
            )
        if s.store_queue_depth is not None:
            yield GaugeMetricFamily(
                "agentrt_store_queue_depth",
                "Writes waiting for the run store's writer.",
                value=s.store_queue_depth,
            )
        if s.admission is not None:
            queue = GaugeMetricFamily(
                "agentrt_run_queue",
                "Runs admitted and not finished, by state (running, pending).",
                labels=["state"],
            )
            for state in ("running", "pending"):
                queue.add_metric([state], s.admission.get(state, 0))
            yield queue
            yield GaugeMetricFamily(
                "agentrt_run_queue_limit",
                "Unfinished runs the daemon admits; past it POST /v1/runs gets 429.",
                value=s.admission.get("limit", 0),
            )
        if s.mailbox_depths is not None:
            yield _by_key(
                "agentrt_mailbox_depth",
                "Work waiting in a queue or actor mailbox (runs, rollouts, store writes).",
                "actor",
                s.mailbox_depths,
            )
        if s.backends is not None:
            yield from _backend_families(s.backends)
        if s.mcp_servers is not None:
            ready = GaugeMetricFamily(
                "agentrt_mcp_server_ready",
                "1 when an MCP server's connection is ready, 0 while it starts or restarts.",
                labels=["server", "state"],
            )
            restarts = CounterMetricFamily(
                "agentrt_mcp_server_restarts",
                "Times an MCP server was restarted after it died.",
                labels=["server"],
            )
            for server, connection in sorted(s.mcp_servers.items()):
                state = connection.state.value
                ready.add_metric([server, state], float(state == "ready"))
                restarts.add_metric([server], connection.restarts)
            yield ready
            yield restarts


_RETRY_FIELDS: Final = (
    ("calls", "agentrt_backend_calls", "Calls a model backend served or gave up on."),
    ("attempts", "agentrt_backend_attempts", "HTTP attempts, retries included."),
    ("retries", "agentrt_backend_retries", "Attempts that were retries."),
    ("retry_after_waits", "agentrt_backend_retry_after_waits", "Waits a Retry-After asked for."),
    ("slept_s", "agentrt_backend_retry_sleep_seconds", "Seconds slept between attempts."),
    ("gave_up", "agentrt_backend_gave_up", "Calls that failed after their retries."),
    ("breaker_rejections", "agentrt_backend_breaker_rejections", "Calls an open breaker refused."),
    ("breaker_waits", "agentrt_backend_breaker_waits", "Waits for an open breaker's probe."),
)


_ReplicaField = tuple[
    type[GaugeMetricFamily | CounterMetricFamily], str, str, Callable[[ReplicaStatus], float]
]
"""A replica family: its kind, name and help, and what it reads of a replica."""

_REPLICA_FIELDS: Final[tuple[_ReplicaField, ...]] = (
    (
        GaugeMetricFamily,
        "agentrt_replica_healthy",
        "1 if a model replica is healthy.",
        lambda row: 1 if row.healthy else 0,
    ),
    (
        GaugeMetricFamily,
        "agentrt_replica_outstanding",
        "Requests in flight on a model replica.",
        lambda row: row.outstanding,
    ),
    (
        CounterMetricFamily,
        "agentrt_replica_served",
        "Requests a model replica served.",
        lambda row: row.served,
    ),
    (
        CounterMetricFamily,
        "agentrt_replica_failures",
        "Failed requests to a model replica.",
        lambda row: row.failures,
    ),
)


def _by_key(metric: str, doc: str, label: str, counts: Mapping[str, int]) -> GaugeMetricFamily:
    """A gauge with one series per key of ``counts``, in key order."""
    family = GaugeMetricFamily(metric, doc, labels=[label])
    for key, count in sorted(counts.items()):
        family.add_metric([key], count)
    return family


def _backend_families(backends: Mapping[str, object]) -> Iterator[Metric]:
    stats: dict[str, RetryStats] = {}
    replicas: dict[str, Sequence[ReplicaStatus]] = {}
    for name, backend in backends.items():
        # Only the HTTP backends count retries and only SGLang has replicas;
        # the ModelBackend protocol promises neither.
        found = getattr(backend, "stats", None)
        if isinstance(found, RetryStats):
            stats[name] = found
        listed = getattr(backend, "replicas", None)
        if isinstance(listed, list) and all(isinstance(x, ReplicaStatus) for x in listed):
            replicas[name] = listed
    if stats:
        for attr, metric, doc in _RETRY_FIELDS:
            family = CounterMetricFamily(metric, doc, labels=["backend"])
            for name, snap in sorted(stats.items()):
                family.add_metric([name], getattr(snap, attr))
            yield family
    if replicas:
        for kind, metric, doc, read in _REPLICA_FIELDS:
            per_replica = kind(metric, doc, labels=["backend", "url"])
            for name, rows in sorted(replicas.items()):
                for row in rows:
                    per_replica.add_metric([name, row.url], read(row))
            yield per_replica


def metrics_route(metrics: DaemonMetrics, path: str = "/metrics") -> Route:
    """``GET /metrics``: the Prometheus exposition of ``metrics``."""

    async def scrape(request: Request) -> Response:
        body, content_type = await metrics.render(request.headers.get("accept", ""))
        return Response(body, media_type=None, headers={"content-type": content_type})

    return Route(path, scrape, methods=["GET"], name="metrics")


__all__ = [
    "DEFAULT_SOURCE_TIMEOUT_S",
    "DEFAULT_TRACKED_RUNS",
    "RUN_BUCKETS",
    "STEP_BUCKETS",
    "TOOL_BUCKETS",
    "DaemonMetrics",
    "Source",
    "metrics_route",
]
