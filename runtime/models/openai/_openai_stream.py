"""Reading one streamed chat completion (``text/event-stream``).

Owns :class:`StreamReader`: it pulls body chunks from an open response,
frames them into SSE events, decodes each event into a ``ReplyChunk``,
feeds a :class:`~agentrt.runtime.models.openai._openai_reply.StreamAssembly`,
recognises ``[DONE]``, drains the body to its end afterwards (so the
connection is kept alive), treats an end before ``[DONE]`` as a cut stream
and enforces the call's deadline.  It never yields: the backend's async
generator stays the only one to close, and retries, stay with the backend.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import time
from typing import Final, final

import anyio
import httpx

from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.http._sse import SSEDecoder
from agentrt.runtime.models.openai._openai_errors import ErrorMapper
from agentrt.runtime.models.openai._openai_reply import StreamAssembly
from agentrt.runtime.wire._chat import ReplyChunk, reply_chunk_decoder

__all__ = ["StreamReader"]

_DONE: Final = b"[DONE]"


@final
class StreamReader:
    """One open streamed reply; call :meth:`next_deltas` until it returns
    ``None``, then read :attr:`assembly`; always :meth:`aclose` it."""

    __slots__ = ("_chunks", "_deadline", "_decoder", "_done", "_errors", "_response", "assembly")

    def __init__(self, response: httpx.Response, errors: ErrorMapper, deadline: float) -> None:
        self._response = response
        self._chunks = response.aiter_raw()
        self._errors = errors
        self._deadline = deadline
        self._decoder = SSEDecoder()
        self._done = False
        self.assembly = StreamAssembly()

    async def next_deltas(self) -> list[StreamDelta] | None:
        """The deltas of the next body chunk worth reporting; ``None`` once
        the body ended after ``[DONE]``.  Raises ``TransientError`` for a
        cut stream or an error event, ``MalformedReply`` for garbage and
        ``BackendTimeout`` past the deadline."""
        while True:
            try:
                raw = await anext(self._chunks)
            except StopAsyncIteration:
                if self._done:
                    return None
                raise self._errors.cut_stream() from None
            except Exception as exc:
                raise self._errors.transport(exc, "reading the stream") from exc
            if self._done:
                continue  # drain to EOF so that the connection is kept alive
            out: list[StreamDelta] = []
            for data in self._decoder.feed(raw):
                if data == _DONE:
                    self._done = True
                    break
                out.extend(self.assembly.add(self._decode(data)))
            if time.monotonic() > self._deadline:
                raise self._errors.deadline("stream still running at the call deadline")
            if out:
                return out

    def _decode(self, data: bytes) -> ReplyChunk:
        chunk = self._errors.decode(
            reply_chunk_decoder, data, "stream event is not a chat-completion chunk"
        )
        if chunk.error is not None:
            raise self._errors.in_stream(chunk.error)
        return chunk

    async def aclose(self) -> None:
        """Close the body iterator and the response (a no-op after EOF);
        shielded, so that a cancelled caller still closes the connection."""
        with anyio.CancelScope(shield=True):
            aclose = getattr(self._chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            await self._response.aclose()
