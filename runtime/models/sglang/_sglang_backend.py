"""The SGLang-native model backend: ``POST /generate`` on one or more replicas
(chat rendered with ``sglang_template``), plus ``/health``,
``/get_model_info`` and ``/flush_cache``.  For SGLang's OpenAI API use the
OpenAI-compatible backend.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import random
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Self, TypeVar, final

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrt.protocols._messages import UserMessage
from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.runtime.kernel._errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    InvalidRequestError,
    MalformedReply,
    UnknownModelError,
)
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models._replica_client import ReplicaClient
from agentrt.runtime.models._replicas import Replica, ReplicaSet, ReplicaStatus
from agentrt.runtime.models._retry import (
    BreakerConfig,
    Retrier,
    RetryPolicy,
    RetryStats,
    TransientError,
)
from agentrt.runtime.models.http._http_client import (
    HttpClientConfig,
    make_http_client,
    make_transport,
    poster,
)
from agentrt.runtime.models.http._sse import SSEDecoder
from agentrt.runtime.models.sglang._sglang_template import render_chat
from agentrt.runtime.models.sglang._sglang_wire import (
    GenerateOutput,
    StreamAssembly,
    abort_message,
    build_payload,
    encoder,
    event_decoder,
    forced_tool_call,
    outputs_to_reply,
    reply_decoder,
    sample_rids,
)
from agentrt.runtime.observe._log import get_logger

__all__ = ["SGLangBackend", "SGLangBackendConfig", "affinity_key"]

_JSON = (("content-type", "application/json"), ("accept", "application/json"))
_SSE = {"content-type": "application/json", "accept": "text/event-stream"}
_HINT_404 = " (is this SGLang's native API? /generate is missing)"
#: How long a cancelled call waits for the server to take its abort.
_ABORT_TIMEOUT_S = 2.0

_T = TypeVar("_T")


class SGLangBackendConfig(BaseModel):
    """One model served by one or more SGLang replicas."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "sglang"
    """The backend's name in logs and routing records."""
    urls: list[str] = Field(min_length=1)
    """Base URLs of the replicas, e.g. ``["http://10.0.0.5:30000"]``."""
    model: str | None = None
    """The served model's name (``--served-model-name``); when unset it is
    read from the server on opening (``/v1/models``, else ``/get_model_info``'s
    ``model_path``).  When set, opening checks the server serves it."""
    http: HttpClientConfig = HttpClientConfig()
    """Connection limits and timeouts (shared by all replicas)."""
    retry: RetryPolicy = RetryPolicy()
    """Which failures are retried, how often and how long to wait."""
    breaker: BreakerConfig = BreakerConfig()
    """When a replica's circuit breaker opens (one breaker per replica)."""
    health_interval_s: float = Field(default=5.0, ge=0)
    """Seconds between background ``/health`` checks of every replica (0: none)."""
    health_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds a ``/health`` check may take before the replica counts as down
    (SGLang's ``/health`` generates a token and answers after a second at
    the least; more on a busy server)."""
    balance_abs_threshold: int = Field(default=32, ge=0)
    """A run's replica keeps its requests until it has this many more in flight
    than the least loaded replica; then requests spill over."""
    affinity_capacity: int = Field(default=100_000, ge=1)
    """Affinity keys remembered (least recently used forgotten first)."""

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, urls: list[str]) -> list[str]:
        cleaned = []
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"replica URL must start with http:// or https://, got {url!r}")
            cleaned.append(url.rstrip("/"))
        return cleaned


class _State(enum.Enum):
    UNOPENED = 1
    OPENED = 2
    CLOSED = 3


def affinity_key(request: ModelRequest) -> str:
    """The replica-affinity key of a request: its ``affinity_key``, else a
    hash of the conversation up to its first user message (system prompt
    and task), so the rollouts of one run land on the same replica."""
    if request.affinity_key:
        return request.affinity_key
    messages = request.messages
    end = next((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), len(messages) - 1)
    text = render_chat(messages[: end + 1], request.tools, add_generation_prompt=False)
    return "prefix:" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@final
class SGLangBackend:
    """A ``ModelBackend`` over SGLang's native API.

    Chat goes through ``/generate`` only (``rid`` passthrough, raw
    ``input_ids``, exact control of the prompt the radix cache sees).
    Replicas are chosen by prefix affinity (``affinity_key``): a run's
    rollouts share a replica and its cache, new prefixes spread by load.
    Background ``/health`` checks and refused connections mark replicas
    down.  Refused or dropped connections, read timeouts, 429, 408, 409 and
    5xx are retried per ``config.retry``: first on a replica not tried yet,
    then with backoff (honouring ``Retry-After``); each replica has its own
    circuit breaker.  Errors are ``runtime.errors`` classes naming the
    backend and the replica URL."""

    def __init__(
        self,
        config: SGLangBackendConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``transport`` replaces the aiohttp transport (tests); ``rng``
        draws the retry jitter."""
        self._config = config
        self._name = config.name
        self._custom_transport = transport
        self._timeouts = config.http.timeouts()
        self._log = get_logger(__name__, backend=self._name)
        self._replicas = ReplicaSet(
            config.urls,
            backend=config.name,
            breaker=config.breaker,
            balance_abs_threshold=config.balance_abs_threshold,
            capacity=config.affinity_capacity,
        )
        self._rc = ReplicaClient(
            self._replicas,
            backend=config.name,
            policy=config.retry,
            rng=rng,
            health_timeout_s=config.health_timeout_s,
            admin_timeout_s=config.http.read_timeout_s,
            log=self._log,
        )
        self._model = config.model
        self._state = _State.UNOPENED
        self._stack = contextlib.AsyncExitStack()
        self._tg: TaskGroup | None = None
        self._calls = 0

    # -- properties ----------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def models(self) -> list[str]:
        return [self._model] if self._model else []

    @property
    def max_concurrency(self) -> int:
        """Requests this backend can have in flight: the connection pool's
        limit (``http.max_connections``, one pool for all replicas); more wait
        for a free connection."""
        return self._config.http.max_connections

    @property
    def replicas(self) -> list[ReplicaStatus]:
        """Health, breaker state and load of every replica."""
        return self._replicas.statuses()

    @property
    def stats(self) -> RetryStats:
        """Calls, attempts and retries so far."""
        return self._rc.counters.snapshot()

    def replica_for(self, key: str) -> str | None:
        """The URL an affinity key is currently mapped to, if any."""
        index = self._replicas.mapped(key)
        return None if index is None else self._config.urls[index]

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(
                f"backend {self._name!r} was already opened; create a new one instead"
            )
        self._state = _State.OPENED
        transport = self._custom_transport or make_transport(self._config.http)
        self._rc.http = make_http_client(self._config.http, transport=transport)
        self._rc.post = poster(transport)
        try:
            health = await self._rc.health()
            if not any(health.values()):
                raise BackendUnavailable(
                    "no replica answers /health: " + "; ".join(await self._why_down()),
                    backend=self._name,
                )
            served = await self._served_name()
            if self._model is None:
                self._model = served
            elif self._model != served:
                raise UnknownModelError(
                    f"backend {self._name!r} is configured for model {self._model!r}, but "
                    f"{', '.join(self._config.urls)} serves {served!r} (set `model = "
                    f"{served!r}`, or leave `model` out to take the server's name)"
                )
            if self._config.health_interval_s > 0:
                self._tg = await self._stack.enter_async_context(anyio.create_task_group())
                self._tg.start_soon(self._health_loop)
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        self._state = _State.CLOSED
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        try:
            # Leaves the health-check task group: must be the innermost scope.
            await self._stack.aclose()
        finally:
            client, self._rc.http, self._rc.post = self._rc.http, None, None
            if client is not None:
                with anyio.CancelScope(shield=True):
                    await client.aclose()

    def _opened(self) -> httpx.AsyncClient:
        if self._rc.http is None or self._state is not _State.OPENED:
            state = "closed" if self._state is _State.CLOSED else "not opened"
            raise RuntimeError(
                f"backend {self._name!r} is {state}: use it inside 'async with backend:'"
            )
        return self._rc.http

    def _model_for(self, request: ModelRequest) -> str:
        model = self._model or ""
        if request.model is not None and request.model != model:
            raise UnknownModelError(
                f"model {request.model!r} is not served by backend {self._name!r} "
                f"({', '.join(self._config.urls)}); it serves {model!r}"
            )
        return model

    # -- health and admin ------------------------------------------------------

    async def _health_loop(self) -> None:
        while True:
            await anyio.sleep(self._config.health_interval_s)
            await self._rc.health()

    async def health(self) -> dict[str, bool]:
        """Check ``/health`` on every replica now; marks them up or down."""
        self._opened()
        return await self._rc.health()

    async def _why_down(self) -> list[str]:
        """Why each replica failed its ``/health`` check, one entry each."""
        client = self._opened()
        reasons: list[str] = []
        for replica in self._replicas.replicas:
            url = f"{replica.url}/health"
            try:
                with anyio.fail_after(self._config.health_timeout_s):
                    response = await client.get(url)
            except TimeoutError:
                reasons.append(f"{url}: no answer within {self._config.health_timeout_s:g} s")
                continue
            except Exception as exc:
                reasons.append(f"{url}: cannot connect ({type(exc).__name__}: {exc})")
                continue
            reason = f"{url}: HTTP {response.status_code}"
            if response.status_code == 503:
                reason += " (still loading: SGLang answers 503 until its model is warmed up)"
            reasons.append(reason)
        return reasons

    async def _served_name(self) -> str:
        """The model name the server answers to: the first of ``/v1/models``
        (``--served-model-name``), else ``/get_model_info``'s ``model_path``."""
        for replica in sorted(self._replicas.replicas, key=lambda r: not r.healthy):
            try:
                response = await self._rc.admin(replica, "GET", "/v1/models")
                listing = msgspec.json.decode(response.content)
                served = listing["data"][0]["id"]
            except (BackendError, msgspec.DecodeError, LookupError, TypeError):
                continue
            if isinstance(served, str) and served:
                return served
        info = await self.model_info()
        path = info.get("model_path")
        if not isinstance(path, str) or not path:
            raise MalformedReply(
                f"/get_model_info has no model_path: {info!r:.300}", backend=self._name
            )
        return path

    async def model_info(self) -> dict[str, Any]:
        """``/get_model_info`` of the first replica that answers."""
        self._opened()
        errors: list[str] = []
        for replica in sorted(self._replicas.replicas, key=lambda r: not r.healthy):
            try:
                response = await self._rc.admin(replica, "GET", "/get_model_info")
                info = msgspec.json.decode(response.content)
            except (BackendError, msgspec.DecodeError) as exc:
                errors.append(str(exc))
                continue
            if isinstance(info, dict):
                return info
            errors.append(f"{replica.url}: /get_model_info is not a JSON object")
        raise BackendUnavailable(
            "no replica answered /get_model_info: " + "; ".join(errors), backend=self._name
        )

    async def count_tokens(self, text: str) -> int:
        """Tokens ``text`` is by the server's own tokenizer, without any
        template: ``POST /tokenize`` on the first healthy replica
        (``TokenCounter``: agents' context budgets are calibrated with it)."""
        self._opened()
        post = self._rc.post
        assert post is not None  # set with the client
        replica = min(self._replicas.replicas, key=lambda r: not r.healthy)
        url = f"{replica.url}/tokenize"
        body = encoder.encode({"model": self._model or "", "prompt": text})
        try:
            with anyio.fail_after(self._config.http.read_timeout_s):
                reply = await post(url, body, _JSON, self._timeouts)
        except TimeoutError:
            raise BackendTimeout(
                f"no reply within {self._config.http.read_timeout_s:g}s",
                backend=self._name,
                endpoint=url,
            ) from None
        except Exception as exc:
            raise self._rc.transport_error(exc, replica, url, "counting tokens").error from exc
        if reply.status != 200:
            raise BackendError(f"HTTP {reply.status}", backend=self._name, endpoint=url)
        try:
            counted = msgspec.json.decode(reply.body)
            return int(counted["count"])
        except (msgspec.DecodeError, LookupError, TypeError, ValueError):
            raise MalformedReply(
                f"not a /tokenize reply: {reply.body[:200]!r}", backend=self._name, endpoint=url
            ) from None

    async def flush_cache(self) -> dict[str, bool]:
        """``POST /flush_cache`` on every replica; which ones flushed."""
        self._opened()
        done: dict[str, bool] = {}

        async def flush(replica: Replica) -> None:
            try:
                await self._rc.admin(replica, "POST", "/flush_cache")
                done[replica.url] = True
            except BackendError as exc:
                self._log.warning("flush_cache_failed", url=replica.url, error=str(exc))
                done[replica.url] = False

        async with anyio.create_task_group() as tg:
            for replica in self._replicas.replicas:
                tg.start_soon(flush, replica)
        return done

    # -- generation ----------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One ``/generate`` call for a chat request, retried and failed over."""
        self._opened()
        model = self._model_for(request)
        body = encoder.encode(build_payload(request))
        started = time.perf_counter()
        self._calls += 1
        prefix = f"call_{self._calls}_"
        rids = sample_rids(request.request_id, request.n)
        outputs = await self._rc.call(
            affinity_key(request), lambda r: self._generate_once(r, body, rids)
        )
        return self._reply(outputs, request, model, started, prefix)

    def _reply(
        self,
        outputs: list[GenerateOutput],
        request: ModelRequest,
        model: str,
        started: float,
        prefix: str,
    ) -> ModelReply:
        """The reply of one call's outputs, timed from ``started``."""
        return outputs_to_reply(
            outputs,
            request,
            model=model,
            latency_s=time.perf_counter() - started,
            backend=self._name,
            call_prefix=prefix,
        )

    async def generate(
        self, body: Mapping[str, Any], *, affinity_key: str | None = None
    ) -> list[GenerateOutput]:
        """POST a raw ``/generate`` body (``text`` or ``input_ids``,
        ``sampling_params``, ``rid``, ``return_logprob``,
        ``top_logprobs_num``...; not ``stream``) with the same routing and
        retries; one ``GenerateOutput`` per sample."""
        self._opened()
        if body.get("stream"):
            raise InvalidRequestError(f"[{self._name}] generate() does not stream; use stream()")
        data = encoder.encode(dict(body))
        rid = body.get("rid")
        # The ids the server knows the samples by (not those of SGLang's own
        # ``n > 1``: it draws them itself), to abort them.
        rids = [rid] if isinstance(rid, str) else rid if isinstance(rid, list) else []
        return await self._rc.call(
            affinity_key, lambda r: self._generate_once(r, data, [str(i) for i in rids])
        )

    async def _generate_once(
        self, replica: Replica, body: bytes, rids: list[str]
    ) -> list[GenerateOutput]:
        self._opened()
        post = self._rc.post
        assert post is not None  # set with the client
        url = f"{replica.url}/generate"
        try:
            reply = await post(url, body, _JSON, self._timeouts)
        except anyio.get_cancelled_exc_class():
            await self._abort(replica, rids)  # cancelled, or past the call deadline
            raise
        except Exception as exc:
            error = self._rc.transport_error(exc, replica, url, "waiting for the reply")
            if isinstance(error.error, BackendTimeout):
                await self._abort(replica, rids)
            raise error from exc
        if reply.status != 200:
            raise self._rc.status_error(reply.status, reply.headers, reply.body, url, _HINT_404)
        decoded = self._decode(reply_decoder, reply.body, url, "not a /generate reply")
        outputs = decoded if isinstance(decoded, list) else [decoded]
        if not outputs:
            raise MalformedReply("empty /generate reply", backend=self._name, endpoint=url)
        aborted = abort_message(outputs)
        if aborted is not None:
            raise BackendUnavailable(
                f"request aborted: {aborted}", backend=self._name, endpoint=url
            )
        return outputs

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        """Stream a chat request from ``/generate``: content deltas as they
        arrive (text from a ``<tool_call>`` tag on is held back), then the
        tool calls, then a delta carrying the assembled reply.  Retried and
        failed over per the policy, a stream cut after some deltas too: the
        new attempt's deltas follow a ``restart`` delta.  Close the iterator
        when stopping early (``contextlib.aclosing``)."""
        self._opened()
        model = self._model_for(request)
        body = encoder.encode(build_payload(request, stream=True))
        key = affinity_key(request)
        logprobs = request.logprobs or request.top_logprobs > 0
        started = time.perf_counter()
        self._calls += 1
        prefix = f"call_{self._calls}_"
        walk = self._rc.start(key)
        shown = False  # deltas handed on since the start (or the last restart)
        restart = False  # a retry after ``shown``: the caller must drop them
        while True:
            replica = await walk.next_replica()
            assembly = StreamAssembly(request.n, logprobs, forced_tool_call(request))
            async with walk.attempt(replica):
                attempt = self._stream_attempt(
                    replica,
                    body,
                    assembly,
                    walk.retrier,
                    sample_rids(request.request_id, request.n),
                )
                async with contextlib.aclosing(attempt) as deltas:
                    async for item in deltas:
                        if restart:
                            restart = False
                            yield StreamDelta(restart=True)
                        shown = True
                        yield item
            if walk.retrying:
                # A cut mid-reply too: retried (and failed over) like a cut connection.
                restart, shown = restart or shown, False
                continue
            self._rc.succeeded(replica)
            break
        outputs = assembly.outputs()
        aborted = abort_message(outputs)
        if aborted is not None:
            raise BackendUnavailable(
                f"request aborted: {aborted}", backend=self._name, endpoint=replica.url
            )
        if restart:
            yield StreamDelta(restart=True)
        for item in assembly.finish(prefix):
            yield item
        yield StreamDelta(reply=self._reply(outputs, request, model, started, prefix))

    async def _stream_attempt(
        self,
        replica: Replica,
        body: bytes,
        assembly: StreamAssembly,
        retrier: Retrier,
        rids: list[str],
    ) -> AsyncGenerator[StreamDelta, None]:
        """One streamed ``/generate`` on ``replica``: its content deltas until
        ``[DONE]``; a body that ends before it raises ``TransientError``."""
        client = self._opened()
        url = f"{replica.url}/generate"
        request = client.build_request("POST", url, content=body, headers=_SSE)
        try:
            response = await client.send(request, stream=True)
        except Exception as exc:
            raise self._rc.transport_error(exc, replica, url, "sending the request") from exc
        done = False
        try:
            if response.status_code != 200:
                data = await response.aread()
                raise self._rc.status_error(
                    response.status_code, response.headers, data, url, _HINT_404
                )
            decoder = SSEDecoder()
            chunks = response.aiter_raw()
            while True:
                try:
                    raw = await anext(chunks)
                except StopAsyncIteration:
                    raise TransientError(
                        BackendUnavailable(
                            "stream ended before [DONE] (connection cut)",
                            backend=self._name,
                            endpoint=url,
                        )
                    ) from None
                except Exception as exc:
                    raise self._rc.transport_error(exc, replica, url, "reading the stream") from exc
                for data in decoder.feed(raw):
                    if data == b"[DONE]":
                        done = True
                        return
                    for delta in assembly.add(self._decode_event(data, url)):
                        yield delta
                if retrier.remaining() <= 0:
                    raise BackendTimeout(
                        "stream still running at the call deadline",
                        backend=self._name,
                        endpoint=url,
                    )
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
            if not done and response.status_code == 200:
                # Closed early (the caller stopped reading, was cancelled or
                # hit its deadline): the server would go on generating.
                await self._abort(replica, rids)

    async def _abort(self, replica: Replica, rids: list[str]) -> None:
        """Ask ``replica`` to stop generating the samples ``rids`` (SGLang's
        ``POST /abort_request``, one per sample, all at once), so a call
        given up on frees the server's batch slots and KV cache now rather
        than at its ``max_tokens``.  Best effort, shielded and bounded
        (``_ABORT_TIMEOUT_S``): a failure is logged, never raised over the
        error that ended the call."""
        post = self._rc.post
        if not rids or post is None:
            return
        url = f"{replica.url}/abort_request"

        async def abort(rid: str) -> None:
            assert post is not None
            try:
                reply = await post(url, encoder.encode({"rid": rid}), _JSON, self._timeouts)
            except Exception as exc:
                self._log.warning("abort_failed", url=url, rid=rid, error=repr(exc))
                return
            if reply.status != 200:
                self._log.warning("abort_refused", url=url, rid=rid, status=reply.status)
            else:
                self._log.debug("aborted", url=url, rid=rid)

        with anyio.CancelScope(shield=True), anyio.move_on_after(_ABORT_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for rid in rids:
                    tg.start_soon(abort, rid)

    def _decode_event(self, data: bytes, url: str) -> GenerateOutput:
        return self._decode(event_decoder, data, url, "stream event is not a /generate reply")

    def _decode(self, decoder: msgspec.json.Decoder[_T], data: bytes, url: str, what: str) -> _T:
        """``data`` decoded, or :class:`MalformedReply` saying ``what`` it is not."""
        try:
            return decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise MalformedReply(
                f"{what} ({exc}): {data[:200]!r}", backend=self._name, endpoint=url
            ) from None
