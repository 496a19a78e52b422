"""The OpenAI-compatible model backend (vLLM, SGLang ``/v1``, llama.cpp,
OpenAI): ``POST {base_url}/chat/completions``, retried behind a circuit
breaker.  Messages already sent are not re-encoded and replies decode
straight into the Structs of ``agentrt.runtime.wire``; why ``complete`` is
shaped as it is: docs/design/performance.md, "The model client".

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
import enum
import random
import re
import time
from collections.abc import AsyncGenerator
from typing import Any, Final, Self, TypeVar, final

import anyio
import httpx
import msgspec
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.runtime.kernel._errors import BackendError, UnknownModelError
from agentrt.runtime.kernel._timers import TaskDeadlines, current_task
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models._retry import (
    BreakerConfig,
    CircuitBreaker,
    Retrier,
    RetryCounters,
    RetryPolicy,
    RetryStats,
    TransientError,
)
from agentrt.runtime.models.http._http_client import (
    HttpClientConfig,
    HttpReply,
    Post,
    make_http_client,
    make_transport,
    poster,
)
from agentrt.runtime.models.openai._openai_errors import ErrorMapper, error_message, excerpt
from agentrt.runtime.models.openai._openai_reply import completion_to_reply
from agentrt.runtime.models.openai._openai_stream import StreamReader
from agentrt.runtime.wire._chat import RawChatRequest, ReplyCompletion, reply_decoder
from agentrt.runtime.wire._chat_parts import EncodedParts
from agentrt.runtime.wire._common import ReplyModelList, StreamOptions, encoder

__all__ = ["OpenAIBackend", "OpenAIBackendConfig"]

#: Every streamed request asks for the final usage chunk.
_STREAM_OPTIONS = StreamOptions(include_usage=True)


class OpenAIBackendConfig(BaseModel):
    """Where an OpenAI-compatible server is and how to talk to it."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: str = "openai"
    """Short name of this backend in logs, errors and routing records."""
    base_url: str
    """The API root including its version, e.g. ``http://127.0.0.1:8000/v1``;
    requests go to ``{base_url}/chat/completions``."""
    models: list[str] = Field(min_length=1)
    """Model names this server serves (the first is the default when a
    request names none); a request naming another fails with
    ``UnknownModelError`` before anything is sent."""
    api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer <key>`` when set."""
    extra_headers: dict[str, str] = {}
    """Headers added to every request (e.g. an organisation or routing key)."""
    http: HttpClientConfig = HttpClientConfig()
    """Connection limits and timeouts."""
    retry: RetryPolicy = RetryPolicy()
    """Which failures are retried, with what backoff, within what deadline."""
    breaker: BreakerConfig = BreakerConfig()
    """When the endpoint's circuit breaker opens and for how long."""

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(
                f"base_url must be an http(s) URL like http://host:8000/v1, got {value!r}"
            )
        return url


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSED = "closed"


class _TokenCount(msgspec.Struct):
    """``POST /tokenize``'s reply: vLLM sends ``count`` and ``tokens``, SGLang ``tokens``."""

    count: int | None = None
    tokens: list[int] = []


_T = TypeVar("_T")


