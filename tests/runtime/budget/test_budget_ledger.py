"""The budget ledger: reservations, caps, charging, release, the ledger tree."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal

import anyio
import pytest

from agentrt.protocols import Budget, BudgetUpdated, Usage, decode_event, encode
from agentrt.runtime.budget._ledger import BudgetLedger, BudgetSnapshot
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.kernel._errors import (
    BudgetExceeded,
    ConfigError,
    InvalidRequestError,
    UnknownModelError,
)

# $1 / $2 per 1M tokens: 1,000,000 / 2,000,000 pico-USD per token.
PRICES = PriceTable(
    models={
        "m": ModelPrice(
            prompt_usd_per_mtok=Decimal("1"),
            completion_usd_per_mtok=Decimal("2"),
            cached_prompt_usd_per_mtok=Decimal("0.5"),
        )
    }
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_charge_records_reported_usage_exactly() -> None:
    ledger = BudgetLedger("run", Budget(max_tokens=10_000), PRICES)
    reservation = ledger.reserve("m", prompt_tokens=1000, max_tokens=500)
    assert reservation.tokens == 1500
    assert reservation.pico == 1000 * 10**6 + 500 * 2 * 10**6
    mid = ledger.snapshot()
    assert (mid.reserved_tokens, mid.in_flight, mid.left_tokens) == (1500, 1, 8500)

    cost = reservation.charge(
        Usage(prompt_tokens=900, completion_tokens=321, cached_prompt_tokens=400)
    )
    expected_pico = 500 * 10**6 + 400 * 5 * 10**5 + 321 * 2 * 10**6
    snap = ledger.snapshot()
    assert snap.spent_pico == expected_pico
    assert ledger.spent_usd == Decimal(expected_pico) / 10**12
    assert cost.usd == expected_pico / 10**12
    assert cost.model_calls == 1
    assert snap.spent.usage == Usage(
        prompt_tokens=900, completion_tokens=321, cached_prompt_tokens=400
    )
    assert (snap.reserved_tokens, snap.reserved_pico, snap.in_flight) == (0, 0, 0)
    assert snap.spent.model_calls == 1
    assert snap.left_tokens == 10_000 - 1221


def test_token_cap_error_names_cap_need_and_left() -> None:
    ledger = BudgetLedger("run", Budget(max_tokens=1000), PRICES)
    held = ledger.reserve("m", prompt_tokens=400, max_tokens=200)
    with pytest.raises(BudgetExceeded) as info:
        ledger.reserve("m", prompt_tokens=300, max_tokens=200)
    assert info.value.limit == "max_tokens"
    message = str(info.value)
    assert "'run'" in message
    assert "max_tokens cap (1,000 tokens)" in message
    assert "needs up to 500 tokens" in message
    assert "400 tokens left" in message
    # A refused reservation books nothing.
    assert ledger.snapshot().reserved_tokens == 600
    held.release()
    ledger.reserve("m", prompt_tokens=300, max_tokens=200).release()


def test_usd_cap_counts_worst_case_at_full_prompt_price() -> None:
    # Worst case of 1000 prompt + 1000 completion = $0.003; the cap is $0.005.
    ledger = BudgetLedger("run", Budget(max_usd=0.005), PRICES)
    first = ledger.reserve("m", prompt_tokens=1000, max_tokens=1000)
    with pytest.raises(BudgetExceeded) as info:
        ledger.reserve("m", prompt_tokens=1000, max_tokens=1000)
    assert info.value.limit == "max_usd"
    assert "needs up to $0.003000" in str(info.value)
    assert "$0.002000 left" in str(info.value)
    # Charged below the worst case: the difference comes back.
    first.charge(Usage(prompt_tokens=1000, completion_tokens=0))
    ledger.reserve("m", prompt_tokens=1000, max_tokens=1000).release()


def test_model_call_cap_counts_calls_in_flight() -> None:
    ledger = BudgetLedger("run", Budget(max_model_calls=2))
    a = ledger.reserve("any", 10, 10)
    b = ledger.reserve("any", 10, 10)
    with pytest.raises(BudgetExceeded) as info:
        ledger.reserve("any", 10, 10)
    assert info.value.limit == "max_model_calls"
    a.release()
    c = ledger.reserve("any", 10, 10)
    b.charge(Usage(prompt_tokens=1))
    c.charge(Usage(prompt_tokens=1))
    with pytest.raises(BudgetExceeded):
        ledger.reserve("any", 10, 10)
    assert ledger.snapshot().spent.model_calls == 2


def test_wall_clock_cap_and_finish() -> None:
    clock = FakeClock()
    ledger = BudgetLedger("run", Budget(max_wall_seconds=5.0), clock=clock)
    ledger.reserve("x", 1, 1).release()
    clock.now += 4.0
    assert ledger.snapshot().left_seconds == pytest.approx(1.0)
    clock.now += 1.0
    with pytest.raises(BudgetExceeded) as info:
        ledger.reserve("x", 1, 1)
    assert info.value.limit == "max_wall_seconds"

    other = BudgetLedger("other", clock=clock)
    clock.now += 2.0
    other.finish()
    clock.now += 50.0
    assert other.snapshot().spent.wall_seconds == pytest.approx(2.0)
    with pytest.raises(InvalidRequestError, match="finished"):
        other.reserve("x", 1, 1)


@pytest.mark.anyio
async def test_reservation_released_on_exception() -> None:
    ledger = BudgetLedger("run", Budget(max_tokens=100))

    class Boom(Exception):
        pass

    async def step() -> None:
        async with ledger.reserve("m", 50, 50):
            assert ledger.snapshot().reserved_tokens == 100
            raise Boom

    with pytest.raises(Boom):
        await step()
    snap = ledger.snapshot()
    assert (snap.reserved_tokens, snap.in_flight, snap.spent.model_calls) == (0, 0, 0)
    # The whole cap is available again.
    ledger.reserve("m", 50, 50).release()


@pytest.mark.anyio
async def test_a_call_cancelled_in_flight_is_charged_as_reserved() -> None:
    """The server may have served it and nobody will say: spend is never
    under-reported, and the cap still holds (the worst case was admitted)."""
    ledger = BudgetLedger("run", Budget(max_tokens=1000))
    both_in = anyio.Event()
    inside = 0

    async def rollout() -> None:
        nonlocal inside
        async with ledger.reserve("m", 100, 400):
            inside += 1
            if inside == 2:
                both_in.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(rollout)
        tg.start_soon(rollout)
        with anyio.fail_after(5):
            await both_in.wait()
        assert ledger.snapshot().reserved_tokens == 1000
        tg.cancel_scope.cancel()
    snap = ledger.snapshot()
    assert (snap.reserved_tokens, snap.in_flight) == (0, 0)
    assert snap.spent.usage == Usage(prompt_tokens=200, completion_tokens=800)
    assert (snap.spent.model_calls, snap.cancelled_calls) == (2, 2)
    assert snap.spent.usage.total_tokens <= 1000
    # An exception is not a cancellation: that call is released, unspent.
    with pytest.raises(RuntimeError), ledger.reserve("m", 0, 0):
        raise RuntimeError("the backend failed")
    assert ledger.snapshot().spent.model_calls == 2


@pytest.mark.anyio
async def test_a_counted_call_cancelled_in_flight_is_charged_what_it_consumed() -> None:
    """A caller that streamed the call and counted 7 tokens: the cancelled
    call is charged its prompt as the last reply reported prompts like it
    (here 80 of an estimated 100) and those 7, not its 400."""
    ledger = BudgetLedger("run", Budget(max_tokens=2000))
    with ledger.reserve("m", 100, 10) as first:
        first.charge(Usage(prompt_tokens=80, completion_tokens=5))
    started = anyio.Event()

    async def call() -> None:
        async with ledger.reserve("m", 100, 400) as reservation:
            reservation.streamed = 7
            started.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(5):
            await started.wait()
        tg.cancel_scope.cancel()
    snap = ledger.snapshot()
    assert snap.spent.usage == Usage(prompt_tokens=160, completion_tokens=12)
    assert (snap.spent.model_calls, snap.cancelled_calls, snap.in_flight) == (2, 1, 0)


def test_a_model_s_first_call_cancelled_is_charged_up_to_its_prompt_bound() -> None:
    """Before a reply of the model measured a prompt, the estimate may be
    short of what the server counted: a cancelled call is charged up to the
    caller's bound on its prompt, as far as the caps leave room; once a
    reply measured one, the calibrated estimate as before."""

    def cancelled(ledger: BudgetLedger, streamed: int | None, bound: int) -> Usage:
        reservation = ledger.reserve("m", 100, 400)
        reservation.streamed = streamed
        reservation.prompt_bound = lambda: bound
        return reservation.end(asyncio.CancelledError()).usage

    ledger = BudgetLedger("run")
    assert cancelled(ledger, None, 300) == Usage(prompt_tokens=300, completion_tokens=400)
    assert cancelled(ledger, 7, 300) == Usage(prompt_tokens=300, completion_tokens=7)
    assert cancelled(ledger, None, 60) == Usage(prompt_tokens=100, completion_tokens=400)
    # Under a cap, no further than it: 100 + 400 reserved, 600 left beside.
    capped = BudgetLedger("capped", Budget(max_tokens=1100))
    assert cancelled(capped, None, 9000) == Usage(prompt_tokens=700, completion_tokens=400)
    assert capped.snapshot().spent.usage.total_tokens == 1100
    assert capped.snapshot().overruns == 1  # charged past what was reserved
    # Once a reply measured the model's prompts, the bound is not asked for.
    with ledger.reserve("m", 100, 10) as measured:
        measured.charge(Usage(prompt_tokens=100, completion_tokens=5))

    def unasked() -> int:
        raise AssertionError("the bound was computed")

    reservation = ledger.reserve("m", 100, 400)
    reservation.prompt_bound = unasked
    usage = reservation.end(asyncio.CancelledError()).usage
    assert usage == Usage(prompt_tokens=100, completion_tokens=400)


def test_a_streamed_call_that_fails_after_tokens_came_is_charged_them() -> None:
    ledger = BudgetLedger("run", Budget(max_tokens=2000))

    def fail(streamed: int, error: Exception) -> None:
        with ledger.reserve("m", 100, 400) as reservation:
            reservation.streamed = streamed
            raise error

    with pytest.raises(TimeoutError):
        fail(30, TimeoutError())  # the call's deadline, mid-stream
    with pytest.raises(ConnectionError):
        fail(0, ConnectionError())  # before a token came: it cost nothing
    snap = ledger.snapshot()
    assert snap.spent.usage == Usage(prompt_tokens=100, completion_tokens=30)
    assert (snap.spent.model_calls, snap.cancelled_calls, snap.in_flight) == (1, 1, 0)


def test_a_call_that_does_not_fit_is_lowered_to_its_fair_share() -> None:
    """8 rollouts announced under 4,000 tokens: each call gets 500 (its
    prompt and 400 of the 1,000 asked for) while the others have not asked;
    a finished rollout no longer shares; only a call that cannot get
    ``min_tokens`` is refused, and no cap is crossed."""
    run = BudgetLedger("run", Budget(max_tokens=4000))
    run.expect_children(8)
    rollouts = [run.child(f"r{i}") for i in range(8)]
    first = rollouts[0].reserve("m", 100, 1000, min_tokens=32)
    assert (first.max_tokens, first.tokens) == (400, 500)
    # Without ``min_tokens`` a call is never lowered: it fits or is refused.
    strict = rollouts[1].reserve("m", 100, 1000)
    assert strict.max_tokens == 1000
    strict.release()
    held = [r.reserve("m", 100, 1000, min_tokens=32) for r in rollouts[1:]]
    assert [h.max_tokens for h in held] == [400] * 7
    assert run.snapshot().left_tokens == 0
    with pytest.raises(BudgetExceeded, match="max_tokens"):
        rollouts[0].reserve("m", 100, 1000, min_tokens=32)
    # Four rollouts end having used little; the four left share what is free.
    for reservation in [first, *held[:3]]:
        reservation.charge(Usage(prompt_tokens=100, completion_tokens=20))
    for ledger in rollouts[:4]:
        ledger.finish()
    for h in held[3:6]:
        h.charge(Usage(prompt_tokens=100, completion_tokens=20))
    # 4 x 120 + 3 x 120 spent, one call (500) in flight: 2,660 left, and 3
    # rollouts (r4..r6) with none in flight share it with nobody else.
    again = rollouts[4].reserve("m", 100, 1000, min_tokens=32)
    assert again.max_tokens == 2660 // 3 - 100
    # A prompt that leaves less than ``min_tokens`` is refused.
    with pytest.raises(BudgetExceeded):
        rollouts[5].reserve("m", 2660 - again.tokens - 10, 1000, min_tokens=32)
    assert run.snapshot().spent.usage.total_tokens + run.snapshot().reserved_tokens <= 4000


def test_a_usd_cap_lowers_a_call_to_what_its_share_can_pay() -> None:
    run = BudgetLedger("run", Budget(max_usd=0.001), PRICES)  # 1e9 pico
    run.expect_children(2)
    a, b = run.child("a"), run.child("b")
    # Half of $0.001 is 5e8 pico: 100 prompt tokens (1e8) leave 2e8 completion tokens'
    # worth at 2e6 pico each: 200 tokens.
    got = a.reserve("m", 100, 1000, min_tokens=8)
    assert got.max_tokens == 200
    assert b.reserve("m", 100, 1000, min_tokens=8).max_tokens == 200


def test_prompt_estimates_are_calibrated_by_what_the_server_reported() -> None:
    ledger = BudgetLedger("run")
    with ledger.reserve("m", 100, 10) as first:
        assert first.prompt_tokens == 100
        first.charge(Usage(prompt_tokens=150, completion_tokens=1))
    second = ledger.child("r1").reserve("m", 100, 10)  # the tree shares it
    assert second.estimate == 100
    assert second.prompt_tokens >= 150
    second.release()
    assert ledger.reserve("other", 100, 10).prompt_tokens == 100


@pytest.mark.anyio
async def test_charged_reservation_survives_scope_exit() -> None:
    ledger = BudgetLedger("run")
    async with ledger.reserve("m", 10, 10) as reservation:
        reservation.charge(Usage(prompt_tokens=7, completion_tokens=3))
    assert reservation.state == "charged"
    assert ledger.snapshot().spent.usage.total_tokens == 10
    with pytest.raises(InvalidRequestError, match="already charged"):
        reservation.charge(Usage(prompt_tokens=1))
    reservation.release()  # a no-op once charged
    assert ledger.snapshot().spent.usage.total_tokens == 10


def test_child_spend_counts_against_parent_and_caps_nest() -> None:
    run = BudgetLedger("run", Budget(max_tokens=1000), PRICES)
    task_a = run.child("task-a", Budget(max_tokens=600))
    task_b = run.child("task-b")
    assert task_a.name == "run/task-a"

    task_a.reserve("m", 100, 100).charge(Usage(prompt_tokens=100, completion_tokens=50))
    assert run.snapshot().spent.usage.total_tokens == 150
    assert task_b.snapshot().spent.usage.total_tokens == 0

    # The child's own cap binds although the parent has room.
    with pytest.raises(BudgetExceeded, match="'run/task-a'"):
        task_a.reserve("m", 300, 200)
    # The parent's cap binds a child without caps of its own.
    hold = task_b.reserve("m", 400, 400)
    assert task_b.snapshot().left_tokens == 1000 - 150 - 800
    with pytest.raises(BudgetExceeded, match="'run'"):
        task_a.reserve("m", 50, 50)
    hold.charge(Usage(prompt_tokens=400, completion_tokens=10))
    total = run.snapshot()
    assert total.spent.usage.total_tokens == 560
    assert total.spent_pico == task_a.snapshot().spent_pico + task_b.snapshot().spent_pico
    assert [c.name for c in run.children] == ["run/task-a", "run/task-b"]
    with pytest.raises(InvalidRequestError, match="already has a child"):
        run.child("task-a")


def test_server_overrun_is_charged_as_reported() -> None:
    """A server returning more completion tokens than ``max_tokens``: the
    ledger charges what was reported (the truth), counts an overrun, may sit
    above its cap, and refuses every later reservation."""
    ledger = BudgetLedger("run", Budget(max_tokens=1000))
    reservation = ledger.reserve("m", 200, 700)
    cost = reservation.charge(Usage(prompt_tokens=200, completion_tokens=900))
    assert cost.usage.completion_tokens == 900
    snap = ledger.snapshot()
    assert snap.spent.usage.total_tokens == 1100
    assert snap.overruns == 1
    assert snap.left_tokens == 0
    with pytest.raises(BudgetExceeded, match="0 tokens left"):
        ledger.reserve("m", 0, 1)


def test_bad_inputs_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="max_usd cap needs model prices"):
        BudgetLedger("run", Budget(max_usd=1.0))
    with pytest.raises(ValueError, match="max_tokens must be >= 0"):  # refused by Budget itself
        BudgetLedger("run", Budget(max_tokens=-1))
    ledger = BudgetLedger("run", Budget(max_usd=1.0), PRICES)
    with pytest.raises(UnknownModelError, match=r"'gpt-x'.*known: m"):
        ledger.reserve("gpt-x", 10, 10)
    with pytest.raises(InvalidRequestError, match="sizes must be >= 0"):
        ledger.reserve("m", -1, 10)
    reservation = ledger.reserve("m", 10, 10)
    with pytest.raises(InvalidRequestError, match="negative usage"):
        reservation.charge(Usage(prompt_tokens=-5))
    assert reservation.state == "active"
    with pytest.raises(InvalidRequestError, match="names must be non-empty"):
        ledger.child("a/b")


def test_updates_reach_every_ledger_on_the_chain_and_encode_as_events() -> None:
    seen: dict[str, list[BudgetSnapshot]] = {"run": [], "task": []}
    run = BudgetLedger("run", Budget(max_tokens=500), on_update=seen["run"].append)
    task = run.child("t", on_update=seen["task"].append)
    task.reserve("m", 100, 100).charge(Usage(prompt_tokens=80, completion_tokens=20))
    assert [s.reserved_tokens for s in seen["task"]] == [200, 0]
    assert [s.spent.usage.total_tokens for s in seen["run"]] == [0, 100]
    event = seen["run"][-1].to_event("run-1", seq=3)
    decoded = decode_event(encode(event))
    assert isinstance(decoded, BudgetUpdated)
    assert decoded.seq == 3
    assert decoded.left_tokens == 400
    assert decoded.spent.usage.total_tokens == 100


def test_a_failing_update_callback_leaves_no_reservation_behind() -> None:
    def broken(snapshot: BudgetSnapshot) -> None:
        raise RuntimeError("sink is down")

    ledger = BudgetLedger("run", Budget(max_tokens=100), on_update=broken)
    with pytest.raises(RuntimeError, match="sink is down"):
        ledger.reserve("m", 50, 50)
    assert ledger.headroom().tokens == 100


def test_headroom_fraction_is_tightest_share_over_the_chain() -> None:
    run = BudgetLedger("run", Budget(max_tokens=1000, max_model_calls=10))
    task = run.child("t", Budget(max_tokens=400))
    task.reserve("m", 100, 0).charge(Usage(prompt_tokens=100))
    room = task.headroom()
    assert room.tokens == 300
    assert room.calls == 9
    assert room.fraction == pytest.approx(0.75)  # the task's 300 / 400
    assert room.pico is None


def test_accounting_is_safe_from_threads() -> None:
    ledger = BudgetLedger("run", Budget(max_tokens=10**9))
    per_thread, threads = 300, 4

    def work() -> None:
        for i in range(per_thread):
            ledger.reserve("m", 10, 10).charge(Usage(prompt_tokens=i % 7, completion_tokens=1))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    snap = ledger.snapshot()
    assert snap.spent.model_calls == per_thread * threads
    assert snap.spent.usage.prompt_tokens == threads * sum(i % 7 for i in range(per_thread))
    assert (snap.reserved_tokens, snap.in_flight) == (0, 0)


def test_an_unpriced_model_is_free_on_an_uncapped_tree_and_refused_by_a_usd_capped_child() -> None:
    prices = PriceTable(unpriced_free_uncapped=True)
    root = BudgetLedger("run", prices=prices)
    with root.reserve("mystery", 10, 10) as first:  # free, and cached for the tree
        first.charge(Usage(prompt_tokens=10, completion_tokens=10))
    capped = root.child("capped", Budget(max_usd=1.0))
    with pytest.raises(UnknownModelError):
        capped.reserve("mystery", 10, 10)  # the cached free rates are not its
    with root.child("free").reserve("mystery", 10, 10) as again:
        cost = again.charge(Usage(prompt_tokens=10, completion_tokens=10))
    assert cost.usd == 0
    assert root.spent.model_calls == 2
