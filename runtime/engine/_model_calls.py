"""What a run says about the model calls it makes outside its rollouts'
steps (summaries, aggregation, the warm-up): ``reporting`` makes the
``MeteredBackend.after_call`` that emits a ``ModelCalled`` event and the
run's budget (``BudgetUpdated``) after each such call, so the live cost
moves while a run aggregates and traces have a span per call.

A step's call is reported by its ``StepRecorded``; this module must not
know which summarizer or aggregator makes a call.
"""

from __future__ import annotations

from agentrt.agents._recording import EventEmitter
from agentrt.protocols._events import BudgetUpdated, ModelCalled
from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.models._metered import AfterCall


def reporting(
    emitter: EventEmitter,
    ledger: BudgetLedger,
    *,
    run_id: str,
    purpose: str,
    aggregator: str | None = None,
) -> AfterCall:
    """The ``after_call`` of a run's ``purpose`` calls (``summary``,
    ``aggregation``, ``warm-up``), on ``ledger``, emitted to ``emitter``
    (nothing is built for a kind nobody reads)."""

    async def report(request: ModelRequest, reply: ModelReply) -> None:
        if emitter.wants(ModelCalled):
            await emitter.emit(
                ModelCalled(
                    run_id=run_id,
                    purpose=purpose,
                    aggregator=aggregator,
                    model=request.model or reply.model,
                    response_model=reply.model,
                    backend=reply.backend,
                    request_id=reply.request_id,
                    usage=reply.usage,
                    latency_s=reply.latency_s,
                    finish_reasons=[c.finish_reason for c in reply.choices],
                )
            )
        if emitter.wants(BudgetUpdated):
            await emitter.emit(ledger.snapshot().to_event(run_id))

    return report


__all__ = ["reporting"]
