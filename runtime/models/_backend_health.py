"""Is a model backend up?  ``probe_backend`` asks it the cheapest question
its server answers and says why not, for readiness checks.

Runtime floor: imports protocols and the floor; never agents, tools or
aggregators, nor any specific backend (it asks what a backend offers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import anyio
import msgspec

from agentrt.runtime.models._backend import ModelBackend

#: How long one probe may take by default.
PROBE_TIMEOUT_S: Final = 3.0


class BackendHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One backend's answer to a probe."""

    ok: bool
    detail: str = ""
    """What was asked and what came back (why it is down, when it is)."""


async def probe_backend(
    backend: ModelBackend, *, timeout_s: float = PROBE_TIMEOUT_S
) -> BackendHealth:
    """Probe ``backend`` within ``timeout_s``: an SGLang-style backend's
    ``health()`` (``/health`` of each replica: up when one answers), an
    OpenAI-compatible one's ``served_models()`` (``GET /models``).  A
    backend with neither (the embedded model, a scripted one, a user's)
    is in this process and counts as up.  Never raises for a backend that
    is down: the error is the ``detail``."""
    health: Callable[[], Awaitable[Mapping[str, bool]]] | None = getattr(backend, "health", None)
    listing: Callable[[], Awaitable[list[str]]] | None = getattr(backend, "served_models", None)
    try:
        with anyio.fail_after(timeout_s):
            if health is not None:
                replicas = await health()
                up = [url for url, ok in replicas.items() if ok]
                if up:
                    return BackendHealth(ok=True, detail=f"/health answered by {', '.join(up)}")
                down = ", ".join(replicas) or "no replica configured"
                return BackendHealth(ok=False, detail=f"no replica answers /health ({down})")
            if listing is not None:
                models = await listing()
                return BackendHealth(ok=True, detail=f"serves {', '.join(models) or 'no model'}")
    except TimeoutError:
        return BackendHealth(ok=False, detail=f"no answer to the probe within {timeout_s:g} s")
    except Exception as exc:  # a down server surfaces as any backend error
        return BackendHealth(ok=False, detail=f"{type(exc).__name__}: {exc}")
    return BackendHealth(ok=True, detail="in process (not probed)")


__all__ = ["PROBE_TIMEOUT_S", "BackendHealth", "probe_backend"]
