"""The rollout scheduler: concurrency per backend, early stop, crashes, budget."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import anyio
import pytest

from agentrt.runtime.engine.scheduler import Outcome, RolloutScheduler, majority_certain
from agentrt.runtime.errors import BudgetExceeded

pytestmark = pytest.mark.anyio


async def test_concurrency_limit_per_backend_is_honoured() -> None:
    scheduler = RolloutScheduler({"small": 2}, default_limit=5)
    in_flight = peak = 0

    async def rollout(i: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.01)
        in_flight -= 1
        return i

    result = await scheduler.fan_out(6, rollout, backend="small")
    assert peak == 2
    assert sorted(result.values) == list(range(6))
    peak = 0
    await scheduler.fan_out(6, rollout, backend="other")
    assert peak == 5


async def test_warm_prefix_runs_once_before_any_rollout() -> None:
    calls: list[str] = []

    async def warm() -> None:
        calls.append("warm")

    async def rollout(i: int) -> int:
        calls.append(f"r{i}")
        return i

    await RolloutScheduler().fan_out(3, rollout, warm_prefix=warm)
    assert calls[0] == "warm"
    assert calls.count("warm") == 1
    assert sorted(calls[1:]) == ["r0", "r1", "r2"]


async def test_early_stop_cancels_the_rest_and_leaves_no_task(anyio_backend: str) -> None:
    before = set(asyncio.all_tasks())
    answers = ["A", "A", "A", "B", "B"]
    delays = [0.0, 0.01, 0.02, 5.0, 5.0]
    streamed: list[Outcome[str]] = []

    async def rollout(i: int) -> str:
        await anyio.sleep(delays[i])
        return answers[i]

    async def on_outcome(outcome: Outcome[str]) -> None:
        streamed.append(outcome)

    def stop(finished: Sequence[Outcome[str]], pending: int) -> bool:
        return majority_certain([o.value for o in finished], pending)

    with anyio.fail_after(3):
        result = await RolloutScheduler().fan_out(
            5, rollout, should_stop=stop, on_outcome=on_outcome
        )
    assert result.stopped == "should_stop"
    assert [o.status for o in result.outcomes] == ["succeeded"] * 3 + ["cancelled"] * 2
    assert [o.index for o in streamed] == [0, 1, 2]
    assert set(asyncio.all_tasks()) == before


async def test_a_crashing_rollout_is_recorded_and_the_rest_continue() -> None:
    async def rollout(i: int) -> str:
        await anyio.sleep(0.001 * i)
        if i == 1:
            raise ValueError("boom")
        return f"answer-{i}"

    result = await RolloutScheduler().fan_out(4, rollout)
    assert result.stopped is None
    failed = result.of_status("failed")
    assert [o.index for o in failed] == [1]
    assert isinstance(failed[0].error, ValueError)
    assert result.values == ["answer-0", "answer-2", "answer-3"]


async def test_budget_exhaustion_stops_the_fan_out() -> None:
    started: list[int] = []
    scheduler = RolloutScheduler({"b": 1})

    async def rollout(i: int) -> int:
        started.append(i)
        if i == 1:
            raise BudgetExceeded("token cap reached", limit="max_tokens")
        await anyio.sleep(0.001)
        return i

    result = await scheduler.fan_out(5, rollout, backend="b")
    assert result.stopped == "budget"
    assert started == [0, 1]  # one at a time: nothing after the budget ran out
    assert [o.status for o in result.outcomes] == ["succeeded", "failed"] + ["cancelled"] * 3


async def test_deadline_cancels_what_is_still_running() -> None:
    async def rollout(i: int) -> int:
        await anyio.sleep(0 if i == 0 else 10)
        return i

    result = await RolloutScheduler().fan_out(3, rollout, timeout_s=0.05)
    assert result.stopped == "deadline"
    assert [o.status for o in result.outcomes] == ["succeeded", "cancelled", "cancelled"]


def test_majority_certain() -> None:
    assert majority_certain(["a", "a", "a"], 2)
    assert not majority_certain(["a", "a", "b"], 1)
    assert majority_certain(["a", "a", "b"], 0)
    assert not majority_certain([None, None], 0)
