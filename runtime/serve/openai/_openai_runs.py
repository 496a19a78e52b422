"""Runs behind the OpenAI-compatible endpoints (chat completions and
responses): which agent a model names, admitting a run, waiting for it
while watching the client, and what it ended with (``Outcome``: the answer,
the client tool calls, the final reply's log-probabilities).

Part of the daemon (``agentrt.runtime.serve``); talks to runs only through
the ``RunService``.  Knows no wire shape but OpenAI's errors.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, final

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentrt.protocols._api import TERMINAL_STATUSES, AgentInfo, RolloutInfo, RunInfo
from agentrt.protocols._messages import ChatMessage, ToolCall
from agentrt.protocols._model import TokenLogprob
from agentrt.protocols._run import RunRequest
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._api_problem import ApiProblem
from agentrt.runtime.serve._bridge import RunService
from agentrt.runtime.serve._governance import check_json_depth
from agentrt.runtime.serve._keys import Caller
from agentrt.runtime.serve.openai._chat_translate import Asked
from agentrt.runtime.serve.openai._openai_error import OpenAIError
from agentrt.runtime.serve.openai._openai_options import Requested, param_for

log = get_logger(__name__)

#: How long a disconnected client's run may take to stop before we let go.
CANCEL_GRACE_S: Final = 10.0

_encode = msgspec.json.Encoder().encode


def json_response(
    value: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(_encode(value), status, headers=headers, media_type="application/json")


def error_response(err: OpenAIError) -> Response:
    headers = {} if err.retry is None else {"x-should-retry": "true" if err.retry else "false"}
    if err.retry_after is not None:
        headers["retry-after"] = str(err.retry_after)
    return json_response(err.body(), err.status, headers)


def sse_data(value: object) -> bytes:
    return b"data: " + _encode(value) + b"\n\n"


def run_error(info: RunInfo) -> OpenAIError:
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


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client goes away (the request body is already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


Produce = Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]
"""What writes a streamed body, given the function that sends a piece of it."""


@final
class EventStream(Response):
    """A streamed 200 of server-sent events whose body ``produce`` writes (a
    raw ASGI response: one task produces, one watches for the client
    leaving); when the client goes away first (a disconnect, or the socket
    failing under a write), it stops producing and calls ``abandoned``
    instead of ending the body."""

    def __init__(self, produce: Produce, abandoned: Callable[[], Awaitable[None]]) -> None:
        super().__init__(
            status_code=200,
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
        # the body is streamed: no length (Response set one for its empty body)
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.produce = produce
        self.abandoned = abandoned

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def write(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        left = False
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal left
                await until_disconnect(receive)
                left = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                await self.produce(write)
            except OSError:  # the socket went away under a write
                left = True
            tg.cancel_scope.cancel()
        if left:
            await self.abandoned()
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished run answers a client with."""

    info: RunInfo
    rollouts: list[RolloutInfo]
    text: str
    calls: list[ToolCall] = field(default_factory=list)
    """Calls to the client's tools the run ended on (then ``text`` is the
    final reply's own text, often empty)."""
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str = "stop"


