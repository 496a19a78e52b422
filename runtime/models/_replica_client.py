"""HTTP calls to a set of replicas: failover, retries, breakers, health.

Owns the call loop a multi-replica backend runs around one logical call:
pick a replica (``ReplicaSet``, prefix affinity), ask its circuit breaker,
run the attempt, and on a failure that retrying may fix (``TransientError``
from ``retry.py``) fail over at once to a replica not tried yet, else back
off per the ``RetryPolicy`` (honouring ``Retry-After``) and try again.  Also
owns mapping transport failures and HTTP statuses onto the error tree,
``/health`` probes (which mark replicas up and down; a refused connection
marks one down at once) and plain admin calls.

Knows HTTP (httpx on the aiohttp transport) and the error tree, nothing of
any model API.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar, final

import anyio
import httpx
import msgspec

from agentrt.runtime.kernel._errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    InvalidRequestError,
    MalformedReply,
    RateLimited,
)
from agentrt.runtime.models._replicas import Replica, ReplicaSet
from agentrt.runtime.models._retry import (
    TIMER_SLACK_S,
    Retrier,
    RetryCounters,
    RetryPolicy,
    TransientError,
    parse_retry_after,
)
from agentrt.runtime.models.http._http_client import (
    Post,
    TransportFailure,
    classify_transport_error,
)

__all__ = ["ReplicaCall", "ReplicaClient", "error_message"]

T = TypeVar("T")


def error_message(data: bytes) -> str:
    """The human part of an error body (``{"error": {"message"}}``,
    ``{"error"|"message"|"detail": str}``), else an excerpt."""
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return repr(data[:300].decode("utf-8", "replace")) if data else "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for key in ("error", "message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return repr(data[:300].decode("utf-8", "replace"))


class ReplicaClient:
    """The call loop and error mapping over one ``ReplicaSet``."""

    def __init__(
        self,
        replicas: ReplicaSet,
        *,
        backend: str,
        policy: RetryPolicy,
        rng: random.Random | None = None,
        health_timeout_s: float = 2.0,
        admin_timeout_s: float = 30.0,
        log: Any = None,
    ) -> None:
        self.replicas = replicas
        self.backend = backend
        self.policy = policy
        self.counters = RetryCounters()
        self._rng = rng or random.Random()
        self._health_timeout_s = health_timeout_s
        self._admin_timeout_s = admin_timeout_s
        self._log = log
        self.http: httpx.AsyncClient | None = None
        self.post: Post | None = None
        """The whole-reply POST on ``http``'s transport (``poster``)."""

    def _client(self) -> httpx.AsyncClient:
        if self.http is None:
            raise RuntimeError(f"backend {self.backend!r} is not open")
        return self.http

    # -- the call loop -------------------------------------------------------

    def retrier(self) -> Retrier:
        """The retry state of a new logical call (breakers are fed here, per
        replica, not by the retrier)."""
        return Retrier(self.policy, counters=self.counters, rng=self._rng)

    def start(self, key: str | None) -> ReplicaCall:
        """A new logical call over the replicas, routed by ``key``."""
        return ReplicaCall(self, key)

    async def call(self, key: str | None, attempt: Callable[[Replica], Awaitable[T]]) -> T:
        """Run ``attempt`` on a replica picked for ``key`` until it succeeds
        or the retry policy gives up."""
        walk = self.start(key)
        while True:
            replica = await walk.next_replica()
            async with walk.attempt(replica):
                with anyio.move_on_after(max(0.0, walk.retrier.remaining())) as scope:
                    result = await attempt(replica)
            if walk.retrying:
                continue
            if scope.cancelled_caught:
                error = BackendTimeout(
                    f"no reply within the call deadline of {self.policy.deadline_s:g}s",
                    backend=self.backend,
                    endpoint=replica.url,
                )
                self.feed_breaker(replica, error)
                raise error
            self.succeeded(replica)
            return result

    async def admit(
        self, key: str | None, tried: set[int], last: TransientError | None, retrier: Retrier
    ) -> Replica:
        """A replica whose breaker lets the call through.  When every
        replica not yet tried is held back only by its breaker (and the
        breakers wait, ``BreakerConfig.wait``), the call waits for the
        first probe that may succeed, within its deadline; otherwise, when
        none is left, the last failure (or ``BackendUnavailable``) is
        raised."""
        while True:
            try:
                return self._admit_now(key, tried, last)
            except BackendError:
                pause = self._breaker_pause(tried)
                if pause is None or pause >= retrier.remaining():
                    raise
                self.counters.breaker_waits += 1
                await anyio.sleep(max(pause, TIMER_SLACK_S))

    def _breaker_pause(self, tried: set[int]) -> float | None:
        """Seconds until a breaker of an untried replica may admit a call,
        when breakers are all that hold the untried replicas back; else
        None (nothing to wait for)."""
        pauses: list[float] = []
        for replica in self.replicas.replicas:
            if replica.index in tried:
                continue
            breaker = replica.breaker
            if not breaker.waits:
                return None
            pause = breaker.retry_in()
            if pause > 0:
                pauses.append(pause)
        return min(pauses) if pauses else None

    def _admit_now(self, key: str | None, tried: set[int], last: TransientError | None) -> Replica:
        excluded = set(tried)
        while True:
            try:
                replica = self.replicas.pick(key, excluded)
            except BackendUnavailable as exc:
                if last is not None:
                    raise last.error from exc
                raise
            try:
                replica.breaker.admit()
            except BackendUnavailable:
                excluded.add(replica.index)
                continue
            return replica

    def succeeded(self, replica: Replica) -> None:
        replica.breaker.record_success()
        replica.served += 1

    async def after_failure(
        self, retrier: Retrier, transient: TransientError, replica: Replica, tried: set[int]
    ) -> None:
        """Feed the breaker, then fail over at once to an untried replica,
        or back off (raising when the policy gives up)."""
        if transient.breaker_failure:
            replica.breaker.record_failure()
            replica.failures += 1
        else:
            replica.breaker.record_neutral()
        tried.add(replica.index)
        if self._log is not None:
            self._log.info(
                "replica_attempt_failed",
                url=replica.url,
                attempt=retrier.attempt,
                error=str(transient.error),
            )
        others = any(r.index not in tried and r.admissible() for r in self.replicas.replicas)
        if others and retrier.attempt < self.policy.max_attempts and retrier.remaining() > 0:
            return
        tried.clear()
        await retrier.back_off(transient)

    def feed_breaker(self, replica: Replica, exc: BaseException) -> None:
        """A call ended with ``exc`` (not retried): tell the breaker."""
        if isinstance(exc, BackendUnavailable | BackendTimeout | MalformedReply):
            replica.breaker.record_failure()
            replica.failures += 1
        elif isinstance(exc, Exception):
            replica.breaker.record_success()  # it answered, e.g. a 400
        else:
            replica.breaker.record_neutral()  # cancelled

    # -- error mapping -------------------------------------------------------

    def transport_error(
        self, exc: Exception, replica: Replica, url: str, phase: str
    ) -> TransientError:
        """The ``TransientError`` for ``exc`` escaping the transport while
        ``phase``; re-raises anything that is not a transport failure."""
        kind = classify_transport_error(exc)
        if kind is None:
            raise exc
        reason = str(exc) or type(exc).__name__
        where = {"backend": self.backend, "endpoint": url}
        if kind is TransportFailure.CONNECT:
            replica.healthy = False  # until a health check says otherwise
            return TransientError(BackendUnavailable(f"cannot connect: {reason}", **where))
        if kind is TransportFailure.TIMEOUT:
            return TransientError(BackendTimeout(f"timed out {phase}: {reason}", **where))
        if kind is TransportFailure.DROPPED:
            return TransientError(
                BackendUnavailable(f"connection dropped while {phase}: {reason}", **where)
            )
        return TransientError(MalformedReply(f"not HTTP while {phase}: {reason}", **where))

    def status_error(
        self,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        url: str,
        hint_404: str = "",
    ) -> Exception:
        """The error for a non-200 reply (``headers``: case-insensitive): a
        ``TransientError`` when the policy retries its status."""
        message = error_message(body)
        where = {"backend": self.backend, "endpoint": url}
        if status == 429 or self.policy.is_retryable_status(status):
            retry_after = parse_retry_after(headers.get("retry-after"))
            error: BackendError
            if status == 429:
                error = RateLimited(
                    f"rate limited (HTTP 429): {message}", retry_after=retry_after, **where
                )
            elif status == 408:
                error = BackendTimeout(f"HTTP 408: {message}", **where)
            else:
                error = BackendUnavailable(f"HTTP {status}: {message}", **where)
            return TransientError(
                error, retry_after=retry_after, breaker_failure=status >= 500 or status == 408
            )
        if status == 404:
            return BackendError(f"HTTP 404{hint_404}: {message}", **where)
        if 400 <= status < 500:
            return InvalidRequestError(
                f"[{self.backend} {url}] request rejected (HTTP {status}): {message}"
            )
        return MalformedReply(f"unexpected HTTP {status}: {message}", **where)

    # -- health and admin ----------------------------------------------------

    async def health(self) -> dict[str, bool]:
        """Probe ``/health`` on every replica now; marks them up or down."""
        async with anyio.create_task_group() as tg:
            for replica in self.replicas.replicas:
                tg.start_soon(self.probe, replica)
        return {r.url: r.healthy for r in self.replicas.replicas}

    async def probe(self, replica: Replica) -> bool:
        """One ``/health`` check (200 within the timeout = up)."""
        ok = False
        try:
            with anyio.fail_after(self._health_timeout_s):
                response = await self._client().get(f"{replica.url}/health")
            ok = response.status_code == 200
        except TimeoutError:
            ok = False
        except Exception as exc:
            if classify_transport_error(exc) is None:
                raise
        if ok != replica.healthy and self._log is not None:
            self._log.info("replica_health", url=replica.url, healthy=ok)
        replica.healthy = ok
        return ok

    async def admin(self, replica: Replica, method: str, path: str) -> httpx.Response:
        """A plain call (no retries) that must answer 200."""
        url = f"{replica.url}{path}"
        try:
            with anyio.fail_after(self._admin_timeout_s):
                response = await self._client().request(method, url)
        except TimeoutError:
            raise BackendTimeout(
                f"no reply within {self._admin_timeout_s:g}s", backend=self.backend, endpoint=url
            ) from None
        except Exception as exc:
            raise self.transport_error(exc, replica, url, "calling").error from exc
        if response.status_code != 200:
            raise BackendError(
                f"HTTP {response.status_code}: {error_message(response.content)}",
                backend=self.backend,
                endpoint=url,
            )
        return response


