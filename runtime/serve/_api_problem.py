"""The daemon's request errors: ``ApiProblem`` and its JSON body.

Every 4xx/5xx the daemon sends is an ``ApiError`` body that says what went
wrong and where (a field, a header, a path), so a caller can fix the request.
May import protocols and the runtime's error tree; nothing else.
"""

from __future__ import annotations

from typing import Final, final

from agentrt.protocols._api import ApiError
from agentrt.runtime.kernel._errors import AgentrtError

RETRY_AFTER_S: Final = 1
"""``Retry-After`` of a refusal for load (connections, runs): a second, the
time for a slot to free up on a busy daemon."""

STORE_FULL_RETRY_AFTER_S: Final = 30
"""``Retry-After`` of a write refused because the run store's disk is full:
long enough for an operator or a clean-up job to free space, short enough
that a client resumes soon after."""


@final
class ApiProblem(AgentrtError):
    """A request the daemon refuses: an HTTP status, a short kind
    (``invalid_request``, ``not_found``, ``conflict``, ``unavailable``...),
    a message for people and where the problem is; ``retry_after``: seconds
    for a ``Retry-After`` header (a refusal for load)."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        where: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message if where is None else f"{where}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.where = where
        self.retry_after = retry_after

    def body(self) -> ApiError:
        return ApiError(
            error=self.error, message=self.message, where=self.where, status=self.status
        )


def not_found(what: str, key: str, *, where: str) -> ApiProblem:
    return ApiProblem(404, "not_found", f"no {what} {key!r}", where=where)


def store_full(store: str, operation: str, message: str) -> ApiProblem:
    """507: the run store could not write for want of disk space; nothing
    was acknowledged, so the same request may be sent again."""
    return ApiProblem(
        507,
        "insufficient_storage",
        f"the run store's disk is full; nothing was saved, send the request again after "
        f"Retry-After seconds ({message})",
        where=f"store {store} ({operation})",
        retry_after=STORE_FULL_RETRY_AFTER_S,
    )


def invalid(message: str, *, where: str) -> ApiProblem:
    return ApiProblem(422, "invalid_request", message, where=where)


__all__ = [
    "RETRY_AFTER_S",
    "STORE_FULL_RETRY_AFTER_S",
    "ApiProblem",
    "invalid",
    "not_found",
    "store_full",
]
