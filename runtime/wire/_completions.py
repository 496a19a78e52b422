"""The legacy completions wire (``POST /v1/completions``): the request as a
lenient server (the sim-server) reads it.

Pure data: no I/O.  Imports only msgspec.
"""

from __future__ import annotations

import msgspec

from agentrt.runtime.wire._common import StreamOptions

__all__ = ["CompletionRequest", "completion_request_decoder"]


class CompletionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/completions``: ``logprobs`` is the number of alternatives.
    Unknown fields are ignored, as real servers do."""

    prompt: str | list[str]
    model: str | None = None
    n: int = 1
    max_tokens: int | None = 16
    temperature: float | None = None
    seed: int | None = None
    logprobs: int | None = None
    echo: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None


completion_request_decoder = msgspec.json.Decoder(CompletionRequest)