@final
class ReplicaCall:
    """One logical call's walk over the replicas (``ReplicaClient.start``):
    its retry state, the replicas tried and the last failure retrying may
    fix.  Each attempt is ``replica = await walk.next_replica()``, then the
    attempt inside ``async with walk.attempt(replica):``, then, when
    ``walk.retrying``, the next attempt."""

    def __init__(self, client: ReplicaClient, key: str | None) -> None:
        self._client = client
        self.key = key
        self.retrier = client.retrier()
        self.tried: set[int] = set()
        self.last: TransientError | None = None
        self.retrying = False
        """The last attempt failed in a way retrying may fix, and the walk
        failed over or backed off: make the next attempt."""

    async def next_replica(self) -> Replica:
        """The replica the next attempt goes to (``ReplicaClient.admit``)."""
        replica = await self._client.admit(self.key, self.tried, self.last, self.retrier)
        await self.retrier.begin_attempt()
        return replica

    @asynccontextmanager
    async def attempt(self, replica: Replica) -> AsyncIterator[None]:
        """One attempt on ``replica``, counted in its ``outstanding`` while
        it runs.  A ``TransientError`` it raises is taken (``retrying``),
        once the walk failed over or backed off (``after_failure``, which
        raises when the policy gives up); any other exception feeds the
        replica's breaker and propagates."""
        self.retrying = False
        replica.outstanding += 1
        try:
            yield
        except TransientError as transient:
            self.last = transient
            self.retrying = True
            await self._client.after_failure(self.retrier, transient, replica, self.tried)
        except BaseException as exc:
            self._client.feed_breaker(replica, exc)
            raise
        finally:
            replica.outstanding -= 1