@final
class OpenAIRuns:
    """The run side of both OpenAI-compatible endpoints."""

    def __init__(self, manager: RunService, keepalive_s: float) -> None:
        self.manager = manager
        self.keepalive_s = keepalive_s
        self.created = int(time.time())

    async def body(self, request: Request) -> bytes:
        """The request's body: its size and time bounded by the daemon's
        ``Guard`` (``server.max_request_bytes``, ``server.body_timeout_s``),
        its nesting by ``server.max_json_depth``; a limit hit is an error in
        OpenAI's shape naming the limit."""
        max_depth = self.manager.config.server.max_json_depth
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
            if body.strip():
                check_json_depth(bytes(body), max_depth)
        except ApiProblem as problem:
            raise OpenAIError(
                problem.status, problem.message, param=problem.where, code=problem.error
            ) from None
        if not body.strip():
            raise OpenAIError(
                400, "the request body is empty; send a JSON object", code="invalid_json"
            )
        return bytes(body)

    def agent(self, model: str) -> AgentInfo:
        """The agent ``model`` names (``agentrt/<agent>``, ``<agent>``, or
        ``agentrt``: the default one), else a 404 naming the known ones."""
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

    async def submit(
        self,
        *,
        asked: Asked,
        agent: AgentInfo,
        requested: Requested,
        metadata: dict[str, str],
        task_param: str,
        stream: bool,
        thread_id: str | None = None,
        owner: str | None = None,
    ) -> RunInfo:
        """Admit the run ``asked`` (its conversation, instructions and task)
        of the key ``owner`` with what the request ``requested``; a refusal
        is the OpenAI error naming the request's field.  ``stream``: the
        request streams the answer (its model calls stream from the start)."""
        run = RunRequest(
            task=asked.task,
            agent=agent.name,
            scaling=requested.scaling,
            budget=requested.budget,
            options=msgspec.structs.replace(
                requested.options,
                instructions=asked.instructions,
                conversation=asked.conversation,
            ),
            metadata=metadata,
            stream_tokens=stream,
        )
        fields = {
            **requested.fields,
            "task": task_param,
            "agent": "model",
            "options.tool_choice": "tool_choice",
            "options.conversation": task_param,
            "thread_id": "conversation",
        }
        try:
            if thread_id is not None:
                return await self.manager.submit_in_thread(thread_id, run, owner=owner)
            return await self.manager.submit(run, owner=owner)
        except ApiProblem as problem:
            status = 400 if problem.status == 422 else problem.status
            raise OpenAIError(
                status,
                problem.message,
                param=param_for(problem.where, fields),
                code=problem.error,
                retry=True if status == 429 else None if status >= 500 else False,
                retry_after=problem.retry_after,
            ) from None

    async def wait(self, request: Request, run_id: str) -> RunInfo | None:
        """The finished run, or ``None`` when the client left first (its
        run is then cancelled)."""
        left = False
        info: RunInfo | None = None
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal left
                await until_disconnect(request.receive)
                left = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            info = await self.manager.wait(run_id)
            tg.cancel_scope.cancel()
        if left:
            await self.cancel_abandoned(run_id)
            return None
        return info

    async def finished(
        self, request: Request, run_id: str, wanted: Requested
    ) -> Outcome | Response:
        """What the run ``run_id`` ended with, once it has; or the response
        that says why there is nothing to answer (499: the client left)."""
        done = await self.wait(request, run_id)
        if done is None:
            return Response(status_code=499)  # nobody reads it
        answer = await self.settled(done, wanted)
        return error_response(answer) if isinstance(answer, OpenAIError) else answer

    async def settled(self, info: RunInfo, wanted: Requested) -> Outcome | OpenAIError:
        """What the run ``info`` (finished) answers with, or the error that
        says why it gives no answer."""
        if info.status != "succeeded":
            return run_error(info)
        try:
            return await self.outcome(info, wanted)
        except OpenAIError as err:
            return err

    async def cancel_abandoned(self, run_id: str) -> None:
        """The client left before the answer: stop its run (shielded, bounded)."""
        with anyio.move_on_after(CANCEL_GRACE_S, shield=True):
            info = await self.manager.get(run_id)
            if info is not None and info.status not in TERMINAL_STATUSES:
                log.info("openai_client_left", run_id=run_id)
                await self.manager.cancel(run_id)

    async def outcome(self, info: RunInfo, requested: Requested) -> Outcome:
        """What the succeeded run ``info`` ended with; the final reply is
        read from the run's one rollout when the request needs it (client
        tools, logprobs).  Log-probabilities asked of a backend that gave
        none are a 400."""
        detail = await self.manager.detail(info.run_id)
        rollouts = detail.rollouts if detail is not None else []
        # A chat client gets the reply the model wrote (the winning rollout's
        # answer as written), not the part the vote compared.
        result = detail.result if detail is not None else None
        raw = result.raw_answer if result is not None else None
        text = (raw if raw is not None else info.answer) or ""
        options = requested.options
        if not (requested.client_tools or options.logprobs):
            return Outcome(info, rollouts, text)
        reply = await self.manager.final_reply(info.run_id, rollouts)
        if requested.client_tools and reply is not None:
            message = reply.message
            calls = [c for c in message.tool_calls if c.function.name in requested.client_tools]
            if calls and info.answer is not None:
                if not requested.parallel_tool_calls:
                    calls = calls[:1]
                return Outcome(
                    info, rollouts, message.content or "", calls, finish_reason="tool_calls"
                )
        logprobs = None
        if options.logprobs:
            logprobs = reply.choices[0].logprobs if reply is not None else None
            if logprobs is None:
                raise OpenAIError(
                    400,
                    f"the model behind agent {info.agent!r} gave no log-probabilities "
                    f"(run {info.run_id} answered; ask without `logprobs`)",
                    param="logprobs",
                    code="unsupported_parameter",
                    run_id=info.run_id,
                    retry=False,
                )
        return Outcome(info, rollouts, text, logprobs=logprobs)

    async def conversation_turns(self, conversation_id: str, caller: Caller) -> list[ChatMessage]:
        """What conversation ``conversation_id`` (a thread) holds; an unknown
        one (or another key's: ``caller`` does not see it) is a 404, one
        with an unfinished response a 409, both naming ``conversation``."""
        thread = await self.manager.thread(conversation_id)
        if thread is None or not caller.sees(thread.owner):
            raise OpenAIError(
                404,
                f"no conversation {conversation_id!r} here (POST /v1/conversations makes one)",
                param="conversation",
                code="conversation_not_found",
            )
        try:
            return await self.manager.thread_history(thread)
        except ApiProblem as problem:
            raise OpenAIError(
                problem.status, problem.message, param="conversation", code=problem.error
            ) from None

    async def earlier_turns(
        self, response_id: str, param: str, caller: Caller
    ) -> list[ChatMessage]:
        """The conversation response ``response_id`` (``resp_<run id>``)
        ended: its run's conversation (or task) and its answer, as native
        messages (its client tool calls, when it ended on them).  An
        unknown id (or another key's: ``caller`` does not see its run) is a
        404 naming it (``param``: the request's field); a run that did not
        answer, a 409."""
        run_id = response_id.removeprefix("resp_")
        detail = await self.manager.detail(run_id) if response_id.startswith("resp_") else None
        if detail is None or not caller.sees(detail.run.owner):
            raise OpenAIError(
                404,
                f"no response {response_id!r} here (responses are named resp_<run id>)",
                param=param,
                code="previous_response_not_found",
            )
        info = detail.run
        if info.status != "succeeded":
            raise OpenAIError(
                409,
                f"response {response_id!r} is {info.status}: only a completed response continues",
                param=param,
                code="previous_response_unusable",
                run_id=run_id,
                retry=False,
            )
        return await self.manager.conversation_of(detail)


__all__ = [
    "CANCEL_GRACE_S",
    "EventStream",
    "OpenAIRuns",
    "Outcome",
    "error_response",
    "json_response",
    "run_error",
    "sse_data",
    "until_disconnect",
]
