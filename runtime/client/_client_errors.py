"""The daemon's refusals as exceptions of agentrt's error tree.

::

    UserError
    └── RequestRefused        a 4xx: fix the request (status, error, where)
        ├── Unauthorized      401/403: a missing or wrong token, an origin
        └── NotFound          404: no such run, rollout or question
    RuntimeFailure
    └── DaemonUnavailable     5xx, 429, no connection, no answer in time
                              (retry_after when the daemon said)

Imports protocols and the kernel's error tree only.
"""

from __future__ import annotations

from typing import final

import msgspec

from agentrt.protocols._api import ApiError
from agentrt.runtime.kernel._errors import RuntimeFailure, UserError


class RequestRefused(UserError):
    """The daemon refused the request (4xx): ``status``, ``error`` (its short
    kind: ``invalid_request``, ``conflict``...), ``message`` and ``where``
    (the field, header or path at fault); ``endpoint`` is ``METHOD path``."""

    def __init__(self, problem: ApiError, endpoint: str) -> None:
        where = f" at {problem.where}" if problem.where else ""
        super().__init__(
            f"{endpoint} refused ({problem.status} {problem.error}){where}: {problem.message}"
        )
        self.status = problem.status
        self.error = problem.error
        self.message = problem.message
        self.where = problem.where
        self.endpoint = endpoint


@final
class Unauthorized(RequestRefused):
    """401 or 403: the bearer token is missing or wrong (or the origin is not trusted)."""


@final
class NotFound(RequestRefused):
    """404: the run (rollout, question) named in ``where`` does not exist."""


@final
class DaemonUnavailable(RuntimeFailure):
    """The daemon could not serve the request now: a 5xx, a 429 (its limits;
    ``retry_after`` in seconds when it said), no connection or no answer
    within the client's timeout.  ``status`` is ``None`` without a response."""

    def __init__(
        self,
        message: str,
        endpoint: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(f"{endpoint}: {message}")
        self.status = status
        self.retry_after = retry_after
        self.where = where
        self.endpoint = endpoint


def refusal(status: int, body: bytes, endpoint: str, retry_after: str | None) -> Exception:
    """The exception for a response of ``status`` (>= 400) with ``body``."""
    try:
        problem = msgspec.json.decode(body, type=ApiError)
    except (msgspec.DecodeError, msgspec.ValidationError):
        text = body[:300].decode("utf-8", "replace").strip() or "no body"
        problem = ApiError(error="http_error", message=text, status=status)
    problem = msgspec.structs.replace(problem, status=status)
    if status == 429 or status >= 500:
        after: float | None = None
        if retry_after is not None:
            try:
                after = float(retry_after)
            except ValueError:
                after = None
        where = f" at {problem.where}" if problem.where else ""
        return DaemonUnavailable(
            f"{status} {problem.error}{where}: {problem.message}",
            endpoint,
            status=status,
            retry_after=after,
            where=problem.where,
        )
    if status in (401, 403):
        return Unauthorized(problem, endpoint)
    if status == 404:
        return NotFound(problem, endpoint)
    return RequestRefused(problem, endpoint)


__all__ = ["DaemonUnavailable", "NotFound", "RequestRefused", "Unauthorized", "refusal"]
