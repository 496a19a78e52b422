"""``MeteredBackend``: every call reserved on the ledger first, charged
after, released when it fails, charged what it consumed when abandoned."""

from __future__ import annotations

from contextlib import aclosing
from decimal import Decimal

import anyio
import pytest

from agentrt.protocols import (
    Budget,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.kernel._errors import (
    BackendUnavailable,
    BudgetExceeded,
    InvalidRequestError,
    UnknownModelError,
)
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.runtime.models._prompt_estimate import CharEstimator, estimate_request_tokens
from agentrt.testing import ScriptedBackend, ScriptedReply

pytestmark = pytest.mark.anyio

TOOL = ToolSpec(name="lookup", parameters={"type": "object", "properties": {}})


def request(*, max_tokens: int = 50, n: int = 1, model: str | None = None) -> ModelRequest:
    return ModelRequest(
        messages=[SystemMessage(content="You answer briefly."), UserMessage(content="2+2?")],
        model=model,
        tools=[TOOL],
        sampling=SamplingParams(max_tokens=max_tokens),
        n=n,
    )


def worst_case(req: ModelRequest) -> int:
    prompt = estimate_request_tokens(req.messages, req.tools, CharEstimator())
    return prompt + req.n * req.sampling.max_tokens


async def test_a_call_books_its_worst_case_then_is_charged_what_it_used() -> None:
    used = Usage(prompt_tokens=20, completion_tokens=3)
    backend = ScriptedBackend(
        [ScriptedReply(content="4", usage=used), ScriptedReply(content="four")], latency_s=0.05
    )
    ledger = BudgetLedger("run")
    metered = MeteredBackend(backend, ledger)
    req = request(n=2)
    seen: list[tuple[int, int]] = []

    async def watch() -> None:
        await anyio.sleep(0.02)
        snap = ledger.snapshot()
        seen.append((snap.in_flight, snap.reserved_tokens))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        reply = await metered.complete(req)
    # Booked while in flight: the prompt estimate (messages and tools) plus n * max_tokens.
    assert seen == [(1, worst_case(req))]
    assert worst_case(req) > 2 * 50
    snap = ledger.snapshot()
    assert (snap.in_flight, snap.reserved_tokens) == (0, 0)
    # Then charged what the server reported, once.
    assert reply.usage.prompt_tokens == 20
    assert snap.spent.usage == reply.usage
    assert snap.spent.model_calls == 1
    assert metered.spent.usage == reply.usage


async def test_a_call_past_a_cap_never_reaches_the_backend() -> None:
    backend = ScriptedBackend(["4"], on_exhausted="repeat_last")
    req = request(max_tokens=100)
    ledger = BudgetLedger("run", Budget(max_tokens=worst_case(req) - 1))
    with pytest.raises(BudgetExceeded, match="max_tokens"):
        await MeteredBackend(backend, ledger).complete(req)
    assert backend.requests == []
    calls = BudgetLedger("run", Budget(max_model_calls=2))
    metered = MeteredBackend(backend, calls)
    for _ in range(2):
        await metered.complete(req)
    with pytest.raises(BudgetExceeded, match="max_model_calls"):
        await metered.complete(req)
    assert len(backend.requests) == 2 == calls.spent.model_calls


async def test_with_min_tokens_calls_wait_for_room_then_run_lowered_and_cross_no_cap() -> None:
    # Six concurrent calls under a cap that holds two worst cases: without
    # min_tokens four are refused at once; with it they wait for the calls
    # in flight to give back what they did not use, the last ones run with
    # max_tokens lowered to what is left, and only a call that cannot get
    # min_tokens is refused (with nothing in flight).
    used = Usage(prompt_tokens=20, completion_tokens=3)
    backend = ScriptedBackend(
        [ScriptedReply(content="4", usage=used, delay_s=0.001)], on_exhausted="repeat_last"
    )
    req = request(max_tokens=50)
    cap = 2 * worst_case(req) + 10
    ledger = BudgetLedger("run", Budget(max_tokens=cap))
    metered = MeteredBackend(backend, ledger, min_tokens=8)
    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(metered.complete, req)
    assert len(backend.requests) == 6
    asked = [r.sampling.max_tokens for r in backend.requests]
    assert asked[:2] == [50, 50]  # the worst case while it fits
    with pytest.raises(BudgetExceeded, match="max_tokens"):  # noqa: PT012 - calls until refused
        for _ in range(100):
            await metered.complete(req)
    asked = [r.sampling.max_tokens for r in backend.requests]
    assert any(8 <= m < 50 for m in asked), asked  # lowered, never below the floor
    assert min(asked) >= 8, asked
    snap = ledger.snapshot()
    assert snap.spent.usage.total_tokens == len(asked) * used.total_tokens <= cap
    assert (snap.in_flight, snap.reserved_tokens, snap.overruns) == (0, 0, 0)
    # Refused only when not even min_tokens fit.
    assert snap.left_tokens is not None
    assert snap.left_tokens < worst_case(req) - 50 + 8
    with pytest.raises(InvalidRequestError, match="min_tokens"):
        MeteredBackend(backend, ledger, min_tokens=0)


async def test_a_failed_call_is_released_and_a_cancelled_one_charged_as_reserved() -> None:
    down = BackendUnavailable("503", backend="scripted")
    backend = ScriptedBackend([down, ScriptedReply(content="late", delay_s=10.0)])
    ledger = BudgetLedger("run", Budget(max_model_calls=5))
    metered = MeteredBackend(backend, ledger)
    with pytest.raises(BackendUnavailable):
        await metered.complete(request())
    snap = ledger.snapshot()
    assert (snap.in_flight, snap.reserved_tokens, snap.spent.model_calls) == (0, 0, 0)
    with anyio.move_on_after(0.05):
        await metered.complete(request())
    snap = ledger.snapshot()
    assert (snap.in_flight, snap.reserved_tokens, snap.spent.model_calls) == (0, 0, 1)
    assert snap.spent.usage.completion_tokens == request().sampling.max_tokens
    assert snap.left_calls == 4
    assert backend.in_flight == 0


async def test_a_stream_is_charged_on_its_final_delta_and_what_it_consumed_when_abandoned() -> None:
    backend = ScriptedBackend(["one two three four", "five six seven"])
    ledger = BudgetLedger("run")
    metered = MeteredBackend(backend, ledger)
    deltas = [d async for d in metered.stream(request())]
    final = deltas[-1].reply
    assert final is not None
    assert ledger.spent.usage == final.usage
    async with aclosing(metered.stream(request())) as stream:
        async for delta in stream:
            assert delta.content
            assert ledger.snapshot().in_flight == 1
            break
    # One delta received: the abandoned call is charged its prompt (scaled
    # as the first call's was reported) and that token, not its 50.
    snap = ledger.snapshot()
    assert (snap.in_flight, snap.spent.model_calls, snap.cancelled_calls) == (0, 2, 1)
    abandoned = snap.spent.usage.completion_tokens - final.usage.completion_tokens
    assert abandoned == 1
    assert snap.spent.usage.prompt_tokens == 2 * final.usage.prompt_tokens


async def test_the_model_priced_is_the_requests_or_the_backends_first() -> None:
    prices = PriceTable(
        models={
            "small": ModelPrice(prompt_usd_per_mtok=Decimal(1), completion_usd_per_mtok=Decimal(2)),
            "big": ModelPrice(prompt_usd_per_mtok=Decimal(10), completion_usd_per_mtok=Decimal(20)),
        }
    )
    backend = ScriptedBackend(
        [ScriptedReply(content="4", usage=Usage(prompt_tokens=1_000, completion_tokens=500))],
        models=("small", "big"),
        on_exhausted="repeat_last",
    )
    ledger = BudgetLedger("run", prices=prices)
    metered = MeteredBackend(backend, ledger)
    assert metered.default_model == "small"
    await metered.complete(request())
    assert ledger.spent_usd == Decimal("0.002")  # 1000 * $1/M + 500 * $2/M
    await metered.complete(request(model="big"))
    assert ledger.spent_usd == Decimal("0.002") + Decimal("0.02")
    assert MeteredBackend(backend, ledger, model="big").default_model == "big"
    with pytest.raises(UnknownModelError):
        await MeteredBackend(backend, BudgetLedger("r", prices=PriceTable())).complete(request())
    assert len(backend.requests) == 2


async def test_entering_and_leaving_does_not_close_the_wrapped_backend() -> None:
    backend = ScriptedBackend(["a", "b"])
    async with MeteredBackend(backend, BudgetLedger("run")) as metered:
        await metered.complete(request())
    # A ScriptedBackend refuses calls once closed: this one was not closed.
    assert (await backend.complete(request())).choices[0].message.content == "b"
    assert (metered.name, metered.models, metered.max_concurrency) == (
        "scripted",
        ["scripted"],
        None,
    )
    assert repr(metered) == "MeteredBackend('scripted', ledger='run')"
