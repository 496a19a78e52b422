"""Model backends of tests: the OpenAI backend on a sim-server
(``sim_backend``), and one that wraps another, for tests that watch or hold
a backend's calls: a test subclasses ``ForwardingBackend`` and overrides
the one call it is about."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx

from agentrt.protocols import ModelReply, ModelRequest
from agentrt.runtime.models._backend import ModelBackend, StreamDelta
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.testing import SimServer

B = TypeVar("B", bound=ModelBackend)


def sim_backend(
    server: SimServer,
    name: str = "sim",
    models: Sequence[str] = ("m0",),
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    **config: Any,
) -> OpenAIBackend:
    """The OpenAI backend ``name`` on the running ``server``, serving
    ``models``, through ``transport`` when given; ``config``: the other
    ``OpenAIBackendConfig`` fields."""
    settings = OpenAIBackendConfig(
        name=name, base_url=f"{server.url}/v1", models=list(models), **config
    )
    return OpenAIBackend(settings, transport=transport)


class ForwardingBackend(Generic[B]):
    """A ``ModelBackend`` that passes every call to ``inner`` (of type ``B``).

    ``opens_inner``: ``async with`` this backend opens and closes ``inner``
    too.  Set it to ``False`` when the test opens ``inner`` itself, or when
    the wrapper is entered more than once (a ``ScriptedBackend`` cannot be
    reopened once closed)."""

    def __init__(self, inner: B, *, opens_inner: bool = True) -> None:
        self.inner = inner
        self.opens_inner = opens_inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def models(self) -> list[str]:
        return self.inner.models

    async def complete(self, request: ModelRequest) -> ModelReply:
        return await self.inner.complete(request)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        return self.inner.stream(request)

    async def __aenter__(self) -> Self:
        if self.opens_inner:
            await self.inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.opens_inner:
            await self.inner.__aexit__(exc_type, exc, tb)
