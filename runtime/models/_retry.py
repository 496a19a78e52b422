"""Retries and circuit breaking for calls to model servers: ``RetryPolicy``,
``CircuitBreaker``, and ``Retrier`` tying them together around one logical
call (each backend drives a ``Retrier`` in its own call loop).

Knows the error tree, nothing about HTTP libraries or specific backends.
Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import email.utils
import enum
import math
import random
import time
from collections.abc import Callable
from typing import NoReturn

import anyio
import msgspec
from pydantic import BaseModel, ConfigDict, Field

from agentrt.runtime.kernel._errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    MalformedReply,
)
from agentrt.runtime.observe._log import get_logger

__all__ = [
    "TIMER_SLACK_S",
    "BreakerConfig",
    "BreakerState",
    "CircuitBreaker",
    "Retrier",
    "RetryCounters",
    "RetryPolicy",
    "RetryStats",
    "TransientError",
    "parse_retry_after",
]

_log = get_logger(__name__)


class RetryPolicy(BaseModel):
    """How a backend retries a call that failed in a way retrying may fix:
    jittered exponential backoff honouring ``Retry-After`` (seconds or an
    HTTP date), a cap on attempts and a total deadline."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_attempts: int = Field(default=4, ge=1)
    """Attempts per call, the first one included (1 disables retries)."""
    base_delay_s: float = Field(default=0.25, ge=0)
    """Backoff before the second attempt; later ones grow by ``multiplier``."""
    multiplier: float = Field(default=2.0, ge=1)
    """Growth factor of the backoff from one retry to the next."""
    max_delay_s: float = Field(default=10.0, ge=0)
    """Ceiling of a computed backoff (``Retry-After`` is capped separately)."""
    jitter: float = Field(default=0.5, ge=0, le=1)
    """Fraction of a computed backoff drawn at random (0 = none, 1 = full
    jitter), so clients that failed together do not retry together."""
    retry_after_spread: float = Field(default=0.1, ge=0, le=1)
    """When the server sent ``Retry-After``, wait that long plus up to this
    fraction of it at random: never less than the server asked."""
    max_retry_after_s: float = Field(default=60.0, ge=0)
    """Give up at once when ``Retry-After`` asks for longer than this."""
    deadline_s: float = Field(default=300.0, gt=0)
    """Seconds for the whole call, every attempt and wait included."""
    retry_statuses: frozenset[int] = frozenset({408, 409, 429})
    """HTTP statuses below 500 that are retried."""
    retry_server_errors: bool = True
    """Retry every 5xx status."""

    def is_retryable_status(self, status: int) -> bool:
        """Whether an HTTP ``status`` is worth another attempt."""
        return status in self.retry_statuses or (self.retry_server_errors and status >= 500)

    def backoff(
        self, retry: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the first
        retry), honouring the server's ``retry_after`` hint when given."""
        draw = (rng or random).random()
        if retry_after is not None:
            return retry_after * (1.0 + self.retry_after_spread * draw) + TIMER_SLACK_S
        raw = min(self.max_delay_s, self.base_delay_s * self.multiplier ** (retry - 1))
        return raw * (1.0 - self.jitter * draw)


