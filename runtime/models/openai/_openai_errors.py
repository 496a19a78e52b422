"""What went wrong talking to an OpenAI-compatible server, as agentrt errors.

Owns the mapping of failures onto the error tree, each error naming the
backend and endpoint: transport failures (refused, timed out, cut), HTTP
statuses (retryable ones wrapped in ``TransientError`` with their
``Retry-After``; unknown models, bad requests, bad credentials final),
unparseable bodies and errors a server reports inside a stream.  Also reads
the human message out of the error bodies vLLM, SGLang, llama.cpp, OpenAI
and FastAPI send.

No I/O.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar, final

import msgspec

from agentrt.runtime.kernel._errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    InvalidRequestError,
    MalformedReply,
    RateLimited,
    UnknownModelError,
)
from agentrt.runtime.models._retry import RetryPolicy, TransientError, parse_retry_after
from agentrt.runtime.models.http._http_client import TransportFailure, classify_transport_error

__all__ = ["ErrorMapper", "error_message", "excerpt"]

E = TypeVar("E", bound=BackendError)
T = TypeVar("T")

_UNKNOWN_MODEL = re.compile(
    r"model.{0,200}(not found|does not exist|not exist|unknown|not served|no such)"
    r"|model_not_found|unknown model",
    re.IGNORECASE | re.DOTALL,
)


@final
class ErrorMapper:
    """Builds the errors of one backend and endpoint."""

    __slots__ = ("_policy", "backend", "endpoint")

    def __init__(self, *, backend: str, endpoint: str, policy: RetryPolicy) -> None:
        self.backend = backend
        self.endpoint = endpoint
        self._policy = policy

    def transport(self, exc: Exception, phase: str) -> Exception:
        """The error for ``exc`` escaping the transport while ``phase``: a
        ``TransientError`` when retrying may help; ``exc`` itself when it
        is not a transport failure (a bug must surface as is)."""
        kind = classify_transport_error(exc)
        reason = str(exc) or type(exc).__name__
        if kind is TransportFailure.TIMEOUT:
            return TransientError(self._error(BackendTimeout, f"timed out {phase}: {reason}"))
        if kind is TransportFailure.CONNECT:
            return TransientError(self._error(BackendUnavailable, f"cannot connect: {reason}"))
        if kind is TransportFailure.DROPPED:
            return TransientError(
                self._error(BackendUnavailable, f"connection dropped while {phase}: {reason}")
            )
        if kind is TransportFailure.PROTOCOL:
            return self.malformed(f"not a valid HTTP reply while {phase}: {reason}")
        return exc

    def status(self, status: int, headers: Mapping[str, str], body: bytes, model: str) -> Exception:
        """The error for a non-200 reply (``headers``: case-insensitive): a
        ``TransientError`` for statuses the policy retries (a 429 as
        ``RateLimited``), else the final one."""
        message = error_message(body)
        if status == 429 or self._policy.is_retryable_status(status):
            retry_after = parse_retry_after(headers.get("retry-after"))
            error: BackendError
            if status == 429:
                error = RateLimited(
                    f"rate limited (HTTP 429): {message}",
                    retry_after=retry_after,
                    backend=self.backend,
                    endpoint=self.endpoint,
                )
            else:
                error_type = BackendTimeout if status == 408 else BackendUnavailable
                error = self._error(error_type, f"HTTP {status}: {message}")
            # A throttling (429) or conflicting (409) server is alive.
            return TransientError(
                error, retry_after=retry_after, breaker_failure=status >= 500 or status == 408
            )
        return self._final_status(status, message, model)

    def _final_status(self, status: int, message: str, model: str) -> Exception:
        if status in (400, 404, 422) and _UNKNOWN_MODEL.search(message):
            return UnknownModelError(
                f"model {model!r} is unknown to {self.backend!r} at {self.endpoint} "
                f"(HTTP {status}): {message}"
            )
        if status == 404:
            return BackendError(
                "HTTP 404 (is base_url right? it should end with the API version, "
                f"e.g. /v1): {message}",
                backend=self.backend,
                endpoint=self.endpoint,
            )
        if status in (401, 403):
            return BackendError(
                f"authentication refused (HTTP {status}); check api_key: {message}",
                backend=self.backend,
                endpoint=self.endpoint,
            )
        if 400 <= status < 500:
            return InvalidRequestError(
                f"[{self.backend} {self.endpoint}] request rejected (HTTP {status}): {message}"
            )
        return self.malformed(f"unexpected HTTP {status}: {message}")

    def malformed(self, message: str) -> MalformedReply:
        return MalformedReply(message, backend=self.backend, endpoint=self.endpoint)

    def decode(self, decoder: msgspec.json.Decoder[T], data: bytes, what: str) -> T:
        """``data`` decoded, else a :class:`MalformedReply` that begins with
        ``what`` (``"reply is not a chat completion"``)."""
        try:
            return decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise self.malformed(f"{what} ({exc}): {excerpt(data)}") from None

    def in_stream(self, error: object) -> TransientError:
        """A failure the server reported inside a stream (vLLM, SGLang)."""
        return TransientError(
            self._error(
                BackendUnavailable,
                f"server reported an error inside the stream: {_describe(error)}",
            )
        )

    def cut_stream(self) -> TransientError:
        return TransientError(
            self._error(BackendUnavailable, "stream ended before [DONE] (connection cut)")
        )

    def deadline(self, message: str) -> BackendTimeout:
        return self._error(BackendTimeout, message)

    def _error(self, error_type: type[E], message: str) -> E:
        return error_type(message, backend=self.backend, endpoint=self.endpoint)


def excerpt(data: bytes, limit: int = 200) -> str:
    """The start of a body, for error messages."""
    text = data[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(data) > limit else ""))


def _describe(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str):
            return message
    return str(error)[:300]


def error_message(data: bytes) -> str:
    """The human part of an error body: ``{"error": {"message": ...}}``
    (OpenAI, llama.cpp, recent vLLM), ``{"message": ...}`` (older vLLM,
    SGLang), ``{"detail": ...}`` (FastAPI), else the text itself."""
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return excerpt(data) if data else "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return _describe(error)
        for key in ("error", "message", "detail"):
            value = body.get(key)
            if isinstance(value, str):
                return value
    return excerpt(data)
