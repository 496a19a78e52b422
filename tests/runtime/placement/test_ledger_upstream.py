"""A rollout ledger whose calls are booked upstream too (the run's ledger on
the driver, for a rollout on a Ray worker): every reservation, charge,
release and restore reaches the upstream in order, its refusal is the
ledger's, and its headroom bounds the ledger's."""

from __future__ import annotations

import pytest

from agentrt.protocols import Budget, Usage
from agentrt.runtime.budget._ledger import BudgetLedger, Headroom
from agentrt.runtime.kernel._errors import BudgetExceeded


class Upstream:
    """The run's ledger, as a worker sees it: a real capped ledger."""

    def __init__(self, budget: Budget) -> None:
        self.ledger = BudgetLedger("run", budget)
        self.held: dict[int, object] = {}
        self.calls: list[str] = []

    def reserve(self, model: str, prompt_tokens: int, max_tokens: int, n: int) -> int:
        self.calls.append(f"reserve {model} {prompt_tokens} {max_tokens} {n}")
        reservation = self.ledger.reserve(model, prompt_tokens, max_tokens, n=n)
        self.held[len(self.calls)] = reservation
        return len(self.calls)

    def charge(self, handle: int, usage: Usage | None) -> None:
        self.calls.append(f"charge {handle} {'reserved' if usage is None else usage.total_tokens}")
        held = self.held.pop(handle)
        if usage is None:
            held.charge_reserved()  # type: ignore[attr-defined]
        else:
            held.charge(usage)  # type: ignore[attr-defined]

    def release(self, handle: int) -> None:
        self.calls.append(f"release {handle}")
        self.held.pop(handle).release()  # type: ignore[attr-defined]

    def restore(self, model: str, usage: Usage) -> None:
        self.calls.append(f"restore {model} {usage.total_tokens}")
        self.ledger.restore(model, usage)

    def headroom(self) -> Headroom | None:
        return self.ledger.headroom()


def test_every_call_is_booked_upstream_and_refused_there() -> None:
    far = Upstream(Budget(max_tokens=1000))
    root = BudgetLedger("run/r0", upstream=far)
    rollout = root.child("sub")  # a sub-agent's ledger books upstream too
    first = rollout.reserve("m", 100, 200)
    first.charge(Usage(prompt_tokens=90, completion_tokens=10))
    second = root.reserve("m", 100, 200)
    second.release()
    root.restore("m", Usage(prompt_tokens=5, completion_tokens=5))
    third = root.reserve("m", 100, 200)
    third.charge_reserved()
    assert far.calls == [
        "reserve m 100 200 1",
        "charge 1 100",
        "reserve m 100 200 1",
        "release 3",
        "restore m 10",
        "reserve m 100 200 1",
        "charge 6 reserved",
    ]
    assert far.ledger.spent.usage.total_tokens == root.spent.usage.total_tokens == 410
    # The upstream's cap is the ledger's: 590 tokens left there, none cap here.
    assert root.headroom().tokens == 590
    with pytest.raises(BudgetExceeded, match="max_tokens"):
        root.reserve("m", 500, 200)
    # A refused call holds nothing, here or there.
    assert root.snapshot().in_flight == 0
    assert far.ledger.snapshot().in_flight == 0
