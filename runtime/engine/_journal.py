"""A run's journal of model calls, kept in its events (``CallReserved``
before a call is sent, ``CallSettled`` after), and what a resumed run does
with it (``restore_journal``).  The events' sink must be durable storage
(the daemon's run store, or the driver's, reached from a Ray worker with an
acknowledgement) for the journal to mean anything.  Must not know how the
events are stored or carried.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Awaitable, Callable
from typing import final

import msgspec

from agentrt.protocols._events import CallReserved, CallSettled, Event
from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.protocols._usage import Usage
from agentrt.runtime.budget._ledger import BudgetLedger, Reservation
from agentrt.runtime.engine._checkpoint import RunCheckpoint

Emit = Callable[[Event], Awaitable[object]]
"""How the journal sends an event (``EventEmitter.emit``): returns once the
event is durable."""


@final
class EventJournal:
    """``CallJournal`` on a run's events: a ``CallReserved`` is on record
    before its call is sent, and its ``CallSettled`` (with the reply) before
    the step goes on.  ``replays``: replies an earlier incarnation got and
    never committed as steps, by request id, handed out once each.

    A call's handle is the journal's own random prefix (48 bits, drawn once)
    and a count: unique among the run's journals (each incarnation's, each
    Ray worker's) without drawing random bits for every call."""

    __slots__ = ("_calls", "_prefix", "asked", "emit", "replays", "run_id")

    def __init__(
        self, emit: Emit, run_id: str, replays: dict[str, ModelReply] | None = None
    ) -> None:
        self.emit = emit
        self.run_id = run_id
        self.asked: dict[str, int] = {}
        self.replays: dict[str, ModelReply] = replays if replays is not None else {}
        self._prefix = os.urandom(6).hex()
        self._calls = itertools.count()

    async def reserved(self, reservation: Reservation, request_id: str | None) -> str:
        call = f"{self._prefix}-{next(self._calls)}"
        await self.emit(
            CallReserved(
                run_id=self.run_id,
                call=call,
                request_id=request_id,
                ledger=reservation.ledger_name,
                model=reservation.model,
                prompt_tokens=reservation.prompt_tokens,
                completion_tokens=reservation.n * reservation.max_tokens,
            )
        )
        return call

    async def settled(
        self, handle: str, usage: Usage | None, reply: ModelReply | None = None
    ) -> None:
        await self.emit(CallSettled(run_id=self.run_id, call=handle, usage=usage, reply=reply))

    def replay(self, request_id: str | None) -> ModelReply | None:
        return self.replays.pop(request_id, None) if request_id is not None else None

    def content_key(self, request: ModelRequest) -> str:
        asked = msgspec.json.encode(
            (request.model, request.messages, request.tools, request.sampling, request.n)
        )
        digest = hashlib.sha256(asked).hexdigest()[:32]
        k = self.asked.get(digest, 0)
        self.asked[digest] = k + 1
        return f"{self.run_id}-h{digest}#{k}"


def restore_journal(ledger: BudgetLedger, checkpoint: RunCheckpoint) -> dict[str, ModelReply]:
    """Charge ``ledger`` (the run's) with every journaled call that no
    committed step stands for: the ones in flight when the process died (as
    reserved), and those that ended but whose step was never committed, or
    that belong to no step (summaries, judges, the warm-up), as settled.
    Committed steps are charged by their rollouts; a step stands for the
    last call charged under its request id (earlier ones were attempts a
    crash cut short).  Returns, per request id with no committed step, the
    last reply on record: the resumed run takes that call up with it (paid
    for here) instead of making it again."""
    assert checkpoint.calls is not None
    stepped = {
        step.reply.request_id
        for saved in checkpoint.rollouts.values()
        for step in saved.steps
        if step.reply is not None and step.reply.request_id is not None
    }
    behind_steps: set[int] = set()
    for index in range(len(checkpoint.calls) - 1, -1, -1):
        call = checkpoint.calls[index]
        if call.request_id in stepped and call.usage is not None:
            stepped.discard(call.request_id)
            behind_steps.add(index)
    replays: dict[str, ModelReply] = {}
    for index, call in enumerate(checkpoint.calls):
        if index in behind_steps:
            continue
        if not call.settled:
            ledger.restore(call.model, call.reserved)
        elif call.usage is not None:
            ledger.restore(call.model, call.usage)
            if call.reply is not None and call.request_id is not None:
                replays[call.request_id] = call.reply
    return replays


__all__ = ["EventJournal", "restore_journal"]
