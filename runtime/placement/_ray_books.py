"""The driver's books for one rollout worker: ``WorkerBooks`` books the
ledger items a worker sends (reservations, charges, releases, restores)
on the runs' ledgers, in order, and charges what was in flight as reserved
when the worker is lost; ``answer_bank_call`` runs a worker's call on the
run's memory bank.  Must not know how items travel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import final

from agentrt.protocols._usage import Usage
from agentrt.runtime.budget._ledger import BudgetLedger, Reservation
from agentrt.runtime.kernel._errors import BudgetExceeded, UserError
from agentrt.runtime.memory._bank import MemoryStore
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.placement._ray_wire import (
    BankAnswer,
    BankGet,
    BankOut,
    BankPromote,
    BankPut,
    BankSearch,
    ChargeOut,
    Outbound,
    ReleaseOut,
    Reserved,
    ReserveOut,
    RestoreOut,
)

log = get_logger(__name__)


@final
class WorkerBooks:
    """One worker's reservations on the ledgers of ``ledgers`` (the
    placement's live map: rollout id -> its ledger on the driver)."""

    def __init__(self, ledgers: Mapping[str, BudgetLedger]) -> None:
        self._ledgers = ledgers
        self._held: dict[int, Reservation] = {}
        self._unbooked: dict[int, tuple[str, str]] = {}
        """Calls booked without waiting that the ledger refused (ledger, model)."""

    def book(self, items: list[Outbound]) -> list[Reserved]:
        """Book the ledger items of ``items`` in order; the answers the
        worker waits for.  A bad item is logged (a waiting one answered)."""
        answers: list[Reserved] = []
        for item in items:
            try:
                answer = self._book_one(item)
            except Exception as error:
                log.error("placed_ledger_item_failed", item=type(item).__name__, error=repr(error))
                if isinstance(item, ReserveOut) and item.wait:
                    answers.append(Reserved(id=item.id, refused=repr(error), kind="invalid"))
                continue
            if answer is not None:
                answers.append(answer)
        return answers

    def lost(self) -> None:
        """The worker is gone: its calls in flight may have been served,
        so they are charged as reserved."""
        for reservation in self._held.values():
            reservation.charge_reserved()
        self._held.clear()

    def _book_one(self, item: Outbound) -> Reserved | None:
        match item:
            case ReserveOut():
                answer = self._reserve(item)
                return answer if item.wait else None
            case ChargeOut(id=rid, usage=usage):
                self._charge(rid, usage)
            case ReleaseOut(id=rid):
                held = self._held.pop(rid, None)
                self._unbooked.pop(rid, None)
                if held is not None:
                    held.release()
            case RestoreOut(ledger=key, model=model, usage=usage):
                ledger = self._ledgers.get(key)
                if ledger is not None:
                    ledger.restore(model, usage)
        return None

    def _reserve(self, item: ReserveOut) -> Reserved:
        ledger = self._ledgers.get(item.ledger)
        if ledger is None:
            return Reserved(id=item.id, refused=f"rollout {item.ledger} has ended", kind="invalid")
        try:
            held = ledger.reserve(item.model, item.prompt_tokens, item.max_tokens, n=item.n)
        except BudgetExceeded as refused:
            if not item.wait:
                self._unbooked[item.id] = (item.ledger, item.model)
            return Reserved(
                id=item.id, refused=str(refused), limit=refused.limit, headroom=ledger.headroom()
            )
        except UserError as refused:
            if not item.wait:
                self._unbooked[item.id] = (item.ledger, item.model)
            return Reserved(id=item.id, refused=str(refused), kind="invalid")
        self._held[item.id] = held
        return Reserved(id=item.id, headroom=ledger.headroom() if item.wait else None)

    def _charge(self, rid: int, usage: Usage | None) -> None:
        held = self._held.pop(rid, None)
        if held is not None:
            if usage is None:
                held.charge_reserved()
            else:
                held.charge(usage)
            return
        unbooked = self._unbooked.pop(rid, None)
        if unbooked is not None and usage is not None:
            # Made without the driver's admission (an uncapped run's ledger
            # that refused late): the money is spent either way.
            ledger = self._ledgers.get(unbooked[0])
            if ledger is not None:
                ledger.restore(unbooked[1], usage)


async def answer_bank_call(bank: MemoryStore | None, item: BankOut) -> BankAnswer:
    """Run ``item``'s call on ``bank``; its answer (``error`` when it raised)."""
    if bank is None:
        return BankAnswer(id=item.id, error="this Runtime has no memory bank")
    try:
        match item.call:
            case BankSearch(match=match, owners=owners, k=k):
                return BankAnswer(id=item.id, hits=await bank.search(match, owners, k=k))
            case BankGet(item_id=item_id, owners=owners, count_hit=count_hit):
                found = await bank.get(item_id, owners, count_hit=count_hit)
                return BankAnswer(id=item.id, item=found)
            case BankPut(item=new):
                return BankAnswer(id=item.id, number=await bank.put(new))
            case BankPromote(source=source, target=target, min_hits=hits, verified_only=only):
                promoted = await bank.promote(source, target, min_hits=hits, verified_only=only)
                return BankAnswer(id=item.id, number=promoted)
    except Exception as error:
        return BankAnswer(id=item.id, error=f"{type(error).__name__}: {error}")
    raise AssertionError("unreachable")


__all__ = ["WorkerBooks", "answer_bank_call"]
