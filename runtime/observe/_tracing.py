"""OpenTelemetry traces of runs, built from the run's events (the ``otel`` extra).

Owns ``RunTracer`` (a tracer provider of its own, never the process-wide
one, exporting over OTLP through ``SpanQueue``, a bounded queue that drops
and counts spans when the receiver cannot keep up) and the per-run event
observer that turns ``RunStarted`` ... ``RunFinished`` into one trace:
run > rollout (> sub-agent rollout) > step > model call / tool call, and
run > aggregation > judge.  Model-call spans carry the GenAI semantic
conventions (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``...).  Nothing here runs unless tracing is
configured.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentrt.protocols._events import (
    ErrorRaised,
    Event,
    ModelCalled,
    RolloutFinished,
    RolloutStarted,
    RunFinished,
    RunStarted,
    StepRecorded,
    ToolCalled,
    VoteCast,
)
from agentrt.protocols._usage import Usage
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.observe._tracing_config import TracingSettings

log = get_logger(__name__)

EventObserver = Callable[[Event], Awaitable[None]]

_NS: Final = 1_000_000_000
_TEXT_ATTR: Final = 512
"""Characters of a task or answer kept on a span (a trace is an index, not a store)."""


def _ns(seconds: float) -> int:
    return int(seconds * _NS)


@final
class SpanQueue(SpanProcessor):
    """Ends spans into a bounded queue that one worker thread exports in
    batches.  A full queue drops the new span; a failed export drops its
    batch; both are counted in ``dropped`` (and logged once per outage),
    so a receiver that is down costs a run nothing.  The OTLP exporters
    block on their HTTP/gRPC call, hence a thread (owned here, joined by
    ``shutdown``) rather than a task on the run's event loop."""

    def __init__(
        self, exporter: SpanExporter, *, max_spans: int, batch: int = 512, interval_s: float = 0.5
    ) -> None:
        self._exporter = exporter
        self._max = max_spans
        self._batch = batch
        self._interval = interval_s
        self._queue: deque[ReadableSpan] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._failing = False
        self.dropped = 0
        """Spans never delivered: queue full, export failed, or left at shutdown."""
        self.exported = 0
        self._thread = threading.Thread(target=self._work, name="agentrt-otlp-export", daemon=True)
        self._thread.start()

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        with self._wake:
            if self._stopping or len(self._queue) >= self._max:
                self.dropped += 1
                return
            self._queue.append(span)
            if len(self._queue) >= self._batch:
                self._wake.notify()

    def _take(self) -> list[ReadableSpan] | None:
        with self._wake:
            if not self._queue and not self._stopping:
                self._wake.wait(self._interval)
            if not self._queue:
                return None if self._stopping else []
            count = min(self._batch, len(self._queue))
            return [self._queue.popleft() for _ in range(count)]

    def _work(self) -> None:
        while (batch := self._take()) is not None:
            if batch:
                self._export(batch)

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        try:
            ok = self._exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception as error:
            log.warning("tracing export raised", error=repr(error))
            ok = False
        with self._wake:
            if ok:
                self.exported += len(batch)
                if self._failing:
                    log.info("tracing export recovered", dropped_total=self.dropped)
                self._failing = False
                return
            self.dropped += len(batch)
            failing_before, self._failing = self._failing, True
        if not failing_before:
            log.warning(
                "tracing export failed; spans are dropped until the receiver answers",
                dropped=len(batch),
            )

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = timeout_millis / 1000
        with self._wake:
            self._wake.notify()
        event = threading.Event()
        waited = 0.0
        while waited < deadline:
            with self._wake:
                if not self._queue:
                    return True
            event.wait(0.01)
            waited += 0.01
        return False

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Export what is queued within ``timeout_s``; what is left is
        dropped.  Only the first call does anything."""
        with self._wake:
            if self._stopping:
                return
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout_s)
        with self._wake:
            self.dropped += len(self._queue)
            self._queue.clear()
        self._exporter.shutdown()


def _exporter(settings: TracingSettings) -> SpanExporter:
    if settings.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise ConfigError(
                "protocol grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "(pip install opentelemetry-exporter-otlp-proto-grpc)",
                where="tracing.protocol",
            ) from None
        grpc: SpanExporter = GrpcExporter(
            endpoint=settings.endpoint,
            headers=settings.headers,
            timeout=settings.export_timeout_s,
        )
        return grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=settings.endpoint, headers=settings.headers, timeout=settings.export_timeout_s
    )


@final
class RunTracer:
    """Exports runs as traces to the receiver ``settings`` name.  ``observe``
    wraps a run's event sink; ``close`` flushes (within the export
    deadline) and stops the export thread.  ``exporter``: instead of OTLP
    (tests)."""

    def __init__(self, settings: TracingSettings, *, exporter: SpanExporter | None = None) -> None:
        self.settings = settings
        self.queue = SpanQueue(exporter or _exporter(settings), max_spans=settings.max_queue_spans)
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": settings.service_name}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
        )
        self._provider.add_span_processor(self.queue)
        self.tracer = self._provider.get_tracer("agentrt")

    @property
    def dropped(self) -> int:
        """Spans that never reached the receiver."""
        return self.queue.dropped

    def observe(self, sink: EventObserver | None) -> EventObserver:
        """A sink for one run that records its spans and passes every event on to ``sink``."""
        spans = _RunSpans(self.tracer)
        if sink is None:

            async def record(event: Event) -> None:
                spans.on(event)

            return record

        async def record_and_forward(event: Event) -> None:
            spans.on(event)
            await sink(event)

        return record_and_forward

    def close(self) -> None:
        """Export what is left (within ``export_timeout_s``) and stop."""
        self.queue.shutdown(self.settings.export_timeout_s)
        if self.queue.dropped:
            log.warning("tracing dropped spans", dropped=self.queue.dropped)
        self._provider.shutdown()


@final
class _RunSpans:
    """One run's open spans, fed its events in order."""

    __slots__ = (
        "_aggregation",
        "_last_finish",
        "_last_vote",
        "_recording",
        "_rollouts",
        "_run",
        "_tools",
        "_tracer",
    )

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._run: Span | None = None
        self._recording = True
        self._rollouts: dict[str, Span] = {}
        self._tools: dict[str, list[ToolCalled]] = {}
        """Tool calls seen for a rollout's step not yet recorded (a step is
        recorded after its tools ran)."""
        self._aggregation: Span | None = None
        self._last_finish = 0.0
        self._last_vote = 0.0

    def _child(self, name: str, parent: Span | None, start: float, **attrs: Any) -> Span:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(
            name,
            context=context,
            kind=SpanKind.INTERNAL,
            start_time=_ns(start),
            attributes={k: v for k, v in attrs.items() if v is not None},
        )

    def on(self, event: Event) -> None:
        if not self._recording:
            return
        match event:
            case RunStarted():
                self._run = self._child(
                    f"invoke_agent {event.agent}",
                    None,
                    event.ts,
                    **{
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": event.agent,
                        "agentrt.run_id": event.run_id,
                        "agentrt.task": event.task[:_TEXT_ATTR],
                        "agentrt.rollouts": event.rollouts,
                    },
                )
                self._recording = self._run.is_recording()
            case RolloutStarted():
                parent = self._rollouts.get(event.parent_rollout_id or "", self._run)
                self._rollouts[event.rollout_id] = self._child(
                    f"rollout {event.agent or ''}".strip(),
                    parent,
                    event.ts,
                    **{
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": event.agent,
                        "agentrt.rollout_id": event.rollout_id,
                        "agentrt.parent_rollout_id": event.parent_rollout_id,
                    },
                )
            case ToolCalled():
                self._tools.setdefault(event.rollout_id, []).append(event)
            case StepRecorded():
                self._step(event)
            case RolloutFinished():
                span = self._rollouts.pop(event.rollout_id, None)
                if span is not None:
                    self._finish_rollout(span, event)
                self._last_finish = max(self._last_finish, event.ts)
            case VoteCast():
                self._vote(event)
            case ModelCalled():
                self._model_called(event)
            case ErrorRaised(fatal=True) if self._run is not None:
                self._run.set_status(Status(StatusCode.ERROR, event.message[:_TEXT_ATTR]))
            case RunFinished():
                self._finish_run(event)
            case _:
                return

    def _step(self, event: StepRecorded) -> None:
        step = event.step
        rollout = self._rollouts.get(event.rollout_id)
        span = self._child(
            f"step {step.index}",
            rollout,
            step.started_at,
            **{"agentrt.rollout_id": event.rollout_id, "agentrt.step": step.index},
        )
        reply = step.reply
        if reply is not None:
            requested = step.routing.model if step.routing is not None else reply.model
            model = self._child(
                f"chat {requested}",
                span,
                step.started_at,
                **_chat_attributes(
                    requested,
                    served=reply.model,
                    backend=reply.backend,
                    request_id=reply.request_id,
                    usage=reply.usage,
                    finish_reasons=[c.finish_reason for c in reply.choices],
                    latency_s=reply.latency_s,
                ),
                **{
                    "agentrt.routing.policy": step.routing.policy if step.routing else None,
                    "agentrt.routing.reason": step.routing.reason if step.routing else None,
                },
            )
            model.end(_ns(step.started_at + reply.latency_s))
        for call in self._tools.pop(event.rollout_id, ()):
            tool = self._child(
                f"execute_tool {call.tool}",
                span,
                call.ts - call.duration_s,
                **{
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.tool,
                    "gen_ai.tool.call.id": call.call_id,
                },
            )
            if call.is_error:
                tool.set_status(Status(StatusCode.ERROR, "the tool returned an error"))
            tool.end(_ns(call.ts))
        if step.error is not None:
            span.set_status(Status(StatusCode.ERROR, step.error[:_TEXT_ATTR]))
        span.end(_ns(step.started_at + step.duration_s))

    def _finish_rollout(self, span: Span, event: RolloutFinished) -> None:
        usage = event.cost.usage
        span.set_attributes(
            {
                "agentrt.status": event.status,
                "agentrt.stop_reason": event.stop_reason or "",
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
                "agentrt.cost_usd": event.cost.usd,
                "agentrt.model_calls": event.cost.model_calls,
            }
        )
        if event.status != "finished":
            span.set_status(Status(StatusCode.ERROR, event.stop_reason or event.status))
        span.end(_ns(event.ts))

    def _aggregating(self, aggregator: str, ts: float) -> Span | None:
        """The run's aggregation span, started (at the last rollout's end)
        by the first of its votes or model calls."""
        if self._aggregation is None:
            start = min(self._last_finish or ts, ts)
            self._aggregation = self._child(
                f"aggregate {aggregator}",
                self._run,
                start,
                **{"agentrt.aggregator": aggregator},
            )
            self._last_vote = start
        return self._aggregation

    def _model_called(self, event: ModelCalled) -> None:
        """A summary's, judge's, aggregation agent's or the warm-up's call:
        a ``chat`` span under the aggregation (or the run)."""
        start = event.ts - event.latency_s
        parent = (
            self._aggregating(event.aggregator or "", start)
            if event.purpose == "aggregation"
            else self._run
        )
        span = self._child(
            f"chat {event.model}",
            parent,
            start,
            **_chat_attributes(
                event.model,
                served=event.response_model,
                backend=event.backend,
                request_id=event.request_id,
                usage=event.usage,
                finish_reasons=event.finish_reasons,
                latency_s=event.latency_s,
            ),
            **{"agentrt.purpose": event.purpose, "agentrt.aggregator": event.aggregator},
        )
        span.end(_ns(event.ts))

    def _vote(self, event: VoteCast) -> None:
        self._aggregating(event.aggregator, event.ts)
        judge = self._child(
            f"judge {event.aggregator} round {event.round}",
            self._aggregation,
            min(self._last_vote, event.ts),
            **{
                "agentrt.aggregator": event.aggregator,
                "agentrt.round": event.round,
                "agentrt.candidates": list(event.candidates),
                "agentrt.winner": event.winner or "",
                "agentrt.votes": [f"{k}={v}" for k, v in event.votes.items()],
            },
        )
        judge.end(_ns(event.ts))
        self._last_vote = event.ts

    def _finish_run(self, event: RunFinished) -> None:
        for span in self._rollouts.values():
            span.set_status(Status(StatusCode.ERROR, "the run ended before the rollout did"))
            span.end(_ns(event.ts))
        self._rollouts.clear()
        if self._aggregation is not None:
            self._aggregation.end(_ns(event.ts))
            self._aggregation = None
        run = self._run
        if run is None:
            return
        usage = event.cost.usage
        run.set_attributes(
            {
                "agentrt.status": event.status,
                "agentrt.answer": (event.answer or "")[:_TEXT_ATTR],
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
                "agentrt.cost_usd": event.cost.usd,
                "agentrt.model_calls": event.cost.model_calls,
            }
        )
        if event.status != "succeeded" and run.is_recording():
            run.set_status(Status(StatusCode.ERROR, event.status))
        run.end(_ns(event.ts))
        self._run = None


def _chat_attributes(
    requested: str,
    *,
    served: str,
    backend: str,
    request_id: str | None,
    usage: Usage,
    finish_reasons: list[str],
    latency_s: float,
) -> dict[str, Any]:
    """A model call's GenAI semantic-convention attributes."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": requested,
        "gen_ai.response.model": served,
        "gen_ai.provider.name": backend or None,
        "gen_ai.response.id": request_id,
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "gen_ai.usage.cached_input_tokens": usage.cached_prompt_tokens,
        "gen_ai.response.finish_reasons": finish_reasons,
        "agentrt.latency_s": latency_s,
    }


__all__ = ["EventObserver", "RunTracer", "SpanQueue"]
