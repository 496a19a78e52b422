"""The daemon's OpenAI-compatible endpoint: agentrt agents as OpenAI models
(``openai_routes``).

Part of the daemon (``agentrt.runtime.serve``); talks to runs only through
the ``RunManager``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentrt.protocols._api import AgentInfo, RunInfo
from agentrt.protocols._messages import ToolCall
from agentrt.protocols._model import TokenLogprob
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._bridge import RunService
from agentrt.runtime.serve._keys import caller_of
from agentrt.runtime.serve.openai._answer_stream import AnswerStream, StreamText
from agentrt.runtime.serve.openai._chat_translate import (
    chat_asked,
    decode_request,
    extension_of,
    logprob_entries,
    usage_of,
)
from agentrt.runtime.serve.openai._openai_error import OpenAIError
from agentrt.runtime.serve.openai._openai_options import Requested, chat_requested, labels
from agentrt.runtime.serve.openai._openai_runs import (
    CANCEL_GRACE_S,
    EventStream,
    OpenAIRuns,
    Outcome,
    error_response,
    json_response,
    sse_data,
)
from agentrt.runtime.serve.openai._responses import responses_routes
from agentrt.runtime.wire._chat import (
    AssistantOut,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceOut,
    ChunkChoice,
    Delta,
    FinishReasonOut,
    FunctionCallOut,
    LogprobsOut,
    TokenLogprobOut,
    ToolCallDelta,
    ToolCallOut,
    TopLogprobOut,
    UsageOut,
)
from agentrt.runtime.wire._common import Extension, ModelCard, ModelList

log = get_logger(__name__)

#: Why 16: a slow client should push back on the follower (and the run)
#: rather than have text pile up.
_PROGRESS_BUFFER: Final = 16


class _Endpoints:
    def __init__(self, runs: OpenAIRuns) -> None:
        self.runs = runs
        self.manager = runs.manager

    # -- models ----------------------------------------------------------------

    def _card(self, agent: AgentInfo) -> ModelCard:
        return ModelCard(id=agent.model, created=self.runs.created)

    async def list_models(self, _request: Request) -> Response:
        return json_response(ModelList(data=[self._card(a) for a in self.manager.agents()]))

    async def get_model(self, request: Request) -> Response:
        try:
            return json_response(self._card(self.runs.agent(request.path_params["model"])))
        except OpenAIError as err:
            return error_response(err)

    # -- chat completions ------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        try:
            chat = decode_request(await self.runs.body(request))
            agent = self.runs.agent(chat.model)
            wanted = chat_requested(chat, self.manager.config.runtime)
            info = await self.runs.submit(
                asked=chat_asked(chat.messages),
                agent=agent,
                requested=wanted,
                metadata=labels(chat, "openai"),
                task_param="messages",
                stream=bool(chat.stream),
                owner=caller_of(request).name,
            )
        except OpenAIError as err:
            return error_response(err)
        log.info("openai_run", run_id=info.run_id, model=agent.model, stream=bool(chat.stream))
        if chat.stream:
            usage = chat.stream_options is not None and bool(chat.stream_options.include_usage)
            stream = _CompletionStream(self.runs, info, agent.model, wanted, usage)
            return EventStream(stream.produce, lambda: self.runs.cancel_abandoned(info.run_id))
        return await self._complete(request, info, agent.model, wanted)

    async def _complete(
        self, request: Request, info: RunInfo, model: str, wanted: Requested
    ) -> Response:
        outcome = await self.runs.finished(request, info.run_id, wanted)
        if isinstance(outcome, Response):
            return outcome
        done = outcome.info
        completion = ChatCompletion(
            id=f"chatcmpl-{done.run_id}",
            created=int(done.created_at),
            model=model,
            choices=[
                ChoiceOut(
                    message=AssistantOut(
                        content=outcome.text or (None if outcome.calls else ""),
                        tool_calls=_tool_calls(outcome.calls) or None,
                    ),
                    finish_reason=_finish(outcome),
                    logprobs=_logprobs(outcome.logprobs),
                )
            ],
            usage=usage_of(done),
            agentrt=_extension(outcome),
        )
        return json_response(completion)


def _finish(outcome: Outcome) -> FinishReasonOut:
    return "tool_calls" if outcome.calls else "stop"


def _extension(outcome: Outcome) -> Extension:
    return extension_of(outcome.info, outcome.rollouts)


def _tool_calls(calls: list[ToolCall]) -> list[ToolCallOut]:
    return [
        ToolCallOut(
            id=c.id, function=FunctionCallOut(name=c.function.name, arguments=c.function.arguments)
        )
        for c in calls
    ]


def _logprobs(logprobs: list[TokenLogprob] | None) -> LogprobsOut | None:
    if logprobs is None:
        return None
    return LogprobsOut(content=logprob_entries(logprobs, TokenLogprobOut, TopLogprobOut))


class _CompletionStream:
    """The SSE body of a streaming chat completion (``EventStream`` sends it)."""

    def __init__(
        self, runs: OpenAIRuns, info: RunInfo, model: str, wanted: Requested, usage: bool
    ) -> None:
        self.runs = runs
        self.info = info
        self.model = model
        self.wanted = wanted
        self.text = AnswerStream(info.run_id, info.rollouts)
        # An answer held to a schema is sent once validated: the text a step
        # generates (maybe a rejected answer) goes out as reasoning meanwhile.
        self.hold_content = wanted.options.response_schema is not None
        self.include_usage = usage
        """Whether the last chunk carries the usage (``stream_options.include_usage``)."""

    def _chunk(
        self,
        choices: list[ChunkChoice],
        *,
        usage: UsageOut | None = None,
        agentrt: Extension | None = None,
    ) -> bytes:
        return sse_data(
            ChatCompletionChunk(
                id=f"chatcmpl-{self.info.run_id}",
                created=int(self.info.created_at),
                model=self.model,
                choices=choices,
                usage=usage,
                agentrt=agentrt,
            )
        )

    async def produce(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        manager, run_id = self.runs.manager, self.info.run_id
        await write(self._chunk([ChunkChoice(delta=Delta(role="assistant", content=""))]))
        send_progress, receive_progress = anyio.create_memory_object_stream[StreamText](
            _PROGRESS_BUFFER
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow, send_progress)
            async with receive_progress:
                while True:
                    line: bytes | None = b": keep-alive\n\n"
                    with anyio.move_on_after(self.runs.keepalive_s):
                        try:
                            line = self._text_chunk(await receive_progress.receive())
                        except anyio.EndOfStream:
                            line = None
                    if line is None:
                        break
                    await write(line)
        outcome = await self.runs.settled(await manager.get(run_id) or self.info, self.wanted)
        if isinstance(outcome, OpenAIError):
            await write(sse_data(outcome.body()))
            return
        # what the tokens did not say yet
        rest = outcome.text if self.hold_content else self.text.rest(outcome.text)
        if rest or outcome.logprobs:
            await write(
                self._chunk(
                    [
                        ChunkChoice(
                            delta=Delta(content=rest),
                            logprobs=_logprobs(outcome.logprobs),
                        )
                    ]
                )
            )
        if outcome.calls:
            deltas = [
                ToolCallDelta(
                    index=i,
                    id=c.id,
                    function=FunctionCallOut(name=c.function.name, arguments=c.function.arguments),
                )
                for i, c in enumerate(outcome.calls)
            ]
            await write(self._chunk([ChunkChoice(delta=Delta(tool_calls=deltas))]))
        await write(
            self._chunk(
                [ChunkChoice(delta=Delta(), finish_reason=_finish(outcome))],
                agentrt=_extension(outcome),
            )
        )
        if self.include_usage:
            await write(self._chunk([], usage=usage_of(outcome.info)))
        await write(b"data: [DONE]\n\n")

    def _text_chunk(self, text: StreamText) -> bytes:
        if self.hold_content:
            text = StreamText(reasoning=text.reasoning + text.content)
        delta = Delta(content=text.content or None, reasoning_content=text.reasoning or None)
        return self._chunk([ChunkChoice(delta=delta)])

    async def _follow(self, progress: MemoryObjectSendStream[StreamText]) -> None:
        """Feeds the run's text (``AnswerStream``: the answer as it is
        generated, progress as reasoning) to the stream; closing it says the
        run is over."""
        async with progress:
            try:
                follow = self.runs.manager.follow(self.info.run_id, tokens=True)
                async for event in follow:
                    text = self.text.feed(event)
                    if text is not None:
                        await progress.send(text)
            except Exception as exc:  # progress is optional; the answer is not
                log.warning("openai_follow_failed", run_id=self.info.run_id, error=repr(exc))
                await self.runs.manager.wait(self.info.run_id)


def openai_routes(manager: RunService, *, keepalive_s: float | None = None) -> list[BaseRoute]:
    """The OpenAI-compatible routes over ``manager`` (SSE keep-alive comments
    every ``keepalive_s``; default: the daemon's ``server.sse_keepalive_s``).

    ``GET /v1/models[/{model}]``: every agent is a model ``agentrt/<agent>``.
    ``POST /v1/chat/completions``: the messages reach the agent's model as
    they are (system messages join its own; the last user message is the
    run's task), and ``tool_choice`` governs the client's tools; every
    field OpenAI defines is honoured or refused with a 400 naming it:
    sampling (``temperature``, ``top_p``, ``max_tokens`` or
    ``max_completion_tokens``, ``stop``, ``seed``) applies to every model
    call of the agent; ``response_format`` constrains the final answer (a
    JSON schema, validated, sent back to the model on a mismatch);
    ``logprobs``/``top_logprobs`` give the final reply's log-probabilities
    (a 400 when the backend gives none); ``tools`` are offered to the agent's
    model beside its own tools, and a call to one ends the response with
    ``finish_reason: "tool_calls"`` for the client to run and continue the
    conversation (messages with role ``tool``); client tools and logprobs
    need one rollout.  agentrt's own fields (``rollouts``, ``aggregate``,
    ``aggregate_options``, ``budget``, top level or in an ``agentrt``
    object, i.e. the client's ``extra_body``) scale the run.  The answer
    comes back with ``usage`` from the run's cost and an ``agentrt`` field
    naming the run.  With ``stream: true``: SSE chunks (the role; with one
    rollout its model's text as ``content`` while it is generated; the
    run's progress as ``reasoning_content``; the rest of the answer or tool
    calls, the usage if
    ``stream_options.include_usage``, ``[DONE]``).  ``POST /v1/responses``:
    the Responses API over the same runs (``responses_routes``).  A client
    that disconnects cancels its run.  Errors are OpenAI's ``{"error":
    {...}}`` with the status a client expects; a failed or cancelled run is
    reported as such, never as a 500."""
    runs = OpenAIRuns(
        manager, manager.config.server.sse_keepalive_s if keepalive_s is None else keepalive_s
    )
    endpoints = _Endpoints(runs)
    return [
        Route("/v1/models", endpoints.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", endpoints.get_model, methods=["GET"]),
        Route("/v1/chat/completions", endpoints.chat_completions, methods=["POST"]),
        *responses_routes(runs),
    ]


__all__ = ["CANCEL_GRACE_S", "openai_routes"]
