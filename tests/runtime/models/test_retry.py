"""Retry policy, Retry-After, circuit breaker: as units, and through the
OpenAI backend against in-test aiohttp servers.  Waits are read from the
retry counters, never timed; the breaker's cool-down passes on a clock the
test moves, and the call deadline on one that moves only when it sleeps."""

from __future__ import annotations

import email.utils
import functools
import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from aiohttp import web

from agentrt.protocols import ModelReply, ModelRequest, UserMessage
from agentrt.runtime.kernel._errors import (
    BackendUnavailable,
    InvalidRequestError,
    MalformedReply,
    RateLimited,
)
from agentrt.runtime.models import _retry
from agentrt.runtime.models._retry import (
    TIMER_SLACK_S,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    Retrier,
    RetryCounters,
    RetryPolicy,
    TransientError,
    parse_retry_after,
)
from agentrt.runtime.models.http._http_client import HttpClientConfig
from agentrt.runtime.models.openai import _openai_backend
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend
from tests._support.resets import reset_connection
from tests.runtime.models._loopback import (
    Handler,
    HangsOnce,
    loopback_server,
    retrying_backend,
)

OK = {
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}
ASK = ModelRequest(messages=[UserMessage("hi")])


# --- units ---------------------------------------------------------------------


def test_parse_retry_after_seconds_and_dates() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(7.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0


def test_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(base_delay_s=0.1, multiplier=2, max_delay_s=1.0, jitter=0.5)
    rng = random.Random(1)
    for retry, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        draws = [policy.backoff(retry, rng=rng) for _ in range(200)]
        assert all(ceiling * 0.5 <= d <= ceiling for d in draws), (retry, min(draws), max(draws))
        assert max(draws) - min(draws) > ceiling * 0.3  # it is jittered
    none = RetryPolicy(base_delay_s=0.1, jitter=0)
    assert none.backoff(3) == pytest.approx(0.4)


def test_backoff_honours_retry_after_never_less() -> None:
    policy = RetryPolicy(base_delay_s=5, retry_after_spread=0.1)
    rng = random.Random(2)
    draws = [policy.backoff(1, 0.3, rng) for _ in range(200)]
    # At least what the server asked plus the timer slack, at most the spread on top.
    assert all(0.3 + TIMER_SLACK_S <= d <= 0.33 + TIMER_SLACK_S for d in draws)


def test_retryable_statuses() -> None:
    policy = RetryPolicy()
    assert [s for s in (400, 401, 404, 408, 409, 422, 429) if policy.is_retryable_status(s)] == [
        408,
        409,
        429,
    ]
    assert all(policy.is_retryable_status(s) for s in (500, 502, 503, 504, 599))
    assert not RetryPolicy(retry_server_errors=False).is_retryable_status(503)


def state_of(breaker: CircuitBreaker) -> BreakerState:
    return breaker.state  # a call, so that mypy does not narrow the property


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def breakers_on(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backends built from now on time their breaker's cool-down on ``clock``."""
    monkeypatch.setattr(
        _openai_backend, "CircuitBreaker", functools.partial(CircuitBreaker, clock=clock)
    )


class SleepClock:
    """Stands in for the ``time`` and ``anyio`` modules inside ``_retry``:
    its monotonic clock moves only when a retry sleeps, by what was asked,
    at once; each sleep is kept.  The rest is the real modules'."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = time.monotonic()
        self.slept: list[float] = []
        monkeypatch.setattr(_retry, "time", self)
        monkeypatch.setattr(_retry, "anyio", self)

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await anyio.lowlevel.checkpoint()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name) if hasattr(time, name) else getattr(anyio, name)


def test_breaker_opens_probes_and_closes() -> None:
    clock = Clock()
    breaker = CircuitBreaker(
        BreakerConfig(failure_threshold=3, cooldown_s=10), endpoint="http://e", clock=clock
    )
    for _ in range(2):
        breaker.admit()
        breaker.record_failure()
    breaker.admit()
    breaker.record_success()  # a success resets the count
    for _ in range(3):
        assert state_of(breaker) is BreakerState.CLOSED
        breaker.admit()
        breaker.record_failure()
    assert state_of(breaker) is BreakerState.OPEN
    with pytest.raises(BackendUnavailable, match=r"circuit open .*next probe in 10\.00s"):
        breaker.admit()
    clock.now += 9.9
    with pytest.raises(BackendUnavailable):
        breaker.admit()
    clock.now += 0.1
    assert state_of(breaker) is BreakerState.HALF_OPEN
    breaker.admit()  # the probe
    with pytest.raises(BackendUnavailable, match="probe call is in flight"):
        breaker.admit()
    breaker.record_success()
    assert state_of(breaker) is BreakerState.CLOSED
    breaker.admit()


def test_a_failed_probe_reopens_and_a_cancelled_one_frees_the_slot() -> None:
    clock = Clock()
    breaker = CircuitBreaker(
        BreakerConfig(failure_threshold=1, cooldown_s=5), endpoint="e", clock=clock
    )
    breaker.admit()
    breaker.record_failure()
    clock.now += 5
    breaker.admit()
    breaker.record_failure()  # the probe failed: open for another cool-down
    assert state_of(breaker) is BreakerState.OPEN
    clock.now += 5
    breaker.admit()
    breaker.record_neutral()  # probe cancelled: the next caller probes
    assert state_of(breaker) is BreakerState.HALF_OPEN
    breaker.admit()
    breaker.record_success()
    assert state_of(breaker) is BreakerState.CLOSED


async def drive(retrier: Retrier, outcomes: list[Any]) -> str:
    """A backend's call loop around ``retrier``: each attempt takes the next
    outcome (a ``TransientError`` is raised as a failed attempt)."""
    while True:
        await retrier.begin_attempt()
        outcome = outcomes.pop(0)
        if isinstance(outcome, TransientError):
            await retrier.back_off(outcome)
            continue
        retrier.succeeded()
        return str(outcome)


@pytest.mark.anyio
async def test_a_retrier_counts_and_gives_up() -> None:
    counters = RetryCounters()
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.01)
    outcomes: list[Any] = [
        TransientError(BackendUnavailable("503")),
        TransientError(RateLimited("429", retry_after=0.01), retry_after=0.01),
        "done",
    ]
    assert await drive(Retrier(policy, counters=counters), outcomes) == "done"
    stats = counters.snapshot()
    assert (stats.calls, stats.attempts, stats.retries, stats.retry_after_waits) == (1, 3, 2, 1)

    always_503 = [TransientError(BackendUnavailable("still 503")) for _ in range(4)]
    with pytest.raises(BackendUnavailable, match="still 503"):
        await drive(Retrier(policy, counters=counters), always_503)
    assert counters.snapshot().gave_up == 1
    assert counters.snapshot().attempts == 6
    assert len(always_503) == 1  # three attempts, the policy's cap


@pytest.mark.anyio
async def test_retry_after_beyond_the_deadline_gives_up_at_once() -> None:
    policy = RetryPolicy(max_attempts=5, deadline_s=2)
    counters = RetryCounters()
    throttled = [TransientError(RateLimited("429", retry_after=30), retry_after=30)] * 5
    with pytest.raises(RateLimited):
        await drive(Retrier(policy, counters=counters), throttled)
    stats = counters.snapshot()
    # One attempt, no wait: not the 30 s asked for, nor a part of it.
    assert (stats.attempts, stats.retries, stats.gave_up) == (1, 0, 1)
    assert stats.slept_s == 0


# --- through the backend -------------------------------------------------------------


class Script:
    """A server that answers from a list of (status, headers) then 200s, and
    records when each request arrived."""

    def __init__(self, failures: list[tuple[int, dict[str, str]]]) -> None:
        self.failures = list(failures)
        self.arrivals: list[float] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.arrivals.append(time.monotonic())
        if self.failures:
            status, headers = self.failures.pop(0)
            return web.json_response(
                {"error": {"message": f"scripted {status}"}}, status=status, headers=headers
            )
        if not body.get("stream"):
            return web.json_response(OK)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "ok"}}]}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        return await handler(request)

    async with loopback_server(wrapped) as url:
        yield url


def backend(url: str, **overrides: Any) -> OpenAIBackend:
    return retrying_backend(url, "rt", **overrides)


async def _answer(b: OpenAIBackend, *, streaming: bool) -> ModelReply:
    """``ASK``'s reply, streamed or whole."""
    if not streaming:
        return await b.complete(ASK)
    async with aclosing(b.stream(ASK)) as deltas:
        reply = [d async for d in deltas][-1].reply
    assert reply is not None
    return reply


@pytest.mark.anyio
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
@pytest.mark.parametrize("streaming", [False, True])
async def test_each_retryable_status_is_retried(status: int, streaming: bool) -> None:
    script = Script([(status, {})])
    async with serve(script) as url, backend(url) as b:
        reply = await _answer(b, streaming=streaming)
        assert reply.message.content == "ok"
        assert b.stats.attempts == 2
        assert b.stats.retries == 1
    assert len(script.arrivals) == 2


@pytest.mark.anyio
@pytest.mark.parametrize("header", ["seconds", "http-date"])
async def test_retry_after_is_honoured(header: str) -> None:
    if header == "seconds":
        value, wanted = "0.4", 0.4
    else:
        # HTTP dates have one-second resolution: ask for the next second.
        target = int(time.time()) + 2
        value, wanted = email.utils.formatdate(target, usegmt=True), target - time.time() - 0.05
    script = Script([(429, {"Retry-After": value})])
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0, deadline_s=10)
    async with serve(script) as url, backend(url, retry=policy) as b:
        began = time.time()
        await b.complete(ASK)
        assert b.stats.retry_after_waits == 1
        slept = b.stats.slept_s
    # Never less than asked (the server saw the retry that much later) and
    # no more than the spread on top: the wait the retry chose.
    gap = script.arrivals[1] - script.arrivals[0]
    assert gap >= wanted, (gap, wanted)
    asked = 0.4 if header == "seconds" else target - began
    assert slept <= asked * (1 + policy.retry_after_spread) + TIMER_SLACK_S, (slept, asked)


@pytest.mark.anyio
async def test_503_with_retry_after_is_honoured_too() -> None:
    script = Script([(503, {"Retry-After": "0.3"})])
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0)
    async with serve(script) as url, backend(url, retry=policy) as b:
        await b.complete(ASK)
    assert script.arrivals[1] - script.arrivals[0] >= 0.3


