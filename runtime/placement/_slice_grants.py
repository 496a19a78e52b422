"""The driver's side of budget slices: ``SliceGrants`` carves each rollout
worker's slice of a run's budget from the run's ledger (``BudgetSlice``),
books what the worker reports its rollouts spent (on the run's ledger, by
model: its rollouts' own ledgers on the driver are not charged), takes
back what was not spent when the worker's rollouts of the run end, and,
when a worker is lost, charges its calls in flight as reserved.  Near a cap it grants less
(at most what leaves a call for each rollout in flight), and a call that
does not fit waits while another worker still holds budget it may give
back, so the run spends its cap as exactly as with one ledger.  Must not
know how items travel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, final

from agentrt.protocols._usage import Usage
from agentrt.runtime.budget._ledger import BudgetLedger, BudgetSlice
from agentrt.runtime.kernel._errors import BudgetExceeded
from agentrt.runtime.placement._worker_wire import (
    Reply,
    SliceAsk,
    SliceGranted,
    SliceReport,
    Spent,
)


class SliceHolder(Protocol):
    """A worker as its slices see it: its slices by key, and how an answer
    reaches it outside its own exchange (``send``)."""

    lent: dict[int, Lent]

    def send(self, replies: list[Reply]) -> None: ...


@dataclass(slots=True, eq=False)
class Lent:
    """A slice the driver leased to a worker: its budget, its calls in flight
    as last reported (their worst case), and whether the worker waits for
    an answer (it gave back what it held)."""

    holder: SliceHolder
    budget: BudgetSlice
    in_flight: list[Spent] = field(default_factory=list)
    waiting: bool = False


@final
class SliceGrants:
    """Every worker's slices of the runs' budgets.  ``ledgers``: the
    placement's live map, rollout id -> its ledger on the driver (a child
    of its run's); ``sharers(rollout id)``: the rollouts of its run in
    flight."""

    def __init__(self, ledgers: Mapping[str, BudgetLedger], sharers: Callable[[str], int]) -> None:
        self.ledgers = ledgers
        self._sharers = sharers
        self._by_run: dict[BudgetLedger, list[Lent]] = {}
        self._pending: dict[BudgetLedger, list[tuple[Lent, SliceAsk]]] = {}

    def ask(self, holder: SliceHolder, item: SliceAsk) -> SliceGranted | None:
        """Answer ``item`` (``None``: it waits until another worker's slice
        of the run gives budget back, or cannot)."""
        lent = holder.lent.get(item.slice)
        if lent is None:
            rollout = self.ledgers.get(item.ledger)
            if rollout is None:
                why = f"rollout {item.ledger} has ended"
                return SliceGranted(id=item.id, slice=item.slice, refused=why, kind="invalid")
            run = rollout.parent or rollout
            room = run.headroom()
            try:
                budget = run.carve(
                    None if room.tokens is None else 0,
                    None if room.pico is None else 0,
                    None if room.calls is None and room.seconds is None else 0,
                )
            except BudgetExceeded as refused:
                return _refused(item, refused)
            lent = holder.lent[item.slice] = Lent(holder, budget)
            self._by_run.setdefault(run, []).append(lent)
        run = lent.budget.ledger
        if item.back != (0, 0, 0):
            lent.budget.give_back(*item.back)
            self._retry(run)
        answer = self._grant(lent, item)
        if answer is None:
            lent.waiting = True
            self._pending.setdefault(run, []).append((lent, item))
        return answer

    def _grant(self, lent: Lent, item: SliceAsk) -> SliceGranted | None:
        """Grant ``item`` on ``lent``: a waiting call's own worst case,
        then ``item.calls`` calls more while the run's headroom holds them
        and a call for each of its rollouts in flight."""
        run = lent.budget.ledger
        room = run.headroom()
        bounded = (
            room.tokens is not None,
            room.pico is not None,
            room.calls is not None or room.seconds is not None,
        )
        completion = item.n * item.max_tokens
        priced = room.pico is not None
        own = (0, 0, 0)
        if item.wait:
            own = (item.prompt_tokens + completion, _pico(run, item, item.prompt_tokens, priced), 1)
        if item.calls > 0 and room.seconds is None and any(bounded):
            unit = (item.room + completion, _pico(run, item, item.room, priced), 1)
            fits = math.inf
            for left, need, per in (
                (room.tokens, own[0], unit[0]),
                (room.pico, own[1], unit[1]),
                (room.calls, own[2], unit[2]),
            ):
                if left is not None and per > 0:
                    fits = min(fits, (left - need) // per)
            spare = fits - max(self._sharers(item.ledger), 1)
            more = int(max(0, min(item.calls, spare)))
            grant = tuple(
                o + more * u if b else None for o, u, b in zip(own, unit, bounded, strict=True)
            )
        else:
            grant = tuple(o if b else None for o, b in zip(own, bounded, strict=True))
        try:
            lent.budget.grow(*grant)
        except BudgetExceeded as refused:
            if not item.wait:
                return SliceGranted(id=item.id, slice=item.slice, headroom=run.headroom())
            if self._held_elsewhere(run, lent):
                return None
            return _refused(item, refused)
        tokens, pico, calls = grant
        return SliceGranted(
            id=item.id,
            slice=item.slice,
            tokens=tokens,
            pico=pico,
            calls=calls,
            headroom=run.headroom(),
        )

    def _held_elsewhere(self, run: BudgetLedger, lent: Lent) -> bool:
        """Another worker holds budget of ``run`` it may still give back
        (it does not wait itself: what a waiting one holds is in flight)."""
        return any(
            other is not lent and not other.waiting and not other.budget.empty
            for other in self._by_run.get(run, ())
        )

    def report(self, holder: SliceHolder, item: SliceReport) -> None:
        """Book what ``item`` says the slice's calls spent; an ended slice's
        rest goes back."""
        lent = holder.lent.get(item.slice)
        if lent is None:
            raise ValueError(f"slice {item.slice} was never granted")
        budget = lent.budget
        for spent in item.spent:
            budget.spend(budget.ledger, spent.model, spent.usage, calls=spent.calls)
        lent.in_flight = item.in_flight
        if item.ended:
            self._close(holder, item.slice, lent)
        self._retry(budget.ledger)

    def lost(self, holder: SliceHolder) -> None:
        """``holder``'s worker is gone: its calls in flight may have been
        served, so they are charged as reserved; the rest goes back."""
        for key, lent in list(holder.lent.items()):
            budget = lent.budget
            for spent in lent.in_flight:
                budget.spend(
                    budget.ledger, spent.model, spent.usage, calls=spent.calls, cancelled=True
                )
            lent.in_flight = []
            self._close(holder, key, lent)
            self._retry(budget.ledger)

    def _close(self, holder: SliceHolder, key: int, lent: Lent) -> None:
        lent.budget.release()
        holder.lent.pop(key, None)
        run = lent.budget.ledger
        lents = self._by_run.get(run, [])
        if lent in lents:
            lents.remove(lent)
        if not lents:
            self._by_run.pop(run, None)
        pending = [(w, i) for w, i in self._pending.get(run, []) if w is not lent]
        if pending:
            self._pending[run] = pending
        else:
            self._pending.pop(run, None)

    def _retry(self, run: BudgetLedger) -> None:
        """Answer the waiting asks of ``run`` that now can be, in order."""
        pending = self._pending.get(run)
        if not pending:
            return
        still: list[tuple[Lent, SliceAsk]] = []
        for lent, item in pending:
            answer = self._grant(lent, item)
            if answer is None:
                still.append((lent, item))
                continue
            lent.waiting = False
            lent.holder.send([answer])
        if still:
            self._pending[run] = still
        else:
            self._pending.pop(run, None)


def _pico(run: BudgetLedger, item: SliceAsk, prompt: int, priced: bool) -> int:
    """The worst case in pico-USD of a call like ``item``'s with ``prompt``
    (0 when the run has no money cap)."""
    if not priced:
        return 0
    usage = Usage(prompt_tokens=prompt, completion_tokens=item.n * item.max_tokens)
    return run.price_pico(item.model, usage)


def _refused(item: SliceAsk, refused: BudgetExceeded) -> SliceGranted:
    return SliceGranted(id=item.id, slice=item.slice, refused=str(refused), limit=refused.limit)


__all__ = ["Lent", "SliceGrants", "SliceHolder"]
