"""Run webhooks: when a run ends (or starts waiting on a question), a
signed ``WebhookEvent`` is posted to the URL the run (or
``server.webhook.url``) names, tried again with a growing wait, each try
recorded in the run store (``WebhookDelivery``).

``WebhookSender`` owns its task group: ``senders`` workers read one bounded
queue, so a slow or dead receiver never holds up a run or a request (a full
queue drops the delivery, recorded as ``dropped``), and every try has a
deadline.  The secret is only ever in the signature: logs name the
receiver's host, never the secret or the URL's path and query.

The roof: imports the store, the config and the client's signature.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self, final
from urllib.parse import urlsplit

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentrt._version import __version__
from agentrt.protocols._api import RunInfo
from agentrt.protocols._events import ElicitationRequested
from agentrt.protocols._run import RunRequest
from agentrt.protocols._webhooks import (
    DELIVERY_HEADER,
    WEBHOOK_URL_MAX,
    WEBHOOK_URL_PATTERN,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEvent,
    WebhookKind,
)
from agentrt.runtime.client._webhook_signature import sign
from agentrt.runtime.config._config_file import WebhookConfig
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._api_problem import ApiProblem
from agentrt.runtime.serve.store._run_store import RunStore

log = get_logger(__name__)

_URL: Final = re.compile(WEBHOOK_URL_PATTERN)

_KINDS: Final[dict[str, WebhookKind]] = {
    "succeeded": "run.succeeded",
    "failed": "run.failed",
    "cancelled": "run.cancelled",
}


def takes_webhooks(config: WebhookConfig) -> bool:
    """Whether runs may name a webhook: the daemon has a secret to sign with."""
    return bool(config.secret or config.secret_env)


def check_webhook(url: str | None, config: WebhookConfig) -> None:
    """Refuse (400, ``where="webhook"``) a run's webhook that is not an
    ``http(s)`` URL, or any webhook when the daemon has no secret to sign with."""
    if url is None:
        return
    if len(url) > WEBHOOK_URL_MAX or not _URL.fullmatch(url):
        shown = url if len(url) <= 80 else f"{url[:60]}... ({len(url)} characters)"
        raise ApiProblem(
            400,
            "invalid_request",
            f"must be an http:// or https:// URL (a host, then an optional path), got {shown!r}",
            where="webhook",
        )
    if not takes_webhooks(config):
        raise ApiProblem(
            400,
            "invalid_request",
            "this daemon has no webhook secret to sign deliveries with "
            "(server.webhook.secret); it takes no webhooks",
            where="webhook",
        )


def _host(url: str) -> str:
    """What the logs say of a receiver: its scheme and host, never its path or query."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


