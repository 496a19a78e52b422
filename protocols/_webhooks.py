"""What the daemon posts to a run's webhook: ``WebhookEvent``, and the
headers that carry its signature.

Pure data, shared by the daemon and any receiver (``agentrt.client.verify_webhook``).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from agentrt.protocols._api import RunInfo
from agentrt.protocols._events import ElicitationRequested

WEBHOOK_URL_PATTERN: Final = r"^https?://[A-Za-z0-9.\-\[\]:]+(/[!-~]*)?$"
"""What a webhook URL may be: ``http`` or ``https``, a host, an optional
printable-ASCII path (the same pattern in the API's document)."""

WEBHOOK_URL_MAX: Final = 2048
"""The longest webhook URL the daemon takes."""

WebhookKind = Literal["run.succeeded", "run.failed", "run.cancelled", "run.waiting"]
"""What happened to the run: it ended with this status, or (``run.waiting``)
it waits for the person behind it to answer ``WebhookEvent.question``."""

TIMESTAMP_HEADER: Final = "X-Agentrt-Timestamp"
"""Unix seconds, when the delivery was signed (each attempt signs again)."""
SIGNATURE_HEADER: Final = "X-Agentrt-Signature"
"""``v1=`` and the hex HMAC-SHA256, keyed by the shared secret, of the
timestamp, a ``.`` and the body's bytes."""
DELIVERY_HEADER: Final = "X-Agentrt-Delivery"
"""The delivery's id (the same on every attempt: a receiver can drop repeats)."""


class WebhookEvent(msgspec.Struct, frozen=True, kw_only=True):
    """The body of a webhook delivery: ``kind``, the run as it ended (or
    as it waits, with the ``question`` it waits on)."""

    delivery_id: str
    kind: WebhookKind
    run: RunInfo
    ts: float
    question: ElicitationRequested | None = None
    """``run.waiting``: what the person is asked (answer it with ``POST
    /v1/runs/{run_id}/elicitations/{question_id}``)."""


DeliveryStatus = Literal["pending", "delivered", "failed", "dropped"]
"""``pending`` while tries remain, ``delivered`` on a 2xx, ``failed`` when
every try failed, ``dropped`` when the daemon's queue was full."""


class WebhookDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery of a run's webhook as the run store records it: how many
    tries so far, and what the last one got (``last_status``: the
    receiver's HTTP status; ``last_error``: why it failed)."""

    delivery_id: str
    run_id: str
    url: str
    kind: WebhookKind
    status: DeliveryStatus
    attempts: int = 0
    last_status: int | None = None
    last_error: str | None = None
    created_at: float
    updated_at: float


class WebhookDeliveryList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/runs/{run_id}/webhook-deliveries``: the run's webhook
    deliveries as the store records them, in the order they were made."""

    deliveries: list[WebhookDelivery]


__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WEBHOOK_URL_MAX",
    "WEBHOOK_URL_PATTERN",
    "DeliveryStatus",
    "WebhookDelivery",
    "WebhookDeliveryList",
    "WebhookEvent",
    "WebhookKind",
]