#: Event-loop timers can fire a little early (libuv's, under uvloop, have
#: millisecond granularity); waiting this much longer than a server's
#: ``Retry-After`` keeps the wait at or above what it asked for.
TIMER_SLACK_S = 0.002


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header value asks to wait: delta-seconds
    (``"2"``, also ``"0.5"`` as some servers send) or an HTTP date.
    ``None`` when absent or unparseable; never negative."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class TransientError(Exception):
    """Raised by an attempt whose failure another attempt may fix.

    ``error`` is what the caller sees if no attempt succeeds;
    ``retry_after`` is the server's hint; ``breaker_failure`` says whether
    the failure speaks against the endpoint's health (a 429 does not).
    """

    def __init__(
        self, error: BackendError, *, retry_after: float | None = None, breaker_failure: bool = True
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.breaker_failure = breaker_failure


class BreakerConfig(BaseModel):
    """When a circuit breaker opens and how long it stays open."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    failure_threshold: int = Field(default=5, ge=1)
    """Consecutive failures (refused, timed out, 5xx, garbage) that open it."""
    cooldown_s: float = Field(default=5.0, gt=0)
    """Seconds it stays open before one probe call is let through."""
    wait: bool = True
    """A call refused by an open breaker waits for the probe (within the
    call's deadline, and the run's) instead of failing at once: a backend
    that comes back after a cool-down costs the calls waiting time, not
    their rollouts.  ``False``: fail fast with ``BackendUnavailable``."""


_PROBE_POLL_S = 0.05
"""How often a call waiting behind a half-open breaker's probe looks again."""


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """The health of one endpoint, judged from consecutive failures.

    *closed*, then *open* after ``BreakerConfig``'s threshold of
    consecutive failures, then *half-open* after a cool-down (one probe
    call let through), then *closed* on its success or *open* again.  An
    open breaker fails calls fast with ``BackendUnavailable``.  Rate
    limiting (429) neither opens nor closes it.  Not thread-safe; used from
    one event loop (its methods never await).
    """

    __slots__ = (
        "_clock",
        "_config",
        "_failures",
        "_opened_at",
        "_probing",
        "_state",
        "backend",
        "endpoint",
    )

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        endpoint: str,
        backend: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config or BreakerConfig()
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self.endpoint = endpoint
        self.backend = backend

    @property
    def state(self) -> BreakerState:
        """The current state (an open breaker whose cool-down is over reads
        as half-open)."""
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self._config.cooldown_s
        ):
            self._state = BreakerState.HALF_OPEN
        return self._state

    def admit(self) -> None:
        """Let one call through or raise ``BackendUnavailable``.  In the
        half-open state only one call (the probe) is in flight at a time."""
        state = self.state
        if state is BreakerState.CLOSED:
            return
        if state is BreakerState.HALF_OPEN and not self._probing:
            self._probing = True
            return
        wait = max(0.0, self._config.cooldown_s - (self._clock() - self._opened_at))
        detail = (
            "a probe call is in flight"
            if state is BreakerState.HALF_OPEN
            else (f"next probe in {wait:.2f}s")
        )
        raise BackendUnavailable(
            f"circuit open after {self._config.failure_threshold} consecutive failures ({detail})",
            backend=self.backend,
            endpoint=self.endpoint,
        )

    @property
    def waits(self) -> bool:
        """Whether calls it refuses should wait for it (``BreakerConfig.wait``)."""
        return self._config.wait

    def retry_in(self) -> float:
        """Seconds until ``admit`` may let a call through: 0 when it would
        now; the rest of the cool-down when open; a short poll interval
        while a half-open probe is in flight (its outcome decides)."""
        state = self.state
        if state is BreakerState.CLOSED or (state is BreakerState.HALF_OPEN and not self._probing):
            return 0.0
        if state is BreakerState.HALF_OPEN:
            return _PROBE_POLL_S
        return max(0.0, self._config.cooldown_s - (self._clock() - self._opened_at))

    def record_success(self) -> None:
        """The endpoint answered properly: close (a probe succeeded) and
        reset the failure count."""
        if self._state is not BreakerState.CLOSED:
            _log.info("circuit_closed", backend=self.backend, endpoint=self.endpoint)
        self._failures = 0
        self._probing = False
        self._state = BreakerState.CLOSED

    def record_failure(self) -> None:
        """The endpoint failed: count it; open on the threshold, or again
        when the failure was the half-open probe."""
        self._failures += 1
        if self._probing or self._failures >= self._config.failure_threshold:
            if self._state is not BreakerState.OPEN:
                _log.warning(
                    "circuit_opened",
                    backend=self.backend,
                    endpoint=self.endpoint,
                    consecutive_failures=self._failures,
                    cooldown_s=self._config.cooldown_s,
                )
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()
        self._probing = False

    def record_neutral(self) -> None:
        """The call ended without saying anything about health (cancelled,
        rate limited): free the probe slot, change nothing else."""
        self._probing = False


class RetryStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of :class:`RetryCounters`."""

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    retry_after_waits: int = 0
    slept_s: float = 0.0
    gave_up: int = 0
    breaker_rejections: int = 0
    breaker_waits: int = 0
    """Times a call waited for an open breaker's probe."""

    @property
    def attempts_per_call(self) -> float:
        return self.attempts / self.calls if self.calls else 0.0


