"""The daemon's OpenAI-compatible endpoint: agentrt agents as OpenAI models
(``openai_routes``).

Part of the daemon (``agentrt.runtime.serve``); talks to runs only through
the ``RunManager``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from agentrt.protocols import Event, RolloutFinished, RunRequest, VoteCast
from agentrt.protocols.api import TERMINAL_STATUSES, AgentInfo, RunInfo
from agentrt.runtime.log import get_logger
from agentrt.runtime.serve.bridge import RunService
from agentrt.runtime.serve.errors import ApiProblem
from agentrt.runtime.serve.openai_wire import (
    AssistantOut,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceOut,
    ChunkChoice,
    Delta,
    Extension,
    ModelCard,
    ModelList,
    OpenAIError,
    UsageOut,
    decode_request,
    extension_of,
    param_for,
    to_run_request,
    usage_of,
)

log = get_logger(__name__)

#: Largest chat request accepted: a long conversation is the task, but a
#: body this large is a mistake, not a prompt.
MAX_BODY: Final = 4 << 20
#: How long a disconnected client's run may take to stop before we let go.
CANCEL_GRACE_S: Final = 10.0
#: Why 16: progress events only feed SSE comments; a slow client should
#: push back on the follower rather than have events pile up.
_PROGRESS_BUFFER: Final = 16

_encode = msgspec.json.Encoder().encode


def _json(value: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_encode(value), status, headers=headers, media_type="application/json")


def _error_response(err: OpenAIError) -> Response:
    headers = {} if err.retry is None else {"x-should-retry": "true" if err.retry else "false"}
    return _json(err.body(), err.status, headers)


def _run_error(info: RunInfo) -> OpenAIError:
    """Why a run gave no answer, as the error its client gets."""
    run_id, status = info.run_id, info.status
    where = f"run {run_id} (GET /v1/runs/{run_id})"
    if status == "failed":
        reason = info.error or "no rollout produced an answer"
        return OpenAIError(
            502, f"{where} failed: {reason}", code="run_failed", run_id=run_id, retry=False
        )
    if status == "cancelled":
        return OpenAIError(
            409,
            f"{where} was cancelled before it answered",
            code="run_cancelled",
            run_id=run_id,
            retry=False,
        )
    return OpenAIError(
        503,
        f"{where} is still {status}: the daemon is shutting down; the run resumes from its "
        "last committed step when the daemon restarts",
        code="shutting_down",
        run_id=run_id,
        retry=False,
    )


async def _read_body(request: Request) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise OpenAIError(413, f"the request body is over {MAX_BODY} bytes", code="too_large")
    if not body.strip():
        raise OpenAIError(400, "the request body is empty; send a JSON object", code="invalid_json")
    return bytes(body)


async def _cancel_abandoned(manager: RunService, run_id: str) -> None:
    """The client left before the answer: stop its run (shielded, bounded)."""
    with anyio.move_on_after(CANCEL_GRACE_S, shield=True):
        info = await manager.get(run_id)
        if info is not None and info.status not in TERMINAL_STATUSES:
            log.info("openai_client_left", run_id=run_id)
            await manager.cancel(run_id)


async def _until_disconnect(receive: Receive) -> None:
    """Returns when the client goes away (the request body is already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class _Endpoints:
    def __init__(self, manager: RunService, keepalive_s: float) -> None:
        self.manager = manager
        self.keepalive_s = keepalive_s
        self.created = int(time.time())

    # -- models ----------------------------------------------------------------

    def _card(self, agent: AgentInfo) -> ModelCard:
        return ModelCard(id=agent.model, created=self.created)

    def _agent(self, model: str) -> AgentInfo:
        agents = self.manager.agents()
        for agent in agents:
            if model in (agent.model, agent.name):
                return agent
        if model == "agentrt":
            for agent in agents:
                if agent.default:
                    return agent
        known = ", ".join(a.model for a in agents)
        raise OpenAIError(
            404,
            f"the model {model!r} does not exist here; models are agentrt agents: {known}",
            param="model",
            code="model_not_found",
        )

    async def list_models(self, _request: Request) -> Response:
        return _json(ModelList(data=[self._card(a) for a in self.manager.agents()]))

    async def get_model(self, request: Request) -> Response:
        try:
            return _json(self._card(self._agent(request.path_params["model"])))
        except OpenAIError as err:
            return _error_response(err)

    # -- chat completions ------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        try:
            chat = decode_request(await _read_body(request))
            agent = self._agent(chat.model)
            info = await self._submit(chat, agent)
        except OpenAIError as err:
            return _error_response(err)
        log.info("openai_run", run_id=info.run_id, model=agent.model, stream=bool(chat.stream))
        if chat.stream:
            include_usage = chat.stream_options is not None and bool(
                chat.stream_options.include_usage
            )
            return _CompletionStream(self, info, agent.model, include_usage)
        return await self._complete(request, info, agent.model)

    async def _submit(self, chat: ChatCompletionRequest, agent: AgentInfo) -> RunInfo:
        defaults = self.manager.config.runtime
        run, fields = to_run_request(
            chat,
            agent=agent.name,
            default_rollouts=defaults.rollouts,
            default_aggregate=defaults.aggregate,
            default_options=dict(defaults.aggregate_options),
        )
        return await self._admit(run, fields)

    async def _admit(self, run: RunRequest, fields: dict[str, str]) -> RunInfo:
        try:
            return await self.manager.submit(run)
        except ApiProblem as problem:
            status = 400 if problem.status == 422 else problem.status
            raise OpenAIError(
                status,
                problem.message,
                param=param_for(problem.where, fields),
                code=problem.error,
                retry=None if status >= 500 else False,
            ) from None

    async def _complete(self, request: Request, info: RunInfo, model: str) -> Response:
        run_id = info.run_id
        left = False
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal left
                await _until_disconnect(request.receive)
                left = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            info = await self.manager.wait(run_id)
            tg.cancel_scope.cancel()
        if left:
            await _cancel_abandoned(self.manager, run_id)
            return Response(status_code=499)  # nobody reads it
        if info.status != "succeeded":
            return _error_response(_run_error(info))
        detail = await self.manager.detail(run_id)
        completion = ChatCompletion(
            id=f"chatcmpl-{run_id}",
            created=int(info.created_at),
            model=model,
            choices=[ChoiceOut(message=AssistantOut(content=info.answer or ""))],
            usage=usage_of(info),
            agentrt=extension_of(info, detail.rollouts if detail is not None else []),
        )
        return _json(completion)


def _progress(event: Event) -> bytes | None:
    """An SSE comment for a milestone of the run (clients skip comments)."""
    match event:
        case RolloutFinished(rollout_id=rollout_id, status=status):
            return f": rollout {rollout_id} {status}\n\n".encode()
        case VoteCast(aggregator=aggregator, round=round_, winner=winner):
            return f": {aggregator} round {round_}: winner {winner}\n\n".encode()
        case _:
            return None


class _CompletionStream(Response):
    """The SSE reply of a streaming chat completion (a raw ASGI response: one
    task follows the run, one watches for the client leaving)."""

    def __init__(self, endpoints: _Endpoints, info: RunInfo, model: str, usage: bool) -> None:
        super().__init__(
            status_code=200,
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
        # the body is streamed: no length (Response set one for its empty body)
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.endpoints = endpoints
        self.info = info
        self.model = model
        self.include_usage = usage

    def _chunk(
        self,
        choices: list[ChunkChoice],
        *,
        usage: UsageOut | None = None,
        agentrt: Extension | None = None,
    ) -> bytes:
        chunk = ChatCompletionChunk(
            id=f"chatcmpl-{self.info.run_id}",
            created=int(self.info.created_at),
            model=self.model,
            choices=choices,
            usage=usage,
            agentrt=agentrt,
        )
        return b"data: " + _encode(chunk) + b"\n\n"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def write(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        left = False
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal left
                await _until_disconnect(receive)
                left = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                await self._stream(write)
            except OSError:  # the socket went away under a write
                left = True
            tg.cancel_scope.cancel()
        if left:
            await _cancel_abandoned(self.endpoints.manager, self.info.run_id)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        manager, run_id = self.endpoints.manager, self.info.run_id
        await write(self._chunk([ChunkChoice(delta=Delta(role="assistant", content=""))]))
        send_progress, receive_progress = anyio.create_memory_object_stream[bytes](_PROGRESS_BUFFER)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow, send_progress)
            async with receive_progress:
                while True:
                    line: bytes | None = b": keep-alive\n\n"
                    with anyio.move_on_after(self.endpoints.keepalive_s):
                        try:
                            line = await receive_progress.receive()
                        except anyio.EndOfStream:
                            line = None
                    if line is None:
                        break
                    await write(line)
        info = await manager.get(run_id)
        if info is None or info.status != "succeeded":
            err = _run_error(info or self.info)
            await write(b"data: " + _encode(err.body()) + b"\n\n")
            return
        detail = await manager.detail(run_id)
        if info.answer:
            await write(self._chunk([ChunkChoice(delta=Delta(content=info.answer))]))
        await write(
            self._chunk(
                [ChunkChoice(delta=Delta(), finish_reason="stop")],
                agentrt=extension_of(info, detail.rollouts if detail is not None else []),
            )
        )
        if self.include_usage:
            await write(self._chunk([], usage=usage_of(info)))
        await write(b"data: [DONE]\n\n")

    async def _follow(self, progress: MemoryObjectSendStream[bytes]) -> None:
        """Feeds milestones of the run to the stream; closing it says the run is over."""
        async with progress:
            try:
                async for event in self.endpoints.manager.follow(self.info.run_id):
                    line = _progress(event)
                    if line is not None:
                        await progress.send(line)
            except Exception as exc:  # progress is optional; the answer is not
                log.warning("openai_follow_failed", run_id=self.info.run_id, error=repr(exc))
                await self.endpoints.manager.wait(self.info.run_id)


def openai_routes(manager: RunService, *, keepalive_s: float | None = None) -> list[BaseRoute]:
    """The OpenAI-compatible routes over ``manager`` (SSE keep-alive comments
    every ``keepalive_s``; default: the daemon's ``server.sse_keepalive_s``).

    ``GET /v1/models[/{model}]``: every agent is a model ``agentrt/<agent>``.
    ``POST /v1/chat/completions``: the messages become a run's task; extra
    fields (``rollouts``, ``aggregate``, ``aggregate_options``, ``budget``,
    top level or in an ``agentrt`` object, i.e. the client's
    ``extra_body``) its scaling and budget.  The run goes through the
    ``RunManager`` like any other; the answer comes back with ``usage`` from
    the run's cost and an ``agentrt`` field naming the run.  With
    ``stream: true``: SSE chunks (the role, comments while the run
    progresses, the answer, the usage if ``stream_options.include_usage``,
    ``[DONE]``).  A client that disconnects cancels its run.  Errors are
    OpenAI's ``{"error": {...}}`` with the status a client expects; a failed
    or cancelled run is reported as such, never as a 500."""
    endpoints = _Endpoints(
        manager, manager.config.server.sse_keepalive_s if keepalive_s is None else keepalive_s
    )
    return [
        Route("/v1/models", endpoints.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", endpoints.get_model, methods=["GET"]),
        Route("/v1/chat/completions", endpoints.chat_completions, methods=["POST"]),
    ]


__all__ = ["CANCEL_GRACE_S", "MAX_BODY", "openai_routes"]
