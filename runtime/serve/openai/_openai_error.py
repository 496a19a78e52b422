"""OpenAI's error shape for the daemon's OpenAI-compatible endpoints:
``OpenAIError`` (a refusal or failure, written as ``ErrorBody``) and
``decode_error`` (a 400 naming the field a decoding error points at).

Part of the daemon (``agentrt.runtime.serve``).
"""

from __future__ import annotations

import re
from typing import final

import msgspec

from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.wire._common import ErrorBody, ErrorDetail

__all__ = ["OpenAIError", "decode_error"]


@final
class OpenAIError(AgentrtError):
    """A refusal in OpenAI's shape: ``{"error": {message, type, param, code}}``.

    ``retry`` sets ``x-should-retry``, which the official clients obey (they
    retry 409 and 5xx by default; a failed run must not silently run again)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        run_id: str | None = None,
        retry: bool | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message if param is None else f"{param}: {message}")
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.run_id = run_id
        self.retry = retry
        self.retry_after = retry_after

    @property
    def type(self) -> str:
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> ErrorBody:
        return ErrorBody(
            error=ErrorDetail(
                message=self.message,
                type=self.type,
                param=self.param,
                code=self.code,
                run_id=self.run_id,
            )
        )


_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<field>[^`]+)`")
_UNKNOWN = re.compile(r"unknown field `(?P<field>[^`]+)`")


def decode_error(exc: msgspec.DecodeError, *, prefix: str = "") -> OpenAIError:
    """A 400 naming the field msgspec's message points at (``messages[0].role``)."""
    text = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        return OpenAIError(400, f"the request body is not valid JSON: {text}", code="invalid_json")
    found = _AT.search(text)
    path = found.group("path") if found else ""
    reason = text[: found.start()] if found else text
    named = _MISSING.search(reason) or _UNKNOWN.search(reason)
    if named is not None:
        path = f"{path}.{named.group('field')}" if path else named.group("field")
    param = ".".join(p for p in (prefix, path) if p) or None
    return OpenAIError(400, reason, param=param, code="invalid_value")