class RetryCounters:
    """Running totals of one backend's calls (cheap to bump on the hot path):
    one attribute per :class:`RetryStats` field, starting at its default."""

    __slots__ = RetryStats.__struct_fields__

    calls: int
    attempts: int
    retries: int
    retry_after_waits: int
    slept_s: float
    gave_up: int
    breaker_rejections: int
    breaker_waits: int

    def __init__(self) -> None:
        zero = RetryStats()
        for name in self.__slots__:
            setattr(self, name, getattr(zero, name))

    def snapshot(self) -> RetryStats:
        return RetryStats(**{name: getattr(self, name) for name in self.__slots__})


class Retrier:
    """The retry state of one logical call: attempts made, the deadline,
    and the breaker verdicts.  A backend's call loop drives it: per attempt
    ``begin_attempt``, then ``back_off`` on a ``TransientError`` (it raises
    when the policy gives up), ``failed`` on any other ending, or
    ``succeeded``; a stream retries only until its first delta was handed
    to the caller."""

    __slots__ = ("_breaker", "_counters", "_policy", "_rng", "attempt", "deadline")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        breaker: CircuitBreaker | None = None,
        counters: RetryCounters | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._policy = policy
        self._breaker = breaker
        self._counters = counters or RetryCounters()
        self._rng = rng
        self._counters.calls += 1
        self.attempt = 0
        self.deadline = time.monotonic() + policy.deadline_s

    def remaining(self) -> float:
        """Seconds left until the call's deadline."""
        return self.deadline - time.monotonic()

    async def begin_attempt(self) -> None:
        """Ask the breaker for permission and count the attempt.  An open
        breaker that waits (``BreakerConfig.wait``) is waited for while the
        call's deadline allows; then, or when it does not wait, the call is
        refused with ``BackendUnavailable``."""
        breaker = self._breaker
        # A closed breaker admits every call: asked only when it is not.
        if breaker is not None and breaker._state is not BreakerState.CLOSED:
            while True:
                try:
                    breaker.admit()
                    break
                except BackendUnavailable:
                    pause = breaker.retry_in()
                    if not breaker.waits or pause >= self.remaining():
                        self._counters.breaker_rejections += 1
                        raise
                    self._counters.breaker_waits += 1
                    await anyio.sleep(max(pause, TIMER_SLACK_S))
        self.attempt += 1
        self._counters.attempts += 1

    def succeeded(self) -> None:
        breaker = self._breaker
        # Nothing to record on a closed breaker with no failures counted.
        if breaker is not None and (
            breaker._failures or breaker._probing or breaker._state is not BreakerState.CLOSED
        ):
            breaker.record_success()

    def failed(self, error: BaseException) -> None:
        """A non-retryable ending: feed the breaker its verdict."""
        if self._breaker is None:
            return
        if isinstance(error, BackendUnavailable | BackendTimeout | MalformedReply):
            self._breaker.record_failure()
        elif isinstance(error, Exception):
            # The server answered (a 400, an unknown model): it is healthy.
            self._breaker.record_success()
        else:
            self._breaker.record_neutral()

    def _give_up(self, transient: TransientError) -> NoReturn:
        self._counters.gave_up += 1
        _log.info("giving_up", attempts=self.attempt, error=str(transient.error))
        raise transient.error

    async def back_off(self, transient: TransientError) -> None:
        """Wait before the next attempt, or raise ``transient.error`` when
        attempts, the deadline or the server's patience have run out."""
        if self._breaker is not None:
            if transient.breaker_failure:
                self._breaker.record_failure()
            else:
                self._breaker.record_neutral()
        policy = self._policy
        retry_after = transient.retry_after
        if self.attempt >= policy.max_attempts or (
            retry_after is not None and retry_after > policy.max_retry_after_s
        ):
            self._give_up(transient)
        delay = policy.backoff(self.attempt, retry_after, self._rng)
        if delay >= self.remaining():
            self._give_up(transient)
        self._counters.retries += 1
        if retry_after is not None:
            self._counters.retry_after_waits += 1
        self._counters.slept_s += delay
        _log.debug(
            "retrying",
            attempt=self.attempt,
            delay_s=round(delay, 3),
            retry_after=retry_after,
            error=str(transient.error),
        )
        await anyio.sleep(delay)
