"""The ``ModelBackend`` protocol every backend implements, and ``StreamDelta``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

import msgspec

from agentrt.protocols._model import ModelReply, ModelRequest, TokenLogprob


class StreamDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of a streamed reply.  The final item of a stream has ``reply``
    set to the assembled ``ModelReply`` (with tool calls joined from their
    deltas and the server's usage).  A delta with ``restart`` set carries
    nothing else: the stream was cut after some deltas and the call was
    retried, so drop every delta received before it (the reply starts over)."""

    index: int = 0
    content: str = ""
    reasoning: str = ""
    tool_call_index: int | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_arguments: str = ""
    logprobs: list[TokenLogprob] = []
    reply: ModelReply | None = None
    restart: bool = False


@runtime_checkable
class ModelBackend(Protocol):
    """Something that answers chat requests.

    Every reply carries the usage the server reported, the call's latency
    and the model that served it.  Cancelling the awaiting task leaves no
    request running.  Failures raise ``runtime.errors.BackendError``
    subclasses naming the backend and endpoint.  A backend is an async
    context manager (``async with backend:`` opens connections or loads
    weights).  Optionally, ``max_concurrency``: how many requests it can
    take at once (read it with ``backend_concurrency``)."""

    @property
    def name(self) -> str:
        """A short name for logs and routing records (e.g. ``vllm-smol``)."""
        ...

    @property
    def models(self) -> list[str]:
        """The model names this backend serves."""
        ...

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer ``request`` in one reply."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        """Answer ``request`` as deltas; the last delta carries the reply."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def backend_concurrency(backend: ModelBackend) -> int | None:
    """How many requests ``backend`` can take at once: its ``max_concurrency``
    property (an HTTP backend's connection pool limit, 1 for the embedded
    model), or ``None`` (no limit) for a backend without one, such as a
    user's own.  ``max_concurrency`` is optional, not part of the protocol.

    Raises ``TypeError`` when the property is neither an ``int`` nor
    ``None``, ``ValueError`` when it is below 1."""
    limit: object = getattr(backend, "max_concurrency", None)
    if limit is None:
        return None
    where = f"backend {backend.name!r} ({type(backend).__name__}).max_concurrency"
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"{where} must be an int or None, got {limit!r}")
    if limit < 1:
        raise ValueError(f"{where} must be at least 1, got {limit}")
    return limit
