"""SGLang's native ``/generate`` wire format: the msgspec shapes of a reply,
the request body of a ``ModelRequest`` (rendered with ``sglang_template``),
and replies (whole, or streamed cumulative events) to
``ModelReply``/``StreamDelta``.

Pure data: no I/O.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentrt.protocols._messages import AssistantMessage
from agentrt.protocols._model import (
    Choice,
    FinishReason,
    ModelReply,
    ModelRequest,
    TokenLogprob,
    TopLogprob,
)
from agentrt.protocols._tools import ToolSpec
from agentrt.protocols._usage import Usage
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.sglang._sglang_template import (
    STOP,
    TOOL_CALL_OPEN,
    held_back,
    parse_tool_calls,
    render_chat,
)

__all__ = [
    "GenerateOutput",
    "MetaInfo",
    "StreamAssembly",
    "build_payload",
    "forced_tool_call",
    "outputs_to_reply",
    "sample_rids",
]

encoder = msgspec.json.Encoder()


class SGLangFinish(msgspec.Struct, frozen=True):
    type: str
    message: str | None = None


class MetaInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""
    finish_reason: SGLangFinish | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    output_token_logprobs: list[list[Any]] | None = None
    output_top_logprobs: list[list[list[Any]] | None] | None = None


class GenerateOutput(msgspec.Struct, frozen=True, kw_only=True):
    """One sample of a ``/generate`` reply (or one streamed event)."""

    text: str = ""
    output_ids: list[int] | None = None
    meta_info: MetaInfo = MetaInfo()
    index: int = 0


reply_decoder = msgspec.json.Decoder(GenerateOutput | list[GenerateOutput])
event_decoder = msgspec.json.Decoder(GenerateOutput)


def forced_tool_call(request: ModelRequest) -> str:
    """What every sample of ``request`` starts with: when it must call a
    tool (``tool_choice = "required"``, tools offered), the opening
    ``<tool_call>`` line, written at the end of the prompt; its text is then
    constrained to a call's JSON (``tool_call_schema``).  Else nothing."""
    return TOOL_CALL_OPEN + "\n" if request.tool_choice == "required" and request.tools else ""


