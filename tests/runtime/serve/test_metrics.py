"""DaemonMetrics: events and scrape-time sources in, a Prometheus exposition out."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from agentrt.protocols import (
    AssistantMessage,
    BudgetUpdated,
    Choice,
    Cost,
    ErrorRaised,
    Event,
    ModelReply,
    RolloutFinished,
    RolloutStarted,
    RoutingDecision,
    RunFinished,
    RunStarted,
    SignalRaised,
    Step,
    StepRecorded,
    ToolCalled,
    Usage,
    UserMessage,
    VoteCast,
)
from agentrt.runtime.models._replicas import ReplicaStatus
from agentrt.runtime.models._retry import RetryStats
from agentrt.runtime.serve._metrics import DaemonMetrics, metrics_route

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(body: bytes) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def step(
    index: int, model: str, usage: Usage, *, duration: float, error: str | None = None
) -> Step:
    reply = ModelReply(
        model=model,
        choices=[Choice(message=AssistantMessage(content="x"))],
        usage=usage,
        latency_s=duration / 2,
    )
    return Step(
        index=index,
        messages=(UserMessage(content="q"),),
        reply=reply,
        duration_s=duration,
        error=error,
        routing=RoutingDecision(model=model, policy="ladder", reason="cheap first"),
    )


def run_events(run_id: str, *, status: str = "succeeded") -> list[Event]:
    """Two rollouts on two models, a tool call that fails, a vote, a signal."""
    u1 = Usage(prompt_tokens=100, completion_tokens=10, cached_prompt_tokens=60)
    u2 = Usage(prompt_tokens=50, completion_tokens=5, cached_prompt_tokens=0)
    ledger = Cost(usd=0.25, usage=u1 + u2, model_calls=2)
    final = Cost(
        usd=0.30, usage=u1 + u2 + Usage(prompt_tokens=7, completion_tokens=1), model_calls=3
    )
    return [
        RunStarted(run_id=run_id, agent="solver", task="t", rollouts=2, ts=1000.0),
        RolloutStarted(run_id=run_id, rollout_id="r0"),
        RolloutStarted(run_id=run_id, rollout_id="r1"),
        StepRecorded(run_id=run_id, rollout_id="r0", step=step(0, "small", u1, duration=0.3)),
        ToolCalled(
            run_id=run_id, rollout_id="r0", call_id="c", tool="calc", arguments="{}", is_error=True
        ),
        ToolCalled(run_id=run_id, rollout_id="r0", call_id="d", tool="calc", arguments="{}"),
        StepRecorded(
            run_id=run_id, rollout_id="r1", step=step(0, "big", u2, duration=3.0, error="boom")
        ),
        SignalRaised(run_id=run_id, rollout_id="r1", signal="loop", step=0),
        ErrorRaised(run_id=run_id, where="rollout 1", message="boom"),
        RolloutFinished(run_id=run_id, rollout_id="r0", status="finished", answer="4"),
        RolloutFinished(run_id=run_id, rollout_id="r1", status="failed"),
        BudgetUpdated(run_id=run_id, spent=ledger),
        VoteCast(run_id=run_id, aggregator="majority", round=0, candidates=["4"], winner="4"),
        BudgetUpdated(run_id=run_id, spent=ledger),  # a repeated snapshot adds nothing
        RunFinished(run_id=run_id, status=status, answer="4", cost=final, ts=1012.5),
    ]


async def test_events_fold_into_counters_and_histograms() -> None:
    metrics = DaemonMetrics(process_metrics=False)
    for event in run_events("run-1"):
        metrics.observe(event)
    body, content_type = await metrics.render()
    assert content_type.startswith("text/plain")
    s = parse(body)
    assert value(s, "agentrt_runs_started_total", agent="solver") == 1
    assert value(s, "agentrt_runs_finished_total", agent="solver", status="succeeded") == 1
    assert value(s, "agentrt_run_duration_seconds_count", status="succeeded") == 1
    assert value(s, "agentrt_run_duration_seconds_sum", status="succeeded") == pytest.approx(12.5)
    assert value(s, "agentrt_rollouts_started_total") == 2
    assert value(s, "agentrt_rollouts_finished_total", status="failed") == 1
    assert value(s, "agentrt_steps_total", model="small") == 1
    assert value(s, "agentrt_steps_total", model="big") == 1
    assert value(s, "agentrt_step_errors_total", model="big") == 1
    assert ("agentrt_step_errors_total", frozenset({("model", "small")})) not in s
    # histogram buckets: the 0.3 s step is under 0.5, the 3 s step is not
    assert value(s, "agentrt_step_duration_seconds_bucket", model="small", le="0.5") == 1
    assert value(s, "agentrt_step_duration_seconds_bucket", model="big", le="2.5") == 0
    assert value(s, "agentrt_step_duration_seconds_bucket", model="big", le="5.0") == 1
    assert value(s, "agentrt_model_call_duration_seconds_sum", model="big") == pytest.approx(1.5)
    # per-model step tokens, the prefix-cache hits among them
    assert value(s, "agentrt_step_tokens_total", model="small", kind="prompt") == 100
    assert value(s, "agentrt_step_tokens_total", model="small", kind="cached") == 60
    assert value(s, "agentrt_step_tokens_total", model="big", kind="completion") == 5
    # run totals follow the ledger, then the final cost (aggregation included), once
    assert value(s, "agentrt_tokens_total", agent="solver", kind="prompt") == 157
    assert value(s, "agentrt_tokens_total", agent="solver", kind="completion") == 16
    assert value(s, "agentrt_tokens_total", agent="solver", kind="cached") == 60
    assert value(s, "agentrt_model_calls_total", agent="solver") == 3
    assert value(s, "agentrt_cost_usd_total", agent="solver") == pytest.approx(0.30)
    assert value(s, "agentrt_tool_calls_total", tool="calc") == 2
    assert value(s, "agentrt_tool_call_errors_total", tool="calc") == 1
    assert value(s, "agentrt_signals_total", signal="loop") == 1
    assert value(s, "agentrt_errors_total", fatal="false") == 1
    assert value(s, "agentrt_aggregation_rounds_total", aggregator="majority") == 1
    assert value(s, "agentrt_events_total", type="step") == 2
    assert value(s, "agentrt_events_total", type="budget") == 2


async def test_cost_is_counted_live_and_never_twice() -> None:
    """BudgetUpdated snapshots count as they come; the final cost adds only the rest."""
    metrics = DaemonMetrics(process_metrics=False)
    metrics.observe(RunStarted(run_id="r", agent="a", task="t", ts=1.0))
    metrics.observe(BudgetUpdated(run_id="r", spent=Cost(usd=0.1, model_calls=1)))
    s = parse((await metrics.render())[0])
    assert value(s, "agentrt_cost_usd_total", agent="a") == pytest.approx(0.1)
    metrics.observe(BudgetUpdated(run_id="r", spent=Cost(usd=0.4, model_calls=4)))
    # a failed run reports no cost: what was counted stays counted
    metrics.observe(RunFinished(run_id="r", status="failed", ts=2.0))
    s = parse((await metrics.render())[0])
    assert value(s, "agentrt_cost_usd_total", agent="a") == pytest.approx(0.4)
    assert value(s, "agentrt_model_calls_total", agent="a") == 4
    assert value(s, "agentrt_runs_finished_total", agent="a", status="failed") == 1


async def test_tracked_runs_are_bounded() -> None:
    metrics = DaemonMetrics(max_tracked_runs=2, process_metrics=False)
    for i in range(3):
        metrics.observe(RunStarted(run_id=f"r{i}", agent="a", task="t", ts=1.0))
    # r0 was dropped: its finish counts under an unknown agent and no duration
    metrics.observe(RunFinished(run_id="r0", status="succeeded", ts=5.0))
    metrics.observe(RunFinished(run_id="r2", status="succeeded", ts=5.0))
    s = parse((await metrics.render())[0])
    assert value(s, "agentrt_runs_finished_total", agent="unknown", status="succeeded") == 1
    assert value(s, "agentrt_runs_finished_total", agent="a", status="succeeded") == 1
    assert value(s, "agentrt_run_duration_seconds_count", status="succeeded") == 1


class FakeBackend:
    """What the HTTP backends expose beyond the ModelBackend protocol."""

    def __init__(self, stats: RetryStats, replicas: list[ReplicaStatus] | None = None) -> None:
        self.stats = stats
        if replicas is not None:
            self.replicas = replicas


async def test_scrape_time_sources() -> None:
    metrics = DaemonMetrics(process_metrics=False)
    depths = {"runs/run-1": 3, "store": 0}

    async def by_status() -> dict[str, int]:
        return {"running": 2, "succeeded": 5}

    metrics.watch_runs_by_status(by_status)
    metrics.watch_active_runs(lambda: 2)
    metrics.watch_store_queue(lambda: 7)
    metrics.watch_mailboxes(lambda: depths)
    replica = ReplicaStatus(
        url="http://s1", healthy=False, breaker="open", outstanding=4, served=9, failures=2
    )
    metrics.watch_backends(
        lambda: {
            "vllm": FakeBackend(RetryStats(calls=10, attempts=12, retries=2, slept_s=0.5)),
            "sglang": FakeBackend(RetryStats(calls=1, attempts=1), [replica]),
            "scripted": object(),  # exposes nothing: skipped
        }
    )
    s = parse((await metrics.render())[0])
    assert value(s, "agentrt_runs", status="running") == 2
    assert value(s, "agentrt_runs", status="succeeded") == 5
    assert value(s, "agentrt_active_runs") == 2
    assert value(s, "agentrt_store_queue_depth") == 7
    assert value(s, "agentrt_mailbox_depth", actor="runs/run-1") == 3
    assert value(s, "agentrt_backend_calls_total", backend="vllm") == 10
    assert value(s, "agentrt_backend_retries_total", backend="vllm") == 2
    assert value(s, "agentrt_backend_retry_sleep_seconds_total", backend="vllm") == 0.5
    assert ("agentrt_backend_calls_total", frozenset({("backend", "scripted")})) not in s
    assert value(s, "agentrt_replica_healthy", backend="sglang", url="http://s1") == 0
    assert value(s, "agentrt_replica_outstanding", backend="sglang", url="http://s1") == 4
    assert value(s, "agentrt_replica_served_total", backend="sglang", url="http://s1") == 9
    # a gauge follows its source from scrape to scrape, series that vanish go
    depths.pop("runs/run-1")
    s = parse((await metrics.render())[0])
    assert ("agentrt_mailbox_depth", frozenset({("actor", "runs/run-1")})) not in s
    assert value(s, "agentrt_mailbox_depth", actor="store") == 0


async def test_a_failing_or_hanging_source_does_not_fail_the_scrape() -> None:
    metrics = DaemonMetrics(source_timeout_s=0.05, process_metrics=False)

    def broken() -> int:
        raise RuntimeError("store closed")

    async def hangs() -> dict[str, int]:
        import anyio

        await anyio.sleep(10)
        return {}

    metrics.watch_active_runs(broken)
    metrics.watch_runs_by_status(hangs)
    metrics.watch_store_queue(lambda: 1)
    s = parse((await metrics.render())[0])
    assert value(s, "agentrt_store_queue_depth") == 1
    assert value(s, "agentrt_metrics_source_errors_total", source="active_runs") == 1
    assert value(s, "agentrt_metrics_source_errors_total", source="runs_by_status") == 1
    assert ("agentrt_active_runs", frozenset()) not in s


async def test_metrics_route_negotiates_openmetrics() -> None:
    metrics = DaemonMetrics()
    metrics.observe(RunStarted(run_id="r", agent="a", task="t"))
    app = Starlette(routes=[metrics_route(metrics)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://daemon") as client:
        plain = await client.get("/metrics")
        assert plain.status_code == 200
        assert plain.headers["content-type"].startswith("text/plain")
        s = parse(plain.content)
        assert value(s, "agentrt_runs_started_total", agent="a") == 1
        assert any(name == "process_cpu_seconds_total" for name, _ in s)
        om = await client.get("/metrics", headers={"accept": "application/openmetrics-text"})
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert om.text.rstrip().endswith("# EOF")


def test_two_instances_do_not_share_a_registry() -> None:
    a, b = DaemonMetrics(process_metrics=False), DaemonMetrics(process_metrics=False)
    a.observe(RunStarted(run_id="r", agent="x", task="t"))
    assert a.registry.get_sample_value("agentrt_runs_started_total", {"agent": "x"}) == 1
    assert b.registry.get_sample_value("agentrt_runs_started_total", {"agent": "x"}) is None


def test_rejects_a_nonsense_bound() -> None:
    with pytest.raises(ValueError, match="max_tracked_runs"):
        DaemonMetrics(max_tracked_runs=0)


def test_folded_metrics_expose_what_prometheus_client_does() -> None:
    """The event-fed counters and histograms are plain numbers folded on the
    run loop; their exposition is prometheus_client's own for the same
    observations (bounds inclusive, ``_total``, ``_sum``, ``_count``,
    ``_created``; a metric without labels shows zeros from the start)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from agentrt.runtime.serve._metrics import (
        STEP_BUCKETS,
        _EventFamilies,
        _FoldedCounter,
        _FoldedHistogram,
    )

    reference = CollectorRegistry()
    ref_counter = Counter("c", "A counter.", ["model", "kind"], registry=reference)
    ref_histogram = Histogram(
        "h", "A histogram.", ["model"], buckets=STEP_BUCKETS, registry=reference
    )
    ref_bare = Histogram("bare", "No labels.", buckets=(0.1, 1.0), registry=reference)
    Counter("idle", "Never counted.", registry=reference)

    folded = CollectorRegistry()
    families = _EventFamilies()
    folded.register(families)
    counter = _FoldedCounter("c", "A counter.", ("model", "kind"))
    histogram = _FoldedHistogram("h", "A histogram.", STEP_BUCKETS, ("model",))
    bare = _FoldedHistogram("bare", "No labels.", (0.1, 1.0), ())
    idle = _FoldedCounter("idle", "Never counted.", ())
    families.metrics.extend([counter, histogram, bare, idle])

    # Values on the bounds, between them, past the last; whole and fractional amounts.
    for model, value in [("a", 0.5), ("a", 0.05), ("b", 0.3), ("a", 300.0), ("a", 301.0)]:
        ref_histogram.labels(model).observe(value)
        histogram.observe((model,), value)
        ref_counter.labels(model, "prompt").inc(value)
        counter.inc((model, "prompt"), value)
        ref_counter.labels(model, "calls").inc()
        counter.inc((model, "calls"))
    ref_bare.observe(1.0)
    bare.observe((), 1.0)

    def exposition(registry: CollectorRegistry) -> list[str]:
        lines = generate_latest(registry).decode().splitlines()
        return sorted(line.rsplit(" ", 1)[0] if "_created" in line else line for line in lines)

    assert exposition(folded) == exposition(reference)


def test_a_new_label_set_has_its_created_time_before_its_value() -> None:
    """The run loop adds label sets while the API thread scrapes; a scrape
    reads the created time of every label set it finds a value for, so a
    new one's time is in place before its value."""
    from agentrt.runtime.serve._metrics import _FoldedCounter, _FoldedHistogram

    order: list[str] = []

    class Logged(dict[tuple[str, ...], Any]):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def __setitem__(self, key: tuple[str, ...], value: Any) -> None:
            if key not in self:
                order.append(self.name)
            super().__setitem__(key, value)

    counter = _FoldedCounter("c", "A counter.", ("model",))
    histogram = _FoldedHistogram("h", "A histogram.", (0.1, 1.0), ("model",))
    for metric in (counter, histogram):
        metric.values = Logged("value")
        metric.created = Logged("created")
    counter.inc(("a",))
    histogram.observe(("a",), 0.5)
    assert order == ["created", "value", "created", "value"]
