"""Model requests and replies, independent of any serving protocol.

Backends translate these to OpenAI chat completions, SGLang's ``/generate``
or llama.cpp calls.  Every reply says which model served it, what it used
(as the server reported) and how long it took.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agentrt.protocols._messages import AssistantMessage, ChatMessage
from agentrt.protocols._tools import ToolSpec
from agentrt.protocols._usage import Usage

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]


# gc=False: frozen values holding no reference cycles (only other wire values,
# strings, numbers and lists of them), kept by the thousand while rollouts run;
# the cyclic collector need not track them.
class SamplingParams(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """Sampling controls shared by every backend."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    stop: list[str] = []
    seed: int | None = None


class ModelRequest(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One chat request.  ``n`` asks for several samples of the same prompt;
    ``logprobs``/``top_logprobs`` ask for token log-probabilities;
    ``request_id`` is passed to servers that accept one (SGLang's ``rid``)."""

    messages: list[ChatMessage]
    model: str | None = None
    tools: list[ToolSpec] = []
    tool_choice: Literal["auto", "none", "required"] = "auto"
    sampling: SamplingParams = SamplingParams()
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0
    request_id: str | None = None
    affinity_key: str | None = None
    """Requests sharing this key (for example a run id) should be served by
    the same replica so its prefix cache is reused; backends with a single
    endpoint ignore it."""


class TopLogprob(msgspec.Struct, frozen=True, gc=False):
    token: str
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True, gc=False):
    """One generated token with its log-probability and alternatives."""

    token: str
    logprob: float
    top: list[TopLogprob] = []


class Choice(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One sample of a reply."""

    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason = "stop"
    logprobs: list[TokenLogprob] | None = None


class ModelReply(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A backend's answer: the choices, the model that served it, the usage
    the server reported and the wall-clock latency of the call."""

    model: str
    choices: list[Choice]
    usage: Usage
    latency_s: float
    backend: str = ""
    request_id: str | None = None

    @property
    def message(self) -> AssistantMessage:
        """The first choice's message (the common ``n=1`` case)."""
        return self.choices[0].message