@pytest.mark.anyio
async def test_429_after_all_retries_is_rate_limited() -> None:
    script = Script([(429, {"Retry-After": "0.05"})] * 3)
    async with serve(script) as url, backend(url) as b:
        with pytest.raises(RateLimited) as info:
            await b.complete(ASK)
        assert b.stats.gave_up == 1
    assert info.value.retry_after == pytest.approx(0.05)
    assert len(script.arrivals) == 3
    assert "HTTP 429" in str(info.value)


@pytest.mark.anyio
async def test_400_is_not_retried() -> None:
    script = Script([(400, {})])
    async with serve(script) as url, backend(url) as b:
        with pytest.raises(InvalidRequestError):
            await b.complete(ASK)
    assert len(script.arrivals) == 1


@pytest.mark.anyio
async def test_a_hang_is_retried_after_the_read_timeout() -> None:
    http = HttpClientConfig(read_timeout_s=1.0)  # the second answer comes at once
    async with serve(HangsOnce(OK)) as url, backend(url, http=http) as b:
        reply = await b.complete(ASK)
        assert b.stats.attempts == 2
    assert reply.message.content == "ok"


class ResetsOnce:
    """A handler that resets the connection (RST, no reply) on the first
    request, then answers like ``Script([])``."""

    def __init__(self) -> None:
        self.calls = 0
        self.answer = Script([])

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        if self.calls > 1:
            return await self.answer(request)
        return await reset_connection(request)