def tool_call_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of one call of one of ``tools``:
    ``{"name": ..., "arguments": {...}}``, its arguments per the tool's."""
    variants = [
        {
            "type": "object",
            "properties": {"name": {"enum": [tool.name]}, "arguments": tool.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def sample_rids(rid: str | None, n: int) -> list[str]:
    """The ids of the ``n`` samples of request ``rid`` at the server (none
    without ``rid``): ``rid`` itself for one sample, else ``{rid}_{i}``."""
    if not rid:
        return []
    return [rid] if n <= 1 else [f"{rid}_{i}" for i in range(n)]


def build_payload(
    request: ModelRequest, *, prompt: str | None = None, stream: bool = False
) -> dict[str, Any]:
    """The ``/generate`` body for a chat request (``prompt`` overrides the
    rendered chat template).

    ``n > 1`` samples go as a batch of ``n`` copies of the prompt, each
    with its id from ``sample_rids``, not as SGLang's ``n``: for that one
    SGLang gives every sample a random id of its own (it regenerates them,
    sglang ``TokenizerManager._handle_batch_request``), so a client could
    not abort them (``/abort_request`` takes one sample's id).  The reply
    has the same shape either way: a list of samples, streamed events
    tagged with the sample's ``index``."""
    s = request.sampling
    sampling: dict[str, Any] = {
        "max_new_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "stop": [*s.stop, *STOP],
    }
    if s.seed is not None:
        sampling["sampling_seed"] = s.seed
    forced = forced_tool_call(request)
    if forced:
        # SGLang's constrained decoding (its grammar backend): the reply is a call.
        sampling["json_schema"] = msgspec.json.encode(tool_call_schema(request.tools)).decode()
    if prompt is None:
        prompt = render_chat(request.messages, request.tools) + forced
    n = request.n
    if n < 1:
        sampling["n"] = n  # the server refuses it, saying why
    body: dict[str, Any] = {
        "text": [prompt] * n if n > 1 else prompt,
        "sampling_params": sampling,
        "stream": stream,
    }
    rids = sample_rids(request.request_id, n)
    if rids:
        body["rid"] = rids if n > 1 else rids[0]
    if request.logprobs or request.top_logprobs > 0:
        body["return_logprob"] = True
        body["top_logprobs_num"] = request.top_logprobs
        body["return_text_in_logprobs"] = True
    return body


def _token(entry: list[Any]) -> str:
    text = entry[2] if len(entry) > 2 else None
    return text if isinstance(text, str) else f"<id:{entry[1]}>"


def _logprob(entry: list[Any]) -> float:
    value = entry[0]
    return float(value) if isinstance(value, int | float) else float("-inf")


def convert_logprobs(meta: MetaInfo, start: int = 0) -> list[TokenLogprob]:
    """``TokenLogprob``s of the output tokens from position ``start``."""
    entries = meta.output_token_logprobs or []
    tops = meta.output_top_logprobs or []
    out: list[TokenLogprob] = []
    for pos in range(start, len(entries)):
        entry = entries[pos]
        alternatives = tops[pos] if pos < len(tops) else None
        out.append(
            TokenLogprob(
                token=_token(entry),
                logprob=_logprob(entry),
                top=[TopLogprob(_token(a), _logprob(a)) for a in alternatives or []],
            )
        )
    return out


def finish_of(meta: MetaInfo, has_tool_calls: bool) -> FinishReason:
    kind = meta.finish_reason.type if meta.finish_reason is not None else "stop"
    if kind == "length":
        return "length"
    if kind == "abort":
        return "error"
    return "tool_calls" if has_tool_calls else "stop"


def abort_message(outputs: list[GenerateOutput]) -> str | None:
    """The server's message when it aborted a sample, else ``None``."""
    for output in outputs:
        finish = output.meta_info.finish_reason
        if finish is not None and finish.type == "abort":
            return finish.message or "request aborted by the server"
    return None


def _choice(
    output: GenerateOutput, index: int, logprobs: bool, call_prefix: str, forced: str
) -> Choice:
    text = forced + output.text
    content, calls = parse_tool_calls(text, call_id_prefix=f"{call_prefix}{index}_")
    return Choice(
        index=index,
        message=AssistantMessage(content=content, tool_calls=calls),
        finish_reason=finish_of(output.meta_info, bool(calls)),
        logprobs=convert_logprobs(output.meta_info) if logprobs else None,
    )


def usage_of(outputs: list[GenerateOutput]) -> Usage:
    first = outputs[0].meta_info
    return Usage(
        prompt_tokens=first.prompt_tokens,
        completion_tokens=sum(o.meta_info.completion_tokens for o in outputs),
        cached_prompt_tokens=first.cached_tokens,
    )


def outputs_to_reply(
    outputs: list[GenerateOutput],
    request: ModelRequest,
    *,
    model: str,
    latency_s: float,
    backend: str,
    call_prefix: str = "call_",
) -> ModelReply:
    """A ``ModelReply`` from the samples of one ``/generate`` reply.  Usage:
    prompt and cached tokens of the first sample (the prompt is processed
    once), completion tokens summed over samples."""
    logprobs = request.logprobs or request.top_logprobs > 0
    return ModelReply(
        model=model,
        choices=[
            _choice(o, i, logprobs, call_prefix, forced_tool_call(request))
            for i, o in enumerate(outputs)
        ],
        usage=usage_of(outputs),
        latency_s=latency_s,
        backend=backend,
        request_id=request.request_id,
    )


class _Sample:
    __slots__ = ("emitted", "last", "logprobs_seen", "text")

    def __init__(self) -> None:
        self.text = ""
        self.emitted = 0
        self.logprobs_seen = 0
        self.last: GenerateOutput | None = None


class StreamAssembly:
    """Turns streamed ``/generate`` events (cumulative ``text`` per sample
    ``index``) into content deltas.  Text from a ``<tool_call>`` tag on is
    held back (and a trailing partial tag until it is ruled out); at the
    end each parsed call is emitted as one tool-call delta."""

    def __init__(self, n: int, logprobs: bool, forced: str = "") -> None:
        """``forced``: the text every sample starts with, not generated
        (``forced_tool_call``)."""
        self._samples = [_Sample() for _ in range(max(n, 1))]
        self._logprobs = logprobs
        self._forced = forced

    def add(self, event: GenerateOutput) -> list[StreamDelta]:
        if not 0 <= event.index < len(self._samples):
            return []
        sample = self._samples[event.index]
        text = self._forced + event.text
        sample.text = text
        sample.last = event
        tag = text.find("<tool_call>", max(sample.emitted - len("<tool_call>"), 0))
        limit = tag if tag >= 0 else len(text) - held_back(text)
        deltas: list[StreamDelta] = []
        logprobs: list[TokenLogprob] = []
        if self._logprobs:
            logprobs = convert_logprobs(event.meta_info, sample.logprobs_seen)
            sample.logprobs_seen += len(logprobs)
        if limit > sample.emitted or logprobs:
            piece = text[sample.emitted : limit] if limit > sample.emitted else ""
            sample.emitted = max(sample.emitted, limit)
            deltas.append(StreamDelta(index=event.index, content=piece, logprobs=logprobs))
        return deltas

    def outputs(self) -> list[GenerateOutput]:
        """The final event of each sample (the whole text, final meta_info)."""
        return [s.last or GenerateOutput() for s in self._samples]

    def finish(self, call_prefix: str) -> list[StreamDelta]:
        """The held-back text and tool calls of every sample."""
        deltas: list[StreamDelta] = []
        for index, sample in enumerate(self._samples):
            _, calls = parse_tool_calls(sample.text, call_id_prefix=f"{call_prefix}{index}_")
            if not calls and len(sample.text) > sample.emitted:
                deltas.append(StreamDelta(index=index, content=sample.text[sample.emitted :]))
            for k, call in enumerate(calls):
                deltas.append(
                    StreamDelta(
                        index=index,
                        tool_call_index=k,
                        tool_call_id=call.id,
                        tool_name=call.function.name,
                        tool_arguments=call.function.arguments,
                    )
                )
        return deltas
