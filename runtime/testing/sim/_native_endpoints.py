"""The sim-server's SGLang-native endpoints (``NativeEndpoints``) and the
``/generate`` request they read (``GenerateRequest``: not OpenAI's wire).

Imports the engine, model and HTTP helpers of the sim-server.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
from aiohttp import web

from agentrt.runtime.models.sglang._sglang_template import IM_END
from agentrt.runtime.testing._tokens import (
    EOS_ID,
    EncodedPrompt,
    decode_ids,
    encode_prompt,
    synthetic_logprob,
    synthetic_top,
    token_id,
)
from agentrt.runtime.testing.sim._sim_http import (
    SSE_DONE,
    Endpoints,
    Frame,
    Generation,
    encoder,
    json_response,
    sse,
)
from agentrt.runtime.testing.sim._sim_model import SimChoice, view_from_text

MAX_N = 128


class GenerateSampling(msgspec.Struct, frozen=True, kw_only=True):
    """The ``sampling_params`` of ``/generate`` that change the simulation;
    the others (``top_p``, ``top_k``, penalties, ``stop``...) are accepted
    and ignored."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    n: int = 1
    sampling_seed: int | None = None


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /generate`` (SGLang's ``GenerateReqInput``: ``text`` or
    ``input_ids``, ``sampling_params``, ``rid``, logprob options, ``stream``).
    Unknown fields are ignored, as SGLang does."""

    text: str | list[str] | None = None
    input_ids: list[Any] | None = None
    sampling_params: GenerateSampling | None = None
    rid: str | list[str] | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False


generate_decoder = msgspec.json.Decoder(GenerateRequest)


def _triples(pieces: list[str], ids: list[int], salt: int, text: bool, first: int = 0) -> list[Any]:
    return [
        [synthetic_logprob(p, first + i, salt), tid, p if text else None]
        for i, (p, tid) in enumerate(zip(pieces, ids, strict=True))
    ]


def _top(pieces: list[str], k: int, salt: int, text: bool) -> list[Any]:
    return [
        [[lp, token_id(t), t if text else None] for t, lp in synthetic_top(p, pos, k, salt)]
        for pos, p in enumerate(pieces)
    ]


class _Prompt(msgspec.Struct, frozen=True):
    text: str | None
    ids: list[int]
    rid: str | None
    encoded: EncodedPrompt | None = None


class NativeEndpoints(Endpoints):
    """Handlers for SGLang's native API, mirroring its shapes:
    ``POST /generate`` (``text`` or ``input_ids``, single or batch;
    ``sampling_params``; ``rid``; logprob options; ``n`` > 1 answers a
    prompt-major list with ids ``<rid>_<i>``; streams send cumulative
    ``data:`` events, then ``[DONE]``), ``GET /health`` and
    ``/health_generate``, ``GET /get_model_info``, and ``/flush_cache``
    (empties the prefix cache)."""

    async def health(self, request: web.Request) -> web.Response:
        self.engine.requests[request.path] += 1
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        self.engine.requests["/get_model_info"] += 1
        model = self.engine.config.model
        info = {
            "model_path": model,
            "tokenizer_path": model,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "sim",
            "architectures": ["SimForCausalLM"],
        }
        return json_response(encoder.encode(info))

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.engine.requests["/flush_cache"] += 1
        self.engine.flush_cache()
        return web.Response(text="Cache flushed.\n")

    def _prompts(self, req: GenerateRequest) -> list[_Prompt] | str:
        """The prompts of a request, or an error message."""
        rids = req.rid if isinstance(req.rid, list) else None
        if req.text is not None and req.input_ids is not None:
            return "give either text or input_ids, not both"
        if req.text is not None:
            texts = [req.text] if isinstance(req.text, str) else req.text
            encoded = [encode_prompt(t) for t in texts]
            prompts = [_Prompt(t, e.ids, None, e) for t, e in zip(texts, encoded, strict=True)]
        elif req.input_ids is not None:
            rows = (
                req.input_ids
                if req.input_ids and isinstance(req.input_ids[0], list)
                else [req.input_ids]
            )
            if not all(isinstance(i, int) for row in rows for i in row):
                return "input_ids must be a list of ints or a list of lists of ints"
            prompts = [_Prompt(None, list(row), None) for row in rows]
        else:
            return "either text or input_ids is required"
        if rids is not None and len(rids) != len(prompts):
            return f"rid has {len(rids)} entries for {len(prompts)} prompts"
        single = req.rid if isinstance(req.rid, str) else None
        return [
            _Prompt(p.text, p.ids, rids[i] if rids is not None else single, p.encoded)
            for i, p in enumerate(prompts)
        ]

    async def generate(self, request: web.Request) -> web.StreamResponse:
        req = await self._decode(request, generate_decoder, "/generate", "/generate request")
        if isinstance(req, web.Response):
            return req
        prompts = self._prompts(req)
        first_rid = prompts[0].rid if isinstance(prompts, list) and prompts else None
        gen = self._generation(request, "/generate", first_rid)
        async with gen:
            if isinstance(prompts, str):
                return self._bad_request(prompts)
            sp = req.sampling_params or GenerateSampling()
            if not 1 <= sp.n <= MAX_N or sp.max_new_tokens < 0:
                return self._bad_request(
                    f"need 1 <= n <= {MAX_N} and max_new_tokens >= 0, "
                    f"got n={sp.n}, max_new_tokens={sp.max_new_tokens}"
                )
            early = await gen.early_fault()
            if early is not None:
                return early
            return await self._run(gen, req, sp, prompts)

    async def _run(
        self, gen: Generation, req: GenerateRequest, sp: GenerateSampling, prompts: list[_Prompt]
    ) -> web.StreamResponse:
        engine = self.engine
        ttft = 0.0
        items: list[_Sample] = []
        full: list[list[int]] = []
        prompt_tokens = completion = cached_total = longest = 0
        for prompt in prompts:
            text = prompt.text if prompt.text is not None else decode_ids(prompt.ids)
            view = view_from_text(text)
            cached, first = engine.prefill(prompt.ids)
            ttft = max(ttft, first)
            prompt_tokens += len(prompt.ids)
            cached_total += cached
            base = prompt.rid or engine.next_id("sim")
            for i in range(sp.n):
                # The sample's place in the reply (SGLang's ``index``): its
                # number among n, or its prompt's place in a batch.
                place = len(items)
                choice = engine.reply(
                    view,
                    seed=sp.sampling_seed,
                    index=place,
                    temperature=sp.temperature,
                    max_tokens=sp.max_new_tokens,
                )
                rid = base if sp.n == 1 else f"{base}_{i}"
                items.append(_Sample(prompt, cached, place, choice, rid))
                completion += len(choice.pieces)
                longest = max(longest, len(choice.pieces))
                if prompt.encoded is not None:
                    tail = IM_END if view.chat else ""
                    full.append(prompt.encoded.extend_tokens(choice.pieces, tail))
                else:
                    full.append(prompt.ids + [token_id(p) for p in choice.pieces])
        elapsed = ttft + engine.decode_seconds(longest)
        if not req.stream:
            results = [_result(req, sp, it, len(it.choice.pieces), elapsed) for it in items]
            body = results[0] if len(results) == 1 else results
            response = await gen.json(encoder.encode(body), elapsed)
            engine.complete(full, prompt_tokens, completion, cached_total)
            return response
        step = engine.config.token_ms / 1000
        frames: list[Frame] = []
        for it in items:
            for upto in range(min(1, len(it.choice.pieces)), len(it.choice.pieces) + 1):
                due = ttft + max(upto - 1, 0) * step
                event = _result(req, sp, it, upto, due)
                if len(items) > 1:
                    event["index"] = it.sample
                frames.append((due, sse(event)))
        frames.sort(key=lambda f: f[0])
        response = await gen.stream(frames, SSE_DONE)
        engine.complete(full, prompt_tokens, completion, cached_total)
        return response


class _Sample(NamedTuple):
    prompt: _Prompt
    cached: int
    sample: int  # the sample's place in the reply (``index``)
    choice: SimChoice
    rid: str


def _result(
    req: GenerateRequest, sp: GenerateSampling, item: _Sample, upto: int, elapsed: float
) -> dict[str, Any]:
    """The reply (or a stream event) for ``item`` after ``upto`` tokens."""
    prompt, choice = item.prompt, item.choice
    pieces = choice.pieces[:upto]
    ids = [token_id(p) for p in pieces]
    finish: dict[str, Any] | None = None
    if upto >= len(choice.pieces):
        if choice.finish_reason == "length":
            finish = {"type": "length", "length": sp.max_new_tokens}
        else:
            chat = "<|im_start|>" in (prompt.text or "")
            finish = {"type": "stop", "matched": IM_END if chat else EOS_ID}
    meta: dict[str, Any] = {
        "id": item.rid,
        "finish_reason": finish,
        "prompt_tokens": len(prompt.ids),
        "completion_tokens": len(pieces),
        "cached_tokens": item.cached,
        "weight_version": "default",
        "e2e_latency": round(elapsed, 6),
    }
    if req.return_logprob:
        text = req.return_text_in_logprobs
        start = req.logprob_start_len
        in_pieces: list[str] = []
        in_lps: list[Any] = []
        if start >= 0:
            in_pieces = [decode_ids([t]) for t in prompt.ids[start:]]
            in_lps = _triples(in_pieces, prompt.ids[start:], -1, text, start)
            if in_lps:
                in_lps[0][0] = None  # no logprob for the first prompt token
        meta["input_token_logprobs"] = in_lps
        meta["output_token_logprobs"] = _triples(pieces, ids, item.sample, text)
        if req.top_logprobs_num > 0:
            meta["input_top_logprobs"] = _top(in_pieces, req.top_logprobs_num, -1, text)
            meta["output_top_logprobs"] = _top(pieces, req.top_logprobs_num, item.sample, text)
    return {"text": "".join(pieces), "output_ids": ids, "meta_info": meta}