@pytest.mark.anyio
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_reset_connection_is_retried(streaming: bool) -> None:
    # The transport raises a cut connection as httpx.ReadError (with the
    # aiohttp cause); the backend still counts it a transient failure.
    server = ResetsOnce()
    async with serve(server) as url, backend(url) as b:
        reply = await _answer(b, streaming=streaming)
        assert reply.message.content == "ok"
        assert (b.stats.attempts, b.stats.retries) == (2, 1)
    assert server.calls == 2


@dataclass
class Recovering:
    """A server that answers HTTP 500 until the test sets ``healthy``, then
    OK (after ``delay_s``); ``arrivals`` counts the requests it got."""

    delay_s: float = 0.0
    healthy: bool = False
    arrivals: int = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.arrivals += 1
        if self.healthy:
            if self.delay_s:
                await anyio.sleep(self.delay_s)
            return web.json_response(OK)
        return web.Response(status=500, text="boom")


async def open_after_two_failures(b: OpenAIBackend) -> None:
    """Two calls fail with HTTP 500 and the breaker (threshold 2) opens."""
    for _ in range(2):
        with pytest.raises(BackendUnavailable, match="HTTP 500"):
            await b.complete(ASK)
    assert state_of(b.breaker) is BreakerState.OPEN


@pytest.mark.anyio
async def test_the_breaker_opens_fails_fast_probes_and_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    breakers_on(clock, monkeypatch)
    server = Recovering()

    breaker = BreakerConfig(failure_threshold=2, cooldown_s=30, wait=False)
    policy = RetryPolicy(max_attempts=1)
    async with serve(server) as url, backend(url, breaker=breaker, retry=policy) as b:
        await open_after_two_failures(b)
        with pytest.raises(BackendUnavailable, match="circuit open"):
            await b.complete(ASK)
        assert server.arrivals == 2  # failed fast: nothing sent
        assert b.stats.breaker_rejections == 1
        clock.now += 30  # the cool-down passes
        assert state_of(b.breaker) is BreakerState.HALF_OPEN
        with pytest.raises(BackendUnavailable, match="HTTP 500"):
            await b.complete(ASK)  # the probe fails: open again
        assert state_of(b.breaker) is BreakerState.OPEN
        server.healthy = True
        clock.now += 30
        await b.complete(ASK)  # the probe succeeds: closed
        assert state_of(b.breaker) is BreakerState.CLOSED
        await b.complete(ASK)
        assert server.arrivals == 5


