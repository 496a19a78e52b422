"""Request shapes the sim-server accepts, decoded once with msgspec.

OpenAI chat and text completions, and SGLang's ``/generate``
(``GenerateReqInput``: ``text`` or ``input_ids``, ``sampling_params``,
``rid``, ``return_logprob``, ``logprob_start_len``, ``top_logprobs_num``,
``return_text_in_logprobs``, ``stream``).  Unknown fields are ignored, as
real servers do; chat messages are decoded (into ``agentrt.protocols``
messages, so the roles are ``system``, ``user``, ``assistant``, ``tool``)
by ``sim_chat``, once per distinct message.

Also the small response helpers shared by the endpoints.  Pure data.
"""

from __future__ import annotations

from typing import Any

import msgspec


class FunctionDef(msgspec.Struct, frozen=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


class ToolDef(msgspec.Struct, frozen=True):
    function: FunctionDef
    type: str = "function"


class StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool = False


class ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/chat/completions``.  Messages and tools stay raw here: the
    sim-server decodes each distinct message once (``sim_chat``)."""

    messages: list[msgspec.Raw]
    model: str | None = None
    tools: msgspec.Raw = msgspec.Raw()  # empty when absent
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    n: int = 1
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None

    def tool_choice_name(self) -> str:
        """``auto``/``none``/``required`` or the name of a forced function."""
        choice = self.tool_choice
        if choice is None:
            return "auto"
        if isinstance(choice, str):
            return choice
        fn = choice.get("function")
        return str(fn.get("name", "required")) if isinstance(fn, dict) else "required"


class CompletionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/completions``: ``logprobs`` is the number of alternatives."""

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


class GenerateSampling(msgspec.Struct, frozen=True, kw_only=True):
    """The ``sampling_params`` of ``/generate`` that change the simulation;
    the others (``top_p``, ``top_k``, penalties, ``stop``...) are accepted
    and ignored."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    n: int = 1
    sampling_seed: int | None = None


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /generate`` (SGLang's ``GenerateReqInput``)."""

    text: str | list[str] | None = None
    input_ids: list[Any] | None = None
    sampling_params: GenerateSampling | None = None
    rid: str | list[str] | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False


chat_decoder = msgspec.json.Decoder(ChatRequest)
completion_decoder = msgspec.json.Decoder(CompletionRequest)
generate_decoder = msgspec.json.Decoder(GenerateRequest)
encoder = msgspec.json.Encoder()


def openai_error(message: str, kind: str, code: int) -> bytes:
    """An OpenAI-shaped error body."""
    return encoder.encode({"error": {"message": message, "type": kind, "code": code}})


def sse(payload: object) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return b"data: " + encoder.encode(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
