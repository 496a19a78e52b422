"""The webhook signature: how the daemon signs a delivery (``sign``) and how
a receiver checks it (``verify_webhook``), in one place.

Imports protocols and the kernel's error tree only.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Final, final

import msgspec

from agentrt.protocols._webhooks import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookEvent,
)
from agentrt.runtime.kernel._errors import UserError

#: A delivery signed longer ago than this is refused (a replayed request).
TOLERANCE_S: Final = 300.0


@final
class WebhookRejected(UserError):
    """A webhook request that is not the daemon's: a header missing, a
    signature that does not match, a timestamp outside the tolerance, or a
    body that is not a ``WebhookEvent``; ``where`` names what failed."""

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``timestamp.body`` keyed by ``secret``."""
    mac = hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def sign(secret: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The signature headers of a delivery of ``body`` made ``now``."""
    timestamp = int(time.time() if now is None else now)
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify_webhook(
    body: bytes,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance_s: float = TOLERANCE_S,
    now: float | None = None,
) -> WebhookEvent:
    """The ``WebhookEvent`` a daemon posted, once its signature is checked.

    ``body`` is the request's raw bytes (not re-encoded JSON), ``headers``
    its headers (any case), ``secret`` the webhook's shared secret.  Raises
    ``WebhookRejected`` naming the header or the body at fault when a header
    is missing, the signature does not match, the timestamp is more than
    ``tolerance_s`` seconds away from ``now`` (a replay), or the body is not
    a ``WebhookEvent``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    stamp = lowered.get(TIMESTAMP_HEADER.lower())
    given = lowered.get(SIGNATURE_HEADER.lower())
    if stamp is None or not stamp.isdigit():
        raise WebhookRejected("missing or not unix seconds", where=TIMESTAMP_HEADER)
    if given is None:
        raise WebhookRejected("missing", where=SIGNATURE_HEADER)
    timestamp = int(stamp)
    if not hmac.compare_digest(given.encode(), signature(secret, timestamp, body).encode()):
        raise WebhookRejected(
            "does not match the body (a wrong secret, or the body was changed)",
            where=SIGNATURE_HEADER,
        )
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise WebhookRejected(
            f"signed {current - timestamp:.0f} s away from now, past the {tolerance_s:.0f} s "
            "tolerance (a replayed delivery?)",
            where=TIMESTAMP_HEADER,
        )
    try:
        return msgspec.json.decode(body, type=WebhookEvent)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WebhookRejected(f"not a webhook event: {exc}", where="body") from None


__all__ = ["TOLERANCE_S", "WebhookRejected", "sign", "signature", "verify_webhook"]