@pytest.mark.anyio
async def test_calls_wait_for_an_open_breaker_and_one_probe_goes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By default a call an open breaker refuses waits for the probe: the
    backend's recovery costs the waiting calls time, not an error; while the
    probe is in flight the others hold back, so the server sees one probe."""
    # The cool-down ends when the test says so; meanwhile the calls look
    # again every 0.3 s (the rest of the cool-down, on the breaker's clock).
    clock = Clock()
    breakers_on(clock, monkeypatch)
    server = Recovering(delay_s=0.05)

    breaker = BreakerConfig(failure_threshold=2, cooldown_s=0.3)
    policy = RetryPolicy(max_attempts=1)
    async with serve(server) as url, backend(url, breaker=breaker, retry=policy) as b:
        await open_after_two_failures(b)
        server.healthy = True
        replies: list[str | None] = []

        async def ask() -> None:
            replies.append((await b.complete(ASK)).message.content)

        with anyio.fail_after(30):  # a hang guard
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(ask)
                while b.stats.breaker_waits < 5:  # noqa: ASYNC110 - watching a counter
                    await anyio.sleep(0.01)
                assert server.arrivals == 2  # all five wait out the cool-down
                clock.now += 1  # the cool-down is over: they see it at their next look
        assert replies == ["ok"] * 5
        assert server.arrivals == 7
        assert b.stats.breaker_rejections == 0
        assert b.stats.breaker_waits >= 5


@pytest.mark.anyio
async def test_a_call_whose_deadline_ends_before_the_probe_is_refused() -> None:
    server = Recovering()

    breaker = BreakerConfig(failure_threshold=1, cooldown_s=30)
    policy = RetryPolicy(max_attempts=1, deadline_s=1.0)
    async with serve(server) as url, backend(url, breaker=breaker, retry=policy) as b:
        with pytest.raises(BackendUnavailable, match="HTTP 500"):
            await b.complete(ASK)
        with pytest.raises(BackendUnavailable, match="circuit open"):
            await b.complete(ASK)
        # Refused at once: no wait for the probe, no attempt, nothing sent.
        assert b.stats.breaker_rejections == 1
        assert b.stats.breaker_waits == 0
        assert b.stats.attempts == 1
    assert server.arrivals == 1


@pytest.mark.anyio
async def test_garbage_counts_against_the_breaker_but_429_does_not() -> None:
    mode = "garbage"

    async def handler(request: web.Request) -> web.StreamResponse:
        if mode == "garbage":
            return web.Response(body=b"\x00\x01", content_type="application/json")
        return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "0"})

    breaker = BreakerConfig(failure_threshold=2, cooldown_s=30)
    policy = RetryPolicy(max_attempts=1)
    async with serve(handler) as url, backend(url, breaker=breaker, retry=policy) as b:
        mode = "throttle"
        for _ in range(3):
            with pytest.raises(RateLimited):
                await b.complete(ASK)
        assert state_of(b.breaker) is BreakerState.CLOSED
        mode = "garbage"
        for _ in range(2):
            with pytest.raises(MalformedReply):
                await b.complete(ASK)
        assert state_of(b.breaker) is BreakerState.OPEN


@pytest.mark.anyio
async def test_the_deadline_stops_retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    async def always_503(request: web.Request) -> web.StreamResponse:
        return web.Response(status=503)

    clock = SleepClock(monkeypatch)  # only the backoff moves the call's clock
    policy = RetryPolicy(max_attempts=50, base_delay_s=10, max_delay_s=100, jitter=0, deadline_s=60)
    async with serve(always_503) as url, backend(url, retry=policy) as b:
        with pytest.raises(BackendUnavailable, match="HTTP 503"):
            await b.complete(ASK)
        # 10 s, then 20 s of backoff; the next 40 s would end past the 60 s
        # deadline (30 s left): given up after the third attempt, not the 50th.
        assert clock.slept == [10, 20]
        assert (b.stats.attempts, b.stats.gave_up) == (3, 1)
