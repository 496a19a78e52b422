"""The sim-server's OpenAI-compatible endpoints.

``POST /v1/chat/completions``: tools and parallel tool calls, ``n``,
``logprobs``/``top_logprobs``, ``seed``, ``stream`` (SSE chunks in OpenAI's
``chat.completion.chunk`` format, tool calls as ``delta.tool_calls`` with
the id and name first and the arguments in pieces,
``stream_options.include_usage`` adding a final usage chunk, then
``data: [DONE]``).  Usage carries ``prompt_tokens_details.cached_tokens``.
A request header ``X-Sim-Delay-Ms`` delays that request's first token by as
much more (a test's slow request among fast ones).

``POST /v1/completions``: a prompt (or a list), ``n``, legacy ``logprobs``
(an int), ``stream``.  ``GET /v1/models`` lists the one served model.

Requests decode into the types the model client encodes them with
(``RawChatRequest``); usage, logprobs, tool calls and the model list are
written with the daemon's types (``agentrt.runtime.wire``), byte for byte
what the daemon writes.  Imports the engine, model and HTTP helpers of the
sim-server.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from aiohttp import web

from agentrt.runtime.models.sglang._sglang_template import IM_END
from agentrt.runtime.testing._tokens import (
    encode_prompt,
    synthetic_logprob,
    synthetic_top,
    tokenize,
)
from agentrt.runtime.testing.sim._sim_http import (
    SSE_DONE,
    Endpoints,
    Frame,
    encoder,
    error_response,
    json_response,
    sse,
)
from agentrt.runtime.testing.sim._sim_model import SimChoice, view_from_text
from agentrt.runtime.wire._chat import (
    Delta,
    FunctionCallOut,
    PromptDetails,
    TokenLogprobOut,
    ToolCallDelta,
    ToolCallOut,
    TopLogprobOut,
    UsageOut,
    raw_chat_decoder,
)
from agentrt.runtime.wire._common import ModelCard, ModelList
from agentrt.runtime.wire._completions import completion_request_decoder

MAX_N = 128
DEFAULT_MAX_TOKENS = 4096


#: The first delta of every streamed choice.
_ROLE_DELTA = encoder.encode(Delta(role="assistant", content=""))


def _lp_entry(piece: str, pos: int, k: int, salt: int) -> TokenLogprobOut:
    return TokenLogprobOut(
        token=piece,
        logprob=synthetic_logprob(piece, pos, salt),
        bytes=list(piece.encode()),
        top_logprobs=[
            TopLogprobOut(token=t, logprob=lp, bytes=list(t.encode()))
            for t, lp in synthetic_top(piece, pos, k, salt)
        ],
    )


def _chat_logprobs(pieces: list[str], k: int, salt: int) -> list[TokenLogprobOut]:
    return [_lp_entry(piece, pos, k, salt) for pos, piece in enumerate(pieces)]


def _usage(prompt: int, completion: int, cached: int) -> UsageOut:
    return UsageOut(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptDetails(cached_tokens=cached),
    )


def _message(choice: SimChoice) -> dict[str, Any]:
    """As vLLM writes it: ``tool_calls`` only when there are some."""
    message: dict[str, Any] = {"role": "assistant", "content": choice.content}
    if choice.tool_calls:
        message["tool_calls"] = [
            ToolCallOut(id=cid, function=FunctionCallOut(name=name, arguments=args))
            for cid, name, args in choice.tool_calls
        ]
    return message


def _chat_frames(
    choice: SimChoice,
    index: int,
    *,
    envelope: tuple[bytes, bytes],
    start: float,
    step: float,
    lp: int,
) -> list[Frame]:
    """SSE frames of one streamed choice: role, content or tool-call pieces,
    then the finish reason; ``lp`` < 0 means no logprobs.  ``envelope`` is
    the chunk's JSON before and after its ``choices`` list.  Frames are
    spliced from bytes (one ``encode`` per piece): streams are the hot path."""
    enc = encoder.encode
    deltas: list[bytes] = [_ROLE_DELTA]
    logprobs: list[bytes] = [b"null"]
    if choice.tool_calls:
        for k, (cid, name, args) in enumerate(choice.tool_calls):
            head = ToolCallDelta(index=k, id=cid, function=FunctionCallOut(name=name, arguments=""))
            deltas.append(enc(Delta(tool_calls=[head])))
            logprobs.append(b"null")
            prefix = b'{"tool_calls":[{"index":%d,"function":{"arguments":' % k
            for piece in tokenize(args):
                deltas.append(prefix + enc(piece) + b"}}]}")
                logprobs.append(b"null")
    else:
        for pos, piece in enumerate(choice.pieces):
            deltas.append(b'{"content":' + enc(piece) + b"}")
            logprobs.append(
                enc({"content": [_lp_entry(piece, pos, lp, index)]}) if lp >= 0 else b"null"
            )
    before, after = envelope
    opening = before + b'{"index":%d,"delta":' % index
    closing = b',"finish_reason":null}' + after
    frames: list[Frame] = []
    gap = step * len(choice.pieces) / max(len(deltas) - 1, 1)
    for j, (delta, lps) in enumerate(zip(deltas, logprobs, strict=True)):
        body = opening + delta + b',"logprobs":' + lps + closing
        frames.append((start + max(j - 1, 0) * gap, body))
    end = {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice.finish_reason}
    frames.append((frames[-1][0], before + enc(end) + after))
    return frames


def _tools_raw(tools: list[msgspec.Raw] | None) -> msgspec.Raw:
    """A request's tools as one JSON array (empty when it offers none): the
    key of the prompt cache's tools entry."""
    return msgspec.Raw(b"[" + b",".join(tools) + b"]") if tools else msgspec.Raw()


