"""Budget slices leased to rollout workers (``RunSlice`` on a worker,
``SliceGrants`` on the driver, ``BudgetSlice`` on the run's ledger),
with the driver's books and each worker's slice wired in-process: a
cap split across two workers ends with exactly the cap spent and never
more, the driver on few of the calls' path (a worker asks for more before
its slice runs out); a lost worker's slice goes
back, its calls in flight charged as reserved and nothing else; near the
cap the slices shrink, a worker that cannot get one asks per call, and a
call that does not fit waits for another worker's unspent budget instead
of being refused while it is held."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import Future

import pytest

from agentrt.aggregators._aggregator import nothing_left
from agentrt.protocols import Budget, Usage
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable, usd_to_pico
from agentrt.runtime.kernel._errors import BudgetExceeded
from agentrt.runtime.placement._worker_books import (
    PlacedRollouts,
    PooledWorker,
    RunEntry,
    WorkerBooks,
)
from agentrt.runtime.placement._worker_slice import SLICE_CALLS, DriverLedger, RunSlice
from agentrt.runtime.placement._worker_wire import (
    Outbound,
    Reply,
    SliceAsk,
    SliceGranted,
    SliceReport,
)
from tests._support.placement import PRICES


class Wire:
    """One worker's channel to the driver's books, in-process: an item is
    booked when posted, a touched slice reports at once, and the answers
    come straight back (a waiting call's too, unless the driver defers it:
    then ``send`` brings it, from another worker's booking)."""

    def __init__(self, books: WorkerBooks, prices: PriceTable, driver: threading.Lock) -> None:
        self.books = books
        self._ids = itertools.count(1)
        self._futures: dict[int, Future[SliceGranted]] = {}
        self._driver = driver  # the driver books one item at a time, as its loop does
        self.slice = RunSlice(self, next(self._ids), prices)
        self.items: list[Outbound] = []
        self.deferred = threading.Event()
        """Set when the driver deferred a waiting ask."""
        books.sends_with(self.deliver)

    def next_id(self) -> int:
        return next(self._ids)

    def post(self, item: Outbound) -> None:
        with self._driver:
            self.items.append(item)
            answers = self.books.book([item])
            if isinstance(item, SliceAsk) and item.wait and not answers:
                self.deferred.set()
        self.deliver(answers)

    def touch(self, slice_: RunSlice) -> None:
        report = slice_.report()
        if report is not None:
            self.post(report)

    def expect_granted(self, rid: int) -> Future[SliceGranted]:
        future: Future[SliceGranted] = Future()
        self._futures[rid] = future
        return future

    def deliver(self, replies: list[Reply]) -> None:
        for reply in replies:
            assert isinstance(reply, SliceGranted)
            self.slice.granted(reply)
            future = self._futures.pop(reply.id, None)
            if future is not None:
                future.set_result(reply)

    def end(self) -> None:
        report = self.slice.report(ended=True)
        assert report is not None
        self.post(report)


def placement(run: BudgetLedger, rollouts: int) -> tuple[PlacedRollouts[PooledWorker], list[str]]:
    """The driver's live maps with ``rollouts`` rollouts of ``run`` in flight."""
    placed: PlacedRollouts[PooledWorker] = PlacedRollouts()
    entry: RunEntry[PooledWorker] = RunEntry(emit=_no_emit, active=rollouts)
    keys = [f"run-{i}" for i in range(rollouts)]
    for i, key in enumerate(keys):
        placed.ledgers[key] = run.child(str(i))
        placed.entries[key] = entry
    return placed, keys


async def _no_emit(event: object) -> None:
    raise AssertionError("no event here")


def workers(placed: PlacedRollouts[PooledWorker], count: int, prices: PriceTable) -> list[Wire]:
    driver = threading.Lock()
    return [Wire(WorkerBooks(placed.grants), prices, driver) for _ in range(count)]


def call(upstream: DriverLedger) -> None:
    """A call of prompt 100 and up to 50 tokens that used 60 and 10."""
    handle = upstream.reserve("sim", 100, 50, 1)
    upstream.charge(handle, Usage(prompt_tokens=60, completion_tokens=10))


def calls_until_refused(
    wires: list[Wire], keys: list[str], run: BudgetLedger, cap: Budget
) -> list[int]:
    """Each worker, in a thread of its own, makes calls for its rollout
    (all a first one before any goes on) until the run refuses one; after
    each the run's spent and reserved stay within ``cap``.  Calls made per
    worker."""
    made = [0] * len(wires)
    broken: list[AssertionError] = []
    started = threading.Barrier(len(wires), timeout=60)

    def rollout(i: int) -> None:
        upstream = DriverLedger(wires[i].slice, wires[i], keys[i])
        call(upstream)  # each worker's first call before the others go on
        made[i] += 1
        started.wait()
        while True:
            try:
                call(upstream)
            except BudgetExceeded:
                return
            made[i] += 1
            snap = run.snapshot()
            try:
                if cap.max_model_calls is not None:
                    assert snap.spent.model_calls + snap.in_flight <= cap.max_model_calls
                if cap.max_tokens is not None:
                    assert snap.spent.usage.total_tokens + snap.reserved_tokens <= cap.max_tokens
                if cap.max_usd is not None:
                    assert snap.spent_pico + snap.reserved_pico <= usd_to_pico(cap.max_usd)
            except AssertionError as error:
                broken.append(error)
                return

    threads = [threading.Thread(target=rollout, args=(i,)) for i in range(len(wires))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not broken, broken
    assert not any(t.is_alive() for t in threads)
    return made


@pytest.mark.parametrize(
    "cap",
    [Budget(max_model_calls=150), Budget(max_tokens=149 * 70 + 150), Budget(max_usd=0.0152)],
    ids=["calls", "tokens", "usd"],
)
def test_a_cap_split_across_two_workers_is_spent_exactly(cap: Budget) -> None:
    run = BudgetLedger("run", cap, PRICES)
    placed, keys = placement(run, 2)
    wires = workers(placed, 2, PRICES)
    made = calls_until_refused(wires, keys, run, cap)
    for wire in wires:
        wire.end()
    snap = run.snapshot()
    # Exactly what one ledger alone admits: 150 calls of 70 tokens (and
    # $0.0001), the 151st's worst case (150 tokens, $0.0003) over the cap.
    assert snap.spent.model_calls == sum(made) == 150
    assert snap.spent.usage.total_tokens == 150 * 70
    assert min(made) > 0, made
    # Nothing stays reserved once both slices ended.
    assert (snap.in_flight, snap.reserved_tokens, snap.reserved_pico) == (0, 0, 0)
    # The driver was on the path of few calls: the others took their
    # budget from the worker's slice.
    waits = sum(w.books.admissions for w in wires)
    assert waits < sum(made) // 4, waits


def test_an_uncapped_run_is_booked_without_a_wait_after_the_first_call() -> None:
    run = BudgetLedger("run", None, PRICES)
    placed, keys = placement(run, 1)
    (wire,) = workers(placed, 1, PRICES)
    upstream = DriverLedger(wire.slice, wire, keys[0])
    for _ in range(100):
        handle = upstream.reserve("sim", 100, 50, 1)
        upstream.charge(handle, Usage(prompt_tokens=60, completion_tokens=10))
    assert wire.books.admissions == 1
    assert upstream.headroom() is None  # nothing caps the run
    asks = [item for item in wire.items if not isinstance(item, SliceReport)]
    assert len(asks) == 1, asks
    wire.end()
    assert run.snapshot().spent.model_calls == 100
    assert run.snapshot().spent.usage.total_tokens == 7000


def test_a_worker_asks_for_more_before_its_slice_runs_out() -> None:
    run = BudgetLedger("run", Budget(max_model_calls=1000), PRICES)
    placed, keys = placement(run, 1)
    (wire,) = workers(placed, 1, PRICES)
    upstream = DriverLedger(wire.slice, wire, keys[0])
    for _ in range(200):  # six slices' worth
        call(upstream)
    # Only the first call waited: more was asked for, without waiting, each
    # time less than half a slice was left.
    assert wire.books.admissions == 1
    asks = [i for i in wire.items if isinstance(i, SliceAsk)]
    assert len(asks) > 200 // SLICE_CALLS
    wire.end()
    assert run.snapshot().spent.model_calls == 200
    assert run.snapshot().in_flight == 0


def test_a_lost_worker_gives_its_slice_back_charging_its_calls_in_flight() -> None:
    cap = Budget(max_tokens=100_000)
    run = BudgetLedger("run", cap, PRICES)
    placed, keys = placement(run, 2)
    lost, other = workers(placed, 2, PRICES)
    upstream = DriverLedger(lost.slice, lost, keys[0])
    done = upstream.reserve("sim", 100, 50, 1)
    upstream.charge(done, Usage(prompt_tokens=60, completion_tokens=10))
    flying = [upstream.reserve("sim", 100, 50, 1) for _ in range(2)]
    released = upstream.reserve("sim", 100, 50, 1)
    upstream.release(released)
    assert run.snapshot().reserved_tokens > 2 * 150  # a slice more than the calls in flight
    assert len(flying) == 2
    lost.books.lost()
    snap = run.snapshot()
    # The done call as charged, the two in flight at their worst case
    # (prompt 100 + 50), the released one not at all; the rest back.
    assert snap.spent.model_calls == 3
    assert snap.spent.usage.total_tokens == 70 + 2 * 150
    assert snap.cancelled_calls == 2
    assert (snap.in_flight, snap.reserved_tokens) == (0, 0)
    assert snap.left_tokens == 100_000 - 370
    # The other worker may take of all that is left: its call (150) and
    # a slice of 32 calls more (a prompt of 200 and 50), less what it spent.
    call(DriverLedger(other.slice, other, keys[1]))
    assert run.snapshot().reserved_tokens == 150 + 32 * (200 + 50) - 70


def test_near_the_cap_slices_shrink_and_a_worker_asks_per_call() -> None:
    cap = Budget(max_model_calls=10)
    run = BudgetLedger("run", cap, PRICES)
    placed, keys = placement(run, 4)
    first, second = workers(placed, 2, PRICES)
    call(DriverLedger(first.slice, first, keys[0]))
    # 10 calls, 4 rollouts in flight: the first call and 5 more (a call
    # is left for each rollout), not the slice of 32 it asked for.
    assert run.snapshot().in_flight == 5
    assert SLICE_CALLS > 5
    # The second worker gets its call alone, and asks for each.
    up2 = DriverLedger(second.slice, second, keys[1])
    for _ in range(3):
        call(up2)
    assert second.books.admissions == 3
    assert run.snapshot().in_flight == 5  # the first worker's slice, untouched


def test_a_call_that_does_not_fit_waits_for_another_workers_unspent_slice() -> None:
    cap = Budget(max_model_calls=40)
    run = BudgetLedger("run", cap, PRICES)
    placed, keys = placement(run, 2)
    holder, asker = workers(placed, 2, PRICES)
    call(DriverLedger(holder.slice, holder, keys[0]))
    held = run.snapshot().in_flight  # the holder's slice, unspent
    assert held > 0
    up2 = DriverLedger(asker.slice, asker, keys[1])
    # The asker spends what is left beyond the holder's slice...
    for _ in range(40 - 1 - held):
        call(up2)
    # ... and its next call waits (not refused) while the holder holds budget.
    outcome: list[object] = []

    def last() -> None:
        try:
            call(up2)
        except BudgetExceeded as refused:
            outcome.append(refused)
            return
        outcome.append("made")

    waiting = threading.Thread(target=last)
    waiting.start()
    assert asker.deferred.wait(timeout=30)
    assert not outcome
    holder.end()  # its rollouts ended: the slice goes back, the call goes on
    waiting.join(timeout=30)
    assert outcome == ["made"]
    asker.end()
    snap = run.snapshot()
    assert snap.spent.model_calls == 40 - held + 1
    assert snap.in_flight == 0


def test_what_a_slice_holds_unspent_is_still_left_for_the_run() -> None:
    run = BudgetLedger("run", Budget(max_model_calls=6), PRICES)
    placed, keys = placement(run, 1)
    (wire,) = workers(placed, 1, PRICES)
    upstream = DriverLedger(wire.slice, wire, keys[0])
    call(upstream)
    # The worker's slice took its call and 4 more (one is left for each
    # rollout in flight), and the driver's own call takes the last.
    own = run.reserve("sim", 100, 50)
    assert run.headroom().calls == 0  # nothing more to reserve on the driver...
    # ... yet the run has not spent its budget: the slice's 4 calls are
    # still the run's to make (the driver's own in flight is not).
    assert run.headroom(lent=True).calls == 4
    assert nothing_left(run) is None
    for _ in range(4):
        call(upstream)
    assert nothing_left(run) == "max_model_calls"
    own.release()
    assert run.headroom(lent=True).calls == run.headroom().calls == 1
    wire.end()
    assert run.snapshot().spent.model_calls == 5