@dataclass(frozen=True, slots=True)
class _Job:
    url: str
    event: WebhookEvent
    created_at: float
    tried: int = 0
    """Tries made before (by a daemon that stopped before the last one)."""


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
class WebhookSender:
    """Delivers run webhooks in the background (see the module docstring).

    An async context manager, opened once, inside the run store's lifetime;
    closing it stops deliveries in flight (their record says how far they
    got).  ``transport``: an httpx transport (tests)."""

    def __init__(
        self,
        config: WebhookConfig,
        store: RunStore,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self._transport = transport
        self._secret: str | None = None
        self._state = _State.UNOPENED
        self._tg: TaskGroup | None = None
        self._http: httpx.AsyncClient | None = None
        self._send: MemoryObjectSendStream[_Job] | None = None

    async def __aenter__(self) -> Self:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"Cannot open a WebhookSender that is {self._state.value}.")
        self._state = _State.OPEN
        self._secret = self.config.resolved_secret()
        # The queue's capacity is the configured bound: past it a delivery
        # is dropped (and recorded), never waited for by the run.
        send, receive = anyio.create_memory_object_stream[_Job](self.config.queue)
        self._send = send
        self._http = httpx.AsyncClient(
            transport=self._transport,
            timeout=self.config.timeout_s,
            follow_redirects=False,
            headers={"user-agent": f"agentrt/{__version__}"},
        )
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for _ in range(self.config.senders):
            self._tg.start_soon(self._work, receive.clone())
        receive.close()
        await self._resume()
        return self

    async def _resume(self) -> None:
        """Queue again the deliveries an earlier daemon left ``pending``
        (they go on with the tries left; past the queue's room, they wait
        for the next start)."""
        assert self._send is not None
        for delivery in await self.store.pending_deliveries():
            run = await self.store.run_info(delivery.run_id)
            if run is None:
                continue
            event = WebhookEvent(
                delivery_id=delivery.delivery_id, kind=delivery.kind, run=run, ts=time.time()
            )
            job = _Job(
                url=delivery.url,
                event=event,
                created_at=delivery.created_at,
                tried=delivery.attempts,
            )
            try:
                self._send.send_nowait(job)
            except anyio.WouldBlock:
                return
            log.info(
                "webhook_resumed",
                run_id=delivery.run_id,
                receiver=_host(delivery.url),
                tried=delivery.attempts,
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state is not _State.OPEN or self._tg is None or self._http is None:
            raise RuntimeError(f"Cannot close a WebhookSender that is {self._state.value}.")
        self._state = _State.CLOSED
        assert self._send is not None
        self._send.close()
        # Deliveries still waiting for a try are not waited for: shutdown
        # stays prompt; their records say ``pending`` and the next start
        # queues them again (``_resume``).
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            await self._http.aclose()

    def url_for(self, request: RunRequest) -> str | None:
        """The webhook of a run: its own, else the daemon's."""
        return request.webhook or self.config.url

    async def run_ended(self, run: RunInfo, request: RunRequest) -> None:
        """Queue the webhook of ``run``, which just ended, if it has one;
        records the delivery (``pending``, or ``dropped`` on a full queue)
        and returns without waiting for any try."""
        kind = _KINDS.get(run.status)
        if kind is not None:
            await self._queue(request, f"{run.run_id}.{kind}", kind, run, None)

    async def run_waiting(
        self, run: RunInfo, request: RunRequest, question: ElicitationRequested
    ) -> None:
        """Queue the webhook of ``run``, which now waits on ``question``
        (``run.waiting``, one delivery per question), as ``run_ended`` does."""
        delivery_id = f"{run.run_id}.waiting.{question.question_id}"
        await self._queue(request, delivery_id, "run.waiting", run, question)

    async def _queue(
        self,
        request: RunRequest,
        delivery_id: str,
        kind: WebhookKind,
        run: RunInfo,
        question: ElicitationRequested | None,
    ) -> None:
        url = self.url_for(request)
        if url is None or self._send is None:
            return
        now = time.time()
        event = WebhookEvent(delivery_id=delivery_id, kind=kind, run=run, ts=now, question=question)
        job = _Job(url=url, event=event, created_at=now)
        try:
            self._send.send_nowait(job)
        except anyio.WouldBlock:
            log.warning("webhook_dropped", run_id=run.run_id, receiver=_host(url))
            await self._record(job, "dropped", 0, None, "the daemon's webhook queue was full")
            return
        except anyio.ClosedResourceError:
            return  # shutting down
        await self._record(job, "pending", 0, None, None)

    async def _record(
        self,
        job: _Job,
        status: DeliveryStatus,
        attempts: int,
        last_status: int | None,
        last_error: str | None,
    ) -> None:
        delivery = WebhookDelivery(
            delivery_id=job.event.delivery_id,
            run_id=job.event.run.run_id,
            url=job.url,
            kind=job.event.kind,
            status=status,
            attempts=attempts,
            last_status=last_status,
            last_error=last_error,
            created_at=job.created_at,
            updated_at=time.time(),
        )
        try:
            await self.store.record_delivery(delivery)
        except Exception as exc:  # the store closing: the delivery goes on unrecorded
            log.error("webhook_record_failed", run_id=delivery.run_id, exc_info=exc)

    async def _work(self, receive: MemoryObjectReceiveStream[_Job]) -> None:
        async with receive:
            async for job in receive:
                await self._deliver(job)

    async def _deliver(self, job: _Job) -> None:
        assert self._http is not None
        assert self._secret is not None
        body = msgspec.json.encode(job.event)
        config = self.config
        for attempt in range(job.tried + 1, max(config.attempts, job.tried + 1) + 1):
            status: int | None = None
            try:
                headers = {
                    **sign(self._secret, body),
                    DELIVERY_HEADER: job.event.delivery_id,
                    "content-type": "application/json",
                }
                # Every try has its deadline (connect, send, the answer).
                with anyio.fail_after(config.timeout_s):
                    response = await self._http.post(job.url, content=body, headers=headers)
                status = response.status_code
                if 200 <= status < 300:
                    await self._record(job, "delivered", attempt, status, None)
                    log.info(
                        "webhook_delivered",
                        run_id=job.event.run.run_id,
                        receiver=_host(job.url),
                        attempts=attempt,
                    )
                    return
                error = f"the receiver answered {status}"
            except TimeoutError:
                error = f"no answer within {config.timeout_s} s (server.webhook.timeout_s)"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            last = attempt >= config.attempts
            await self._record(job, "failed" if last else "pending", attempt, status, error)
            log.warning(
                "webhook_attempt_failed",
                run_id=job.event.run.run_id,
                receiver=_host(job.url),
                attempt=attempt,
                of=config.attempts,
                error=error,
            )
            if not last:
                await anyio.sleep(min(config.backoff_s * 2 ** (attempt - 1), config.max_backoff_s))


__all__ = ["WebhookSender", "check_webhook", "takes_webhooks"]