def _envelope(chunk_head: dict[str, Any]) -> tuple[bytes, bytes]:
    """``data: {...head, "choices": [`` and ``]}\\n\\n``: a chunk is the two
    around its encoded choice (the head is encoded once per stream)."""
    head = encoder.encode(chunk_head)
    return b"data: " + head[:-1] + b',"choices":[', b"]}\n\n"


class _Role(msgspec.Struct):
    role: str


_role_decoder = msgspec.json.Decoder(_Role)


class OpenAIEndpoints(Endpoints):
    """Handlers for ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``."""

    def _check(self, model: str | None, n: int, max_tokens: int | None) -> web.Response | None:
        if model and model != self.engine.config.model:
            return error_response(
                self.engine, f"The model `{model}` does not exist.", "NotFoundError", 404
            )
        if not 1 <= n <= MAX_N:
            return self._bad_request(f"n must be between 1 and {MAX_N}, got {n}")
        if max_tokens is not None and max_tokens < 1:
            return self._bad_request(f"max_tokens must be at least 1, got {max_tokens}")
        return None

    async def models(self, request: web.Request) -> web.Response:
        self.engine.requests["/v1/models"] += 1
        cfg = self.engine.config
        card = ModelCard(id=cfg.model, created=int(self.engine.started_at), owned_by="agentrt-sim")
        return json_response(encoder.encode(ModelList(data=[card])))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        engine = self.engine
        req = await self._decode(
            request, raw_chat_decoder, "/v1/chat/completions", "chat completion request"
        )
        if isinstance(req, web.Response):
            return req
        max_tokens = req.max_completion_tokens or req.max_tokens
        gen = self._generation(request, "/v1/chat/completions", request.headers.get("X-Request-Id"))
        async with gen:
            problem = self._check(req.model, req.n, max_tokens)
            if problem is not None:
                return problem
            early = await gen.early_fault()
            if early is not None:
                return early
            try:
                view, prompt = engine.chats.prompt(
                    req.messages, _tools_raw(req.tools), req.tool_choice_name()
                )
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return self._bad_request(f"invalid chat completion request: {exc}")
            engine.saw_messages(
                request.headers.get("X-Request-Id"),
                [_role_decoder.decode(m).role for m in req.messages],
            )
            prompt_ids = prompt.ids
            cached, ttft = engine.prefill(prompt_ids)
            ttft += _extra_delay(request)
            temperature = 1.0 if req.temperature is None else req.temperature
            choices = [
                engine.reply(
                    view,
                    seed=req.seed,
                    index=i,
                    temperature=temperature,
                    max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                    parallel=req.parallel_tool_calls is not False,
                )
                for i in range(req.n)
            ]
            completion = sum(len(c.pieces) for c in choices)
            usage = _usage(len(prompt_ids), completion, cached)
            longest = max(len(c.pieces) for c in choices)
            full = [prompt.extend_tokens(c.pieces, IM_END) for c in choices]
            lp = (req.top_logprobs or 0) if req.logprobs else -1
            cid = engine.next_id("chatcmpl-sim")
            created = int(time.time())
            step = engine.config.token_ms / 1000
            gen.generating(
                len(prompt_ids),
                sorted(ttft + k * step for c in choices for k in range(len(c.pieces))),
            )
            if not req.stream:
                body = {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": engine.config.model,
                    "usage": usage,
                    "choices": [
                        {
                            "index": i,
                            "message": _message(c),
                            "finish_reason": c.finish_reason,
                            "logprobs": {"content": _chat_logprobs(c.pieces, lp, i)}
                            if lp >= 0
                            else None,
                        }
                        for i, c in enumerate(choices)
                    ],
                }
                delay = ttft + engine.decode_seconds(longest)
                response = await gen.json(encoder.encode(body), delay)
                engine.complete(full, len(prompt_ids), completion, cached)
                return response
            head = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": engine.config.model,
            }
            envelope = _envelope(head)
            frames = [
                f
                for i, c in enumerate(choices)
                for f in _chat_frames(c, i, envelope=envelope, start=ttft, step=step, lp=lp)
            ]
            if len(choices) > 1:
                frames.sort(key=lambda f: f[0])
            if req.stream_options is not None and req.stream_options.include_usage:
                frames.append((frames[-1][0], sse({**head, "choices": [], "usage": usage})))
            response = await gen.stream(frames, SSE_DONE)
            engine.complete(full, len(prompt_ids), completion, cached)
            return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        engine = self.engine
        req = await self._decode(
            request, completion_request_decoder, "/v1/completions", "completion request"
        )
        if isinstance(req, web.Response):
            return req
        gen = self._generation(request, "/v1/completions", request.headers.get("X-Request-Id"))
        async with gen:
            problem = self._check(req.model, req.n, req.max_tokens)
            if problem is not None:
                return problem
            early = await gen.early_fault()
            if early is not None:
                return early
            prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
            temperature = 1.0 if req.temperature is None else req.temperature
            prompt_tokens = cached_total = completion = longest = 0
            ttft = 0.0
            full: list[list[int]] = []
            outs: list[tuple[int, SimChoice]] = []
            for p, prompt in enumerate(prompts):
                view = view_from_text(prompt)
                encoded = encode_prompt(prompt)
                ids = encoded.ids
                cached, first = engine.prefill(ids)
                ttft = max(ttft, first)
                prompt_tokens += len(ids)
                cached_total += cached
                for i in range(req.n):
                    c = engine.reply(
                        view,
                        seed=req.seed,
                        index=i,
                        temperature=temperature,
                        max_tokens=req.max_tokens or DEFAULT_MAX_TOKENS,
                    )
                    outs.append((p * req.n + i, c))
                    completion += len(c.pieces)
                    longest = max(longest, len(c.pieces))
                    full.append(encoded.extend_tokens(c.pieces))
            usage = _usage(prompt_tokens, completion, cached_total)
            cid = engine.next_id("cmpl-sim")
            envelope = {
                "id": cid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": engine.config.model,
            }
            k = req.logprobs
            if not req.stream:
                body = {
                    **envelope,
                    "usage": usage,
                    "choices": [
                        {
                            "index": idx,
                            "text": c.output_text,
                            "finish_reason": c.finish_reason,
                            "logprobs": _legacy_logprobs(c.pieces, k, idx)
                            if k is not None
                            else None,
                        }
                        for idx, c in outs
                    ],
                }
                delay = ttft + engine.decode_seconds(longest)
                response = await gen.json(encoder.encode(body), delay)
                engine.complete(full, prompt_tokens, completion, cached_total)
                return response
            step = engine.config.token_ms / 1000
            frames: list[Frame] = []
            for idx, c in outs:
                for pos, piece in enumerate(c.pieces):
                    lps = _legacy_logprobs([piece], k, idx, pos) if k is not None else None
                    last = pos == len(c.pieces) - 1
                    choice = {
                        "index": idx,
                        "text": piece,
                        "logprobs": lps,
                        "finish_reason": c.finish_reason if last else None,
                    }
                    frames.append((ttft + pos * step, sse({**envelope, "choices": [choice]})))
            frames.sort(key=lambda f: f[0])
            if req.stream_options is not None and req.stream_options.include_usage:
                end = frames[-1][0] if frames else ttft
                frames.append((end, sse({**envelope, "choices": [], "usage": usage})))
            response = await gen.stream(frames, SSE_DONE)
            engine.complete(full, prompt_tokens, completion, cached_total)
            return response


def _extra_delay(request: web.Request) -> float:
    """Seconds ``X-Sim-Delay-Ms`` adds before the first token (0 without it
    or when it is not a number >= 0)."""
    try:
        ms = float(request.headers.get("X-Sim-Delay-Ms", "0"))
    except ValueError:
        return 0.0
    return ms / 1000 if ms >= 0 else 0.0


def _legacy_logprobs(pieces: list[str], k: int, salt: int, first: int = 0) -> dict[str, Any]:
    """Legacy completions logprobs for ``pieces`` at positions ``first``..."""
    offsets, pos = [], 0
    for piece in pieces:
        offsets.append(pos)
        pos += len(piece)
    positions = list(enumerate(pieces, start=first))
    return {
        "tokens": pieces,
        "token_logprobs": [synthetic_logprob(p, i, salt) for i, p in positions],
        "top_logprobs": [dict(synthetic_top(p, i, k, salt)) for i, p in positions]
        if k > 0
        else None,
        "text_offset": offsets,
    }