@final
class OpenAIBackend:
    """A ``ModelBackend`` for one OpenAI-compatible endpoint.

    Requests carry tools, parallel tool calls, ``n`` and logprobs; failures
    are retried per ``config.retry`` behind one circuit breaker for the
    endpoint.  Tool-call arguments come back as the raw text the model
    produced, malformed or not: validating them is the agent loop's job."""

    def __init__(
        self,
        config: OpenAIBackendConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``transport`` replaces the aiohttp transport built from
        ``config.http`` (for tests: a recording wrapper or
        ``httpx.MockTransport``); the backend closes it on exit.  ``rng``
        draws the retry jitter."""
        self._config = config
        self._custom_transport = transport
        self._name = config.name
        self._endpoint = f"{config.base_url}/chat/completions"
        self._url = httpx.URL(self._endpoint)
        self._models = list(config.models)
        self._model_set = frozenset(config.models)
        self._policy = config.retry
        self._rng = rng or random.Random()
        self._breaker = CircuitBreaker(config.breaker, endpoint=self._endpoint, backend=self._name)
        self._counters = RetryCounters()
        self._errors = ErrorMapper(backend=self._name, endpoint=self._endpoint, policy=self._policy)
        self._parts = EncodedParts()
        self._deadlines = TaskDeadlines()  # each attempt's (``complete``)
        self._state = _State.UNOPENED
        self._client: httpx.AsyncClient | None = None
        self._transport: httpx.AsyncBaseTransport | None = None
        self._post: Post | None = None  # ``complete``'s, on the transport

        # Only what aiohttp does not add by itself (it adds Host, Content-Length
        # and User-Agent): every header costs CPU in httpx and aiohttp alike.
        common = [("accept-encoding", "identity")]
        if config.api_key is not None:
            common.append(("authorization", f"Bearer {config.api_key.get_secret_value()}"))
        common.extend(config.extra_headers.items())
        self._header_encoding = (
            "ascii" if all(k.isascii() and v.isascii() for k, v in common) else "utf-8"
        )
        # Built once: ``complete`` sends these plus the request id; the
        # cold paths copy the httpx headers (a list copy, no re-parsing).
        self._json_header_list = (("content-type", "application/json"), *common)
        self._json_headers = httpx.Headers(
            list(self._json_header_list), encoding=self._header_encoding
        )
        self._sse_headers = httpx.Headers(
            [("content-type", "application/json"), ("accept", "text/event-stream"), *common],
            encoding=self._header_encoding,
        )
        self._cold_headers = common
        # The transport reads these per request (AiohttpTransport: connect ->
        # sock_connect, read -> sock_read, pool -> aiohttp's connect budget).
        self._timeouts = config.http.timeouts()
        self._extensions: dict[str, Any] = {"timeout": self._timeouts}

    # -- ModelBackend ----------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def models(self) -> list[str]:
        return list(self._models)

    @property
    def max_concurrency(self) -> int:
        """Requests this backend can have in flight: its connection pool's
        limit (``http.max_connections``); more wait for a free connection."""
        return self._config.http.max_connections

    @property
    def call_deadline_s(self) -> float:
        """Seconds a call may take, every attempt and wait included
        (``retry.deadline_s``); past it, ``complete`` raises
        ``BackendTimeout``.  A caller with a longer timeout of its own need
        not time the call too."""
        return self._policy.deadline_s

    @property
    def endpoint(self) -> str:
        """The chat-completions URL this backend posts to."""
        return self._endpoint

    @property
    def breaker(self) -> CircuitBreaker:
        """The endpoint's circuit breaker (read its ``state``)."""
        return self._breaker

    @property
    def stats(self) -> RetryStats:
        """Calls, attempts and retries so far."""
        return self._counters.snapshot()

    async def __aenter__(self) -> Self:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(
                f"backend {self._name!r} was already opened; create a new one instead "
                "of reopening it"
            )
        transport = self._custom_transport or make_transport(self._config.http)
        self._client = make_http_client(
            self._config.http, base_url=self._config.base_url, transport=transport
        )
        self._transport = transport
        self._post = poster(transport)
        self._state = _State.OPENED
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._state = _State.CLOSED
        client, self._client, self._transport, self._post = self._client, None, None, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One non-streaming chat completion, retried per the policy."""
        self._opened()
        post = self._post
        assert post is not None  # set with the transport
        model = self._model_for(request)
        body = self._encode(request, model, stream=False)
        request_id = request.request_id
        headers: tuple[tuple[str, str], ...] = self._json_header_list
        if request_id is not None:
            value = request_id if request_id.isascii() else _header_value(request_id)
            headers = (*headers, ("x-request-id", value))
        started = time.perf_counter()
        # The retry loop, written out (docs/design/performance.md, "The model client").
        retrier = Retrier(
            self._policy, breaker=self._breaker, counters=self._counters, rng=self._rng
        )
        # The attempt's deadline cancels this task (``TaskDeadlines``).
        deadlines = self._deadlines
        task = current_task()
        while True:
            await retrier.begin_attempt()
            armed = deadlines.arm(task, max(0.0, retrier.remaining()))
            try:
                # One attempt: the whole reply in one exchange, no httpx
                # request or response (``AiohttpTransport.post``).
                try:
                    reply = await post(self._endpoint, body, headers, self._timeouts)
                except Exception as exc:
                    raise self._errors.transport(exc, "waiting for the reply") from exc
                completion = self._completion(reply, model)
            except TransientError as transient:
                deadlines.disarm(task, armed)
                await retrier.back_off(transient)
                continue
            except asyncio.CancelledError as exc:
                ours = False
                try:
                    ours = await deadlines.expired(task, armed)
                finally:
                    if not ours:
                        retrier.failed(exc)
                if not ours:
                    raise
                error = self._errors.deadline(
                    f"no reply within the call deadline of {self._policy.deadline_s:g}s "
                    f"(attempt {retrier.attempt})"
                )
                retrier.failed(error)
                raise error from None
            except BaseException as exc:
                retrier.failed(exc)
                raise
            finally:
                deadlines.disarm(task, armed)
            retrier.succeeded()
            return completion_to_reply(
                completion,
                model=model,
                latency_s=time.perf_counter() - started,
                backend=self._name,
                request_id=request_id,
            )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        """A streaming chat completion: content, reasoning, tool-call and
        logprob deltas as they arrive, then one delta carrying the assembled
        reply.  Failures are retried per the policy, a stream cut after
        some deltas too: the new attempt's deltas follow a ``restart`` delta.
        Close the iterator if you stop early (``contextlib.aclosing``): that
        closes the connection."""
        transport = self._opened()
        model = self._model_for(request)
        body = self._encode(request, model, stream=True)
        request_id = request.request_id
        started = time.perf_counter()
        retrier = Retrier(
            self._policy, breaker=self._breaker, counters=self._counters, rng=self._rng
        )
        shown = False  # deltas handed on since the start (or the last restart)
        restart = False  # a retry after ``shown``: the caller must drop them
        while True:
            await retrier.begin_attempt()
            try:
                response = await self._open_stream(
                    transport, self._request(body, self._sse_headers, request_id), model, retrier
                )
            except TransientError as transient:
                await retrier.back_off(transient)
                continue
            except BaseException as exc:
                retrier.failed(exc)
                raise
            reader = StreamReader(response, self._errors, retrier.deadline)
            retry: TransientError | None = None
            try:
                while (deltas := await reader.next_deltas()) is not None:
                    if restart:
                        restart = False
                        yield _RESTART
                    shown = True
                    for delta in deltas:
                        yield delta
            except TransientError as transient:
                retry = transient  # a cut mid-reply too: retried like a cut connection
                restart, shown = restart or shown, False
            except BaseException as exc:
                retrier.failed(exc)
                raise
            finally:
                await reader.aclose()
            if retry is not None:
                await retrier.back_off(retry)
                continue
            retrier.succeeded()
            if restart:
                yield _RESTART
            yield StreamDelta(
                reply=reader.assembly.reply(
                    model=model,
                    latency_s=time.perf_counter() - started,
                    backend=self._name,
                    request_id=request.request_id,
                )
            )
            return

    # -- cold path ---------------------------------------------------------------

    async def served_models(self) -> list[str]:
        """The model ids the server lists at ``GET {base_url}/models``."""
        url = f"{self._config.base_url}/models"
        listing = await self._cold_call(
            "GET", url, ReplyModelList, doing="listing models", answer="a model list"
        )
        return [m.id for m in listing.data]

    async def count_tokens(self, text: str) -> int:
        """Tokens ``text`` is for the server's first model, by its own
        tokenizer: ``POST /tokenize`` at the server's root, which vLLM and
        SGLang serve (``TokenCounter``).  Raises ``BackendError`` from a
        server without it."""
        root = self._config.base_url.removesuffix("/").removesuffix("/v1")
        body = msgspec.json.encode({"model": self._models[0], "prompt": text})
        counted = await self._cold_call(
            "POST",
            f"{root}/tokenize",
            _TokenCount,
            doing="counting tokens",
            answer="a token count",
            content=body,
        )
        return counted.count if counted.count is not None else len(counted.tokens)

    async def _cold_call(
        self,
        method: str,
        url: str,
        answer_type: type[_T],
        *,
        doing: str,
        answer: str,
        content: bytes | None = None,
    ) -> _T:
        """One request off the call path (no retries): its JSON answer as
        ``answer_type``; a timeout, a transport failure, a status other than
        200 or an answer that is not ``answer`` raise ``BackendError``."""
        self._opened()
        assert self._client is not None
        headers = self._cold_headers if content is None else self._json_headers
        try:
            with anyio.fail_after(self._config.http.read_timeout_s):
                response = await self._client.request(method, url, content=content, headers=headers)
        except TimeoutError as exc:
            raise self._errors.deadline(f"{method} {url} timed out") from exc
        except Exception as exc:
            error = self._errors.transport(exc, doing)
            raise (error.error if isinstance(error, TransientError) else error) from exc
        if response.status_code != 200:
            raise BackendError(
                f"{method} {url} answered HTTP {response.status_code}: "
                f"{error_message(response.content)}",
                backend=self._name,
                endpoint=self._endpoint,
            )
        try:
            return msgspec.json.decode(response.content, type=answer_type)
        except msgspec.DecodeError as exc:
            raise self._errors.malformed(f"{method} {url} reply is not {answer} ({exc})") from exc

    # -- one attempt -----------------------------------------------------------

    def _completion(self, reply: HttpReply, model: str) -> ReplyCompletion:
        data = reply.body
        if reply.status != 200:
            raise self._errors.status(reply.status, reply.headers, data, model)
        completion = self._errors.decode(reply_decoder, data, "reply is not a chat completion")
        if not completion.choices:
            raise self._errors.malformed(f"reply has no choices: {excerpt(data)}")
        return completion

    async def _open_stream(
        self,
        transport: httpx.AsyncBaseTransport,
        request: httpx.Request,
        model: str,
        retrier: Retrier,
    ) -> httpx.Response:
        """Send the request and check the status line, under the call's
        deadline; returns the open response with the body unread."""
        response: httpx.Response | None = None
        with anyio.move_on_after(max(0.0, retrier.remaining())) as scope:
            try:
                response = await transport.handle_async_request(request)
            except Exception as exc:
                raise self._errors.transport(exc, "sending the request") from exc
            if response.status_code != 200:
                try:
                    data = await response.aread()
                except Exception as exc:
                    raise self._errors.transport(exc, "reading an error reply") from exc
                finally:
                    with anyio.CancelScope(shield=True):
                        await response.aclose()
                raise self._errors.status(response.status_code, response.headers, data, model)
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
                raise self._errors.malformed(
                    f"expected an event stream, got Content-Type {content_type!r}"
                )
        if scope.cancelled_caught or response is None:
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise self._errors.deadline(
                f"no reply within the call deadline of {self._policy.deadline_s:g}s"
            )
        return response

    def _request(self, body: bytes, base: httpx.Headers, request_id: str | None) -> httpx.Request:
        # ``stream=`` (then ``read()``) instead of ``content=``: httpx then
        # skips deriving Host and Content-Length, which costs more CPU than the
        # rest of building the request; aiohttp adds both when it sends.
        request = httpx.Request(
            "POST",
            self._url,
            headers=base,  # copied: the request id goes into the copy
            stream=httpx.ByteStream(body),
            extensions=self._extensions,
        )
        request.read()  # the transport then sends bytes (not a chunked stream)
        headers = request.headers
        # Spares httpx re-detecting the header encoding on every lookup.
        headers.encoding = self._header_encoding
        if request_id is not None:
            headers["x-request-id"] = _header_value(request_id)
        # The backend's own URL object (httpx made a copy): the transport
        # then converts it to text once, not per request.
        request.url = self._url
        return request

    # -- helpers ---------------------------------------------------------------

    def _opened(self) -> httpx.AsyncBaseTransport:
        if self._transport is None:
            state = "closed" if self._state is _State.CLOSED else "not opened"
            raise RuntimeError(
                f"backend {self._name!r} is {state}: use it inside 'async with backend:'"
            )
        return self._transport

    def _model_for(self, request: ModelRequest) -> str:
        model = request.model or self._models[0]
        if model not in self._model_set:
            raise UnknownModelError(
                f"model {model!r} is not served by backend {self._name!r} "
                f"({self._config.base_url}); it serves {sorted(self._model_set)}"
            )
        return model

    def _encode(self, request: ModelRequest, model: str, *, stream: bool) -> bytes:
        sampling = request.sampling
        tools = request.tools
        top = request.top_logprobs
        return encoder.encode(
            RawChatRequest(
                model=model,
                messages=self._parts.messages(request.messages),
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                n=request.n,
                stop=sampling.stop or None,
                seed=sampling.seed,
                tools=self._parts.tools(tools) if tools else None,
                tool_choice=request.tool_choice if tools else None,
                logprobs=request.logprobs or top > 0,
                top_logprobs=top or None,
                stream=stream,
                stream_options=_STREAM_OPTIONS if stream else None,
            )
        )


_RESTART: Final = StreamDelta(restart=True)


def _header_value(text: str) -> str:
    """``text`` as a header value: ASCII on the wire, anything else escaped."""
    return text if text.isascii() else text.encode("ascii", "backslashreplace").decode()
