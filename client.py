"""``agentrt.client``: a Python client of the daemon's REST + SSE API
(``agentrt serve``), sync (``Client``) and async (``AsyncClient``), on httpx.

Runs, events and errors are agentrt's own types: events decode into
``agentrt.protocols`` (``RunStarted``... ``RunFinished``), refusals raise
from agentrt's error tree (``RequestRefused`` is a ``UserError``,
``DaemonUnavailable`` a ``RuntimeFailure``).  ``verify_webhook`` checks a
run webhook's signature on the receiving side.  This module only re-exports.
"""

from agentrt.protocols._api import ElicitationAnswer, RunDetail, RunInfo, RunPage
from agentrt.protocols._webhooks import WebhookDelivery, WebhookEvent
from agentrt.runtime.client._async_client import AsyncClient, AsyncRunEvents
from agentrt.runtime.client._client_errors import (
    DaemonUnavailable,
    NotFound,
    RequestRefused,
    Unauthorized,
)
from agentrt.runtime.client._sync_client import Client, RunEvents
from agentrt.runtime.client._webhook_signature import WebhookRejected, verify_webhook

__all__ = [
    "AsyncClient",
    "AsyncRunEvents",
    "Client",
    "DaemonUnavailable",
    "ElicitationAnswer",
    "NotFound",
    "RequestRefused",
    "RunDetail",
    "RunEvents",
    "RunInfo",
    "RunPage",
    "Unauthorized",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookRejected",
    "verify_webhook",
]
