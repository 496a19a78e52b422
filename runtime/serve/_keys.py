"""Who is calling: API keys, their scopes and their request rates.

Owns ``Caller`` (the key a request carries: its name, its scopes),
``KeyRing`` (the daemon's keys by their SHA-256, the shared token, and one
request bucket per key with a ``rate_per_minute``), the scope each path
needs (``path_scope``) and ``new_key`` (what ``agentrt key`` prints).  A
key is never held, logged or compared in clear: only its SHA-256 is.
Nothing of runs or the store: ownership is checked where runs are read.

The roof: may import every layer.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from starlette.requests import HTTPConnection
from starlette.types import Scope

from agentrt.runtime.config._config_file import SCOPES
from agentrt.runtime.config._daemon_config import ServerConfig
from agentrt.runtime.serve._api_problem import ApiProblem

KEY_PREFIX: Final = "agentrt_"
"""Every key ``new_key`` makes starts so (secret scanners can spot one)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """The client a request comes from.  ``name`` is the key's name in
    ``[server.keys]``; ``None`` is the shared ``server.token`` (or, with no
    token and no keys, any client of a loopback daemon), which acts as an
    admin key and owns the runs made without a key."""

    name: str | None
    scopes: frozenset[str] = field(default_factory=lambda: frozenset(SCOPES))

    def can(self, scope: str) -> bool:
        if "admin" in self.scopes or scope in self.scopes:
            return True
        return scope == "runs:read" and "runs:read_all" in self.scopes

    @property
    def reads_all(self) -> bool:
        """Whether it reads (and cancels) every run, not only its own."""
        return self.can("runs:read_all")

    def sees(self, owner: str | None) -> bool:
        """Whether a run or thread made by ``owner`` exists for this caller."""
        return self.reads_all or owner == self.name

    def require(self, scope: str) -> None:
        """Raise 403 naming ``scope`` when the caller lacks it."""
        if not self.can(scope):
            raise ApiProblem(
                403,
                "forbidden",
                f"key {self.name!r} lacks the scope {scope!r} (it has "
                f"{', '.join(sorted(self.scopes))})",
                where=f"server.keys.{self.name}.scopes",
            )


ADMIN: Final = Caller(None)
"""The shared token, or anyone when the daemon has neither token nor keys."""
CALLER: Final = "agentrt.caller"
"""Where in an ASGI scope the ``Guard`` puts the request's ``Caller``."""


def caller_of(request: HTTPConnection | Scope) -> Caller:
    """The ``Caller`` the ``Guard`` found for a request (``ADMIN`` when the
    daemon asks for no token)."""
    scope = request.scope if isinstance(request, HTTPConnection) else request
    caller = scope.get(CALLER, ADMIN)
    assert isinstance(caller, Caller)
    return caller


def digest(key: str) -> str:
    """The SHA-256 of ``key``, as ``[server.keys.NAME] sha256`` holds it."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A new random key (256 bits) and its SHA-256."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, digest(key)


class _Bucket:
    """``rate`` requests a minute, a burst of as many."""

    def __init__(self, rate: int, now: float) -> None:
        self.capacity = float(rate)
        self.per_second = rate / 60.0
        self.tokens = float(rate)
        self.at = now

    def take(self, now: float) -> float:
        """0 when a request may go now, else the seconds until one may."""
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.per_second)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.per_second


class KeyRing:
    """The daemon's keys (``server.keys``) and shared token (``server.token``).

    ``identify`` gives the ``Caller`` a bearer token stands for; ``admit``
    spends one request of a key's ``rate_per_minute``.  ``clock`` is
    injectable for tests.  Used from the API thread only."""

    def __init__(
        self,
        server: ServerConfig,
        *,
        token: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._token = token.encode() if token else None
        self._by_digest = {
            key.sha256: Caller(name, frozenset(key.scopes)) for name, key in server.keys.items()
        }
        self._rates = {
            name: key.rate_per_minute
            for name, key in server.keys.items()
            if key.rate_per_minute is not None
        }
        self._buckets: dict[str, _Bucket] = {}
        self._clock = clock

    @property
    def required(self) -> bool:
        """Whether requests must carry a token or key at all."""
        return self._token is not None or bool(self._by_digest)

    def identify(self, given: str) -> Caller | None:
        """The caller ``given`` (a bearer token) stands for, or ``None``."""
        if self._token is not None and hmac.compare_digest(given.encode(), self._token):
            return ADMIN
        # Looked up by digest: the key itself is never compared or kept.
        return self._by_digest.get(digest(given))

    def admit(self, caller: Caller) -> None:
        """Spend one request of the caller's rate, or raise 429 naming it."""
        if caller.name is None:
            return
        rate = self._rates.get(caller.name)
        if rate is None:
            return
        now = self._clock()
        bucket = self._buckets.get(caller.name)
        if bucket is None:
            bucket = self._buckets[caller.name] = _Bucket(rate, now)
        wait = bucket.take(now)
        if wait > 0:
            raise ApiProblem(
                429,
                "rate_limited",
                f"key {caller.name!r} made its {rate} requests per minute; retry after "
                "Retry-After seconds",
                where=f"server.keys.{caller.name}.rate_per_minute",
                retry_after=max(1, math.ceil(wait)),
            )


_OWNED_PREFIXES: Final = ("/v1/runs/", "/v1/threads", "/v1/responses", "/v1/conversations")
"""Routes over what a key owns (runs, threads; responses are runs and
conversations threads): each checks the owner itself, 404 for another key's."""


def path_scope(method: str, path: str) -> tuple[str, ...]:
    """The scopes a request needs before its route runs (the routes over
    runs and threads check ownership themselves).  Paths not named here
    (``/mcp``, ``/metrics``, the MCP authorizations) need ``admin``."""
    if path in ("/openapi.json", "/v1/agents"):
        return ()
    if path in ("/v1/runs", "/v1/elicitations") or path.startswith(_OWNED_PREFIXES):
        return ("runs:read",) if method in ("GET", "HEAD") else ("runs:create",)
    if path == "/v1/chat/completions" or path.startswith("/v1/models"):
        return ("runs:create",)
    return ("admin",)


__all__ = [
    "ADMIN",
    "CALLER",
    "KEY_PREFIX",
    "Caller",
    "KeyRing",
    "caller_of",
    "digest",
    "new_key",
    "path_scope",
]
