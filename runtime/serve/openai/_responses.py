"""The daemon's ``/v1/responses``: agentrt agents behind OpenAI's Responses
API (``responses_routes``), the API the OpenAI Agents SDK's default model
speaks.

Part of the daemon (``agentrt.runtime.serve``); talks to runs only through
``OpenAIRuns``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentrt.protocols._api import AgentInfo, RunInfo, ThreadInfo
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._keys import caller_of
from agentrt.runtime.serve.openai._answer_stream import AnswerStream, StreamText
from agentrt.runtime.serve.openai._chat_translate import extension_of
from agentrt.runtime.serve.openai._openai_error import OpenAIError, decode_error
from agentrt.runtime.serve.openai._openai_options import Requested, labels, refuse
from agentrt.runtime.serve.openai._openai_runs import (
    EventStream,
    OpenAIRuns,
    Outcome,
    error_response,
    json_response,
)
from agentrt.runtime.serve.openai._responses_translate import (
    conversation_ref,
    decode_response_request,
    echo,
    logprobs_out,
    output_items,
    responses_asked,
    responses_requested,
)
from agentrt.runtime.wire._responses import (
    ArgumentsDelta,
    ArgumentsDone,
    ContentPartAdded,
    ContentPartDone,
    ConversationCreate,
    ConversationDeleted,
    ConversationObject,
    FunctionCallItem,
    InputDetails,
    LogprobOut,
    OutputDetails,
    OutputItem,
    OutputItemAdded,
    OutputItemDone,
    OutputMessage,
    OutputText,
    OutputTextDelta,
    OutputTextDone,
    ReasoningItem,
    ResponseCompleted,
    ResponseCreated,
    ResponseError,
    ResponseFailed,
    ResponseInProgress,
    ResponseObject,
    ResponseRequest,
    ResponseStatus,
    ResponseUsage,
    StreamEvent,
    SummaryPartAdded,
    SummaryPartDone,
    SummaryText,
    SummaryTextDelta,
    SummaryTextDone,
)

log = get_logger(__name__)

_encode = msgspec.json.Encoder().encode
#: Why 16: a slow client should push back on the follower (and the run).
_TEXT_BUFFER: Final = 16
_QUIET: Final = StreamText()
"""Nothing came within the keep-alive interval."""
_E = TypeVar("_E")


def _usage(info: RunInfo) -> ResponseUsage:
    usage = info.cost.usage
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputDetails(cached_tokens=usage.cached_prompt_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputDetails(),
        total_tokens=usage.total_tokens,
    )


class _Responses:
    def __init__(self, runs: OpenAIRuns) -> None:
        self.runs = runs

    async def create(self, request: Request) -> Response:
        try:
            body = decode_response_request(await self.runs.body(request))
            agent = self.runs.agent(body.model)
            wanted = responses_requested(body, self.runs.manager.config.runtime)
            previous = body.previous_response_id
            joined = conversation_ref(body)
            caller = caller_of(request)
            before = (
                await self.runs.earlier_turns(previous, "previous_response_id", caller)
                if previous is not None
                else await self.runs.conversation_turns(joined.id, caller)
                if joined is not None
                else []
            )
            info = await self.runs.submit(
                asked=responses_asked(body, before),
                agent=agent,
                requested=wanted,
                metadata=labels(body, "openai-responses"),
                task_param="input",
                stream=bool(body.stream),
                owner=caller.name,
                thread_id=joined.id if joined is not None else None,
            )
        except OpenAIError as err:
            return error_response(err)
        log.info("responses_run", run_id=info.run_id, model=agent.model, stream=bool(body.stream))
        shape = _Shape(info, agent, body)
        if body.stream:
            stream = _ResponseStream(self.runs, shape, wanted)
            return EventStream(stream.produce, lambda: self.runs.cancel_abandoned(info.run_id))
        outcome = await self.runs.finished(request, info.run_id, wanted)
        if isinstance(outcome, Response):
            return outcome
        return json_response(shape.completed(outcome))


class _Conversations:
    """``/v1/conversations``: OpenAI's conversations over the daemon's
    threads (a conversation id is a thread id)."""

    def __init__(self, runs: OpenAIRuns) -> None:
        self.runs = runs

    async def create(self, request: Request) -> Response:
        try:
            body = await self.runs.body(request)
            try:
                wanted = msgspec.json.decode(body, type=ConversationCreate)
            except msgspec.DecodeError as exc:
                raise decode_error(exc) from None
            if wanted.items:
                raise refuse("items", "a conversation starts empty: its first response adds to it")
            thread = await self.runs.manager.create_thread(
                wanted.metadata or {}, owner=caller_of(request).name
            )
        except OpenAIError as err:
            return error_response(err)
        return json_response(_conversation(thread))

    async def one(self, request: Request) -> Response:
        conversation_id = request.path_params["conversation_id"]
        thread = await self.runs.manager.thread(conversation_id)
        if thread is None or not caller_of(request).sees(thread.owner):
            return error_response(
                OpenAIError(
                    404,
                    f"no conversation {conversation_id!r} here",
                    param="conversation_id",
                    code="conversation_not_found",
                )
            )
        if request.method == "DELETE":
            await self.runs.manager.delete_thread(conversation_id)
            return json_response(ConversationDeleted(id=conversation_id))
        return json_response(_conversation(thread))


def _conversation(thread: ThreadInfo) -> ConversationObject:
    return ConversationObject(
        id=thread.thread_id, created_at=int(thread.created_at), metadata=thread.metadata
    )


class _Shape:
    """The ``Response`` objects of one run, as it goes."""

    def __init__(self, info: RunInfo, agent: AgentInfo, body: ResponseRequest) -> None:
        self.info = info
        self.model = agent.model
        self.echo = echo(body)
        self.id = f"resp_{info.run_id}"

    def response(self, status: ResponseStatus, **fields: Any) -> ResponseObject:
        return ResponseObject(
            id=self.id,
            created_at=int(self.info.created_at),
            status=status,
            model=self.model,
            **self.echo,
            **fields,
        )

    def completed(self, outcome: Outcome, output: list[OutputItem] | None = None) -> ResponseObject:
        """The finished response: ``output`` (default: the outcome's items)."""
        info = outcome.info
        if output is None:
            output = output_items(info.run_id, outcome.text, outcome.calls, outcome.logprobs)
        return self.response(
            "completed",
            output=output,
            usage=_usage(info),
            agentrt=extension_of(info, outcome.rollouts),
        )


class _ResponseStream:
    """The SSE body of a streamed response (``EventStream`` sends it): ``response.created``,
    ``response.in_progress``, the answer's text as ``output_text`` deltas
    while the run's one rollout generates it (``AnswerStream``; an answer
    held to a schema comes whole, once validated), keep-alive comments
    while nothing comes, then the rest of the output's items with their
    typed events and ``response.completed`` (``response.failed`` when the
    run gives no answer)."""

    def __init__(self, runs: OpenAIRuns, shape: _Shape, wanted: Requested) -> None:
        self.runs = runs
        self.shape = shape
        self.wanted = wanted
        self.seq = 0
        self.text = AnswerStream(shape.info.run_id, shape.info.rollouts)
        self.hold = wanted.options.response_schema is not None
        self.streamed: list[str] = []
        """Content sent as deltas of the message item."""
        self.message_id = f"msg_{shape.info.run_id}"
        # With several rollouts, their progress (``AnswerStream``'s
        # reasoning lines) is a reasoning summary: output item 0, closed
        # when the answer starts.
        self.progress = shape.info.rollouts > 1
        self.summary_id = f"rs_{shape.info.run_id}"
        self.summary: list[str] = []
        self.summary_done: ReasoningItem | None = None

    @property
    def message_index(self) -> int:
        """The message item's place in the output: after the summary, if any."""
        return 1 if self.summary else 0

    def _next(self) -> int:
        self.seq += 1
        return self.seq - 1

    @staticmethod
    def _sse(event: StreamEvent) -> bytes:
        kind = type(event).__struct_config__.tag
        return f"event: {kind}\ndata: ".encode() + _encode(event) + b"\n\n"

    async def produce(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        shape, run_id = self.shape, self.shape.info.run_id
        started = shape.response("in_progress")
        await write(self._sse(ResponseCreated(sequence_number=self._next(), response=started)))
        await write(self._sse(ResponseInProgress(sequence_number=self._next(), response=started)))
        send_text, receive_text = anyio.create_memory_object_stream[StreamText](_TEXT_BUFFER)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow, send_text)
            async with receive_text:
                while True:
                    piece: StreamText | None = _QUIET
                    with anyio.move_on_after(self.runs.keepalive_s):
                        try:
                            piece = await receive_text.receive()
                        except anyio.EndOfStream:
                            piece = None
                    if piece is None:
                        break
                    if piece is _QUIET:
                        await write(b": keep-alive\n\n")
                        continue
                    events = self._summary_events(piece.reasoning) if piece.reasoning else []
                    if piece.content:
                        events += self._delta_events(piece.content)
                    for event in events:
                        await write(self._sse(event))
        outcome = await self.runs.settled(await self.runs.manager.wait(run_id), self.wanted)
        if isinstance(outcome, OpenAIError):
            await self._failed(write, outcome)
            return
        events, output = self._closing(outcome)
        for event in events:
            await write(self._sse(event))
        final = shape.completed(outcome, output)
        await write(self._sse(ResponseCompleted(sequence_number=self._next(), response=final)))

    async def _follow(self, text: MemoryObjectSendStream[StreamText]) -> None:
        """Feeds the answer's text as it is generated (and, with several
        rollouts, their progress); closing the stream says the run is over."""
        async with text:
            try:
                async for event in self.runs.manager.follow(self.shape.info.run_id, tokens=True):
                    fed = self.text.feed(event)
                    if fed is None:
                        continue
                    content = "" if self.hold else fed.content
                    reasoning = fed.reasoning if self.progress else ""
                    if content or reasoning:
                        await text.send(StreamText(content=content, reasoning=reasoning))
            except Exception as exc:  # the deltas are optional; the answer is not
                log.warning(
                    "responses_follow_failed", run_id=self.shape.info.run_id, error=repr(exc)
                )
                await self.runs.manager.wait(self.shape.info.run_id)

    def _added(self, index: int, item: OutputItem) -> StreamEvent:
        return OutputItemAdded(sequence_number=self._next(), output_index=index, item=item)

    def _done(self, index: int, item: OutputItem) -> StreamEvent:
        return OutputItemDone(sequence_number=self._next(), output_index=index, item=item)

    def _part_opened(self, item_id: str, index: int, c: int) -> StreamEvent:
        """Content part ``c`` of message ``item_id`` opened, empty."""
        return ContentPartAdded(
            sequence_number=self._next(),
            item_id=item_id,
            output_index=index,
            content_index=c,
            part=OutputText(text=""),
        )

    def _text_delta(
        self, item_id: str, index: int, c: int, delta: str, logprobs: list[LogprobOut]
    ) -> StreamEvent:
        return OutputTextDelta(
            sequence_number=self._next(),
            item_id=item_id,
            output_index=index,
            content_index=c,
            delta=delta,
            logprobs=logprobs,
        )

    def _part_closed(self, item_id: str, index: int, c: int, part: OutputText) -> list[StreamEvent]:
        """Content part ``c`` of message ``item_id`` finished as ``part``."""
        return [
            OutputTextDone(
                sequence_number=self._next(),
                item_id=item_id,
                output_index=index,
                content_index=c,
                text=part.text,
                logprobs=part.logprobs,
            ),
            ContentPartDone(
                sequence_number=self._next(),
                item_id=item_id,
                output_index=index,
                content_index=c,
                part=part,
            ),
        ]

    def _event(self, kind: Callable[..., _E], **fields: Any) -> _E:
        """Event ``kind`` of ``fields``, numbered next."""
        return kind(sequence_number=self._next(), **fields)

    def _summary_event(self, kind: Callable[..., _E], **fields: Any) -> _E:
        """An event of the one reasoning summary (item 0, summary part 0)."""
        return self._event(kind, item_id=self.summary_id, output_index=0, summary_index=0, **fields)

    def _summary_events(self, line: str) -> list[StreamEvent]:
        """A line of progress: the reasoning item and its summary part opened
        first, then its delta (none once the answer has begun)."""
        if self.summary_done is not None:
            return []
        events: list[StreamEvent] = []
        if not self.summary:
            events.append(self._added(0, ReasoningItem(id=self.summary_id, status="in_progress")))
            events.append(self._summary_event(SummaryPartAdded, part=SummaryText(text="")))
        self.summary.append(line)
        events.append(self._summary_event(SummaryTextDelta, delta=line))
        return events

    def _summary_close(self) -> list[StreamEvent]:
        """The events that close the reasoning summary, if one is open."""
        if not self.summary or self.summary_done is not None:
            return []
        part = SummaryText(text="".join(self.summary))
        self.summary_done = ReasoningItem(id=self.summary_id, summary=[part])
        return [
            self._summary_event(SummaryTextDone, text=part.text),
            self._summary_event(SummaryPartDone, part=part),
            self._done(0, self.summary_done),
        ]

    def _delta_events(self, piece: str) -> list[StreamEvent]:
        """A piece of the answer: the message item opened first, then its delta."""
        events: list[StreamEvent] = []
        index = self.message_index
        if not self.streamed:
            events.extend(self._summary_close())
            events.append(
                self._added(index, OutputMessage(id=self.message_id, status="in_progress"))
            )
            events.append(self._part_opened(self.message_id, index, 0))
        self.streamed.append(piece)
        events.append(self._text_delta(self.message_id, index, 0, piece, []))
        return events

    def _closing(self, outcome: Outcome) -> tuple[list[StreamEvent], list[OutputItem]]:
        """The events that finish the output, and the output: the streamed
        message closed with the rest of the answer (its text: all the deltas),
        then the items not streamed."""
        items = output_items(self.shape.info.run_id, outcome.text, outcome.calls, outcome.logprobs)
        if not self.streamed:
            closing = self._summary_close()
            first = self.message_index
            closing += [
                e for i, item in enumerate(items) for e in self._item_events(first + i, item)
            ]
            done = self.summary_done
            return closing, [done, *items] if done is not None else items
        done = self.summary_done
        rest = "" if outcome.calls else self.text.rest(outcome.text)
        events: list[StreamEvent] = []
        if rest:
            events.extend(self._delta_events(rest))
        part = OutputText(text="".join(self.streamed), logprobs=logprobs_out(outcome.logprobs))
        message = OutputMessage(id=self.message_id, content=[part])
        at = self.message_index
        events.extend(self._part_closed(self.message_id, at, 0, part))
        events.append(self._done(at, message))
        calls = [item for item in items if isinstance(item, FunctionCallItem)]
        for index, call in enumerate(calls, start=at + 1):
            events.extend(self._item_events(index, call))
        output: list[OutputItem] = [message, *calls]
        return events, [done, *output] if done is not None else output

    async def _failed(self, write: Callable[[bytes], Awaitable[None]], err: OpenAIError) -> None:
        for event in self._summary_close():
            await write(self._sse(event))
        failed = self.shape.response(
            "failed", error=ResponseError(code=err.code or "run_failed", message=err.message)
        )
        await write(self._sse(ResponseFailed(sequence_number=self._next(), response=failed)))

    def _item_events(self, index: int, item: OutputItem) -> list[StreamEvent]:
        """The events that open, fill and close one output item."""
        events: list[StreamEvent] = []
        match item:
            case OutputMessage():
                events.append(self._added(index, OutputMessage(id=item.id, status="in_progress")))
                for c, part in enumerate(item.content):
                    events.append(self._part_opened(item.id, index, c))
                    events.append(self._text_delta(item.id, index, c, part.text, part.logprobs))
                    events.extend(self._part_closed(item.id, index, c, part))
            case ReasoningItem():
                pass  # only the summary makes one, and closes it itself
            case FunctionCallItem():
                opened = FunctionCallItem(
                    id=item.id,
                    call_id=item.call_id,
                    name=item.name,
                    arguments="",
                    status="in_progress",
                )
                events.append(self._added(index, opened))
                at = {"item_id": item.id, "output_index": index}
                events.append(self._event(ArgumentsDelta, **at, delta=item.arguments))
                events.append(
                    self._event(ArgumentsDone, **at, name=item.name, arguments=item.arguments)
                )
        events.append(self._done(index, item))
        return events


def responses_routes(runs: OpenAIRuns) -> list[BaseRoute]:
    """``POST /v1/responses``: OpenAI's Responses API over agentrt runs.

    ``input`` (a string, or message, ``function_call`` and
    ``function_call_output`` items) reaches the agent's model as native
    messages after ``instructions`` (added to its system message), and after
    the conversation ``previous_response_id`` ended or ``conversation`` (a
    thread: ``POST /v1/conversations``) holds; every other field is honoured
    as ``/v1/chat/completions`` honours its counterpart
    (``max_output_tokens``, ``text.format``, ``include`` of
    ``message.output_text.logprobs``, function ``tools`` and
    ``tool_choice``: a call to one ends the response with a
    ``function_call`` item) or refused with a 400 naming it.  With
    ``stream: true``: the typed events (``response.created``...
    ``response.completed``; several rollouts' progress first, as a
    reasoning summary)."""
    endpoint = _Responses(runs)
    conversations = _Conversations(runs)
    return [
        Route("/v1/responses", endpoint.create, methods=["POST"]),
        Route("/v1/conversations", conversations.create, methods=["POST"]),
        Route("/v1/conversations/{conversation_id}", conversations.one, methods=["GET", "DELETE"]),
    ]


__all__ = ["responses_routes"]
