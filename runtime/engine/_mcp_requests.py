"""What the ``Runtime`` answers when a run needs something from outside:
its models for an MCP server's sampling (the run's ledger, the runtime's
backends), and a person for a question (an MCP server's elicitation, or the
approval a tool under ``[approvals.TOOL]`` waits for): the embedding's
callback, or the question as an ``ElicitationRequested`` event on the run's
stream answered with ``Runtime.answer_elicitation``; either way its end is an
``ElicitationAnswered`` event.  Builds the ``McpClientHooks`` the MCP
connections use (the MCP SDK loads only then).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, final

import anyio
import msgspec

from agentrt.protocols._events import ElicitationAnswered, ElicitationRequested
from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.tools._approval import TIMED_OUT, ElicitationQuestion
from agentrt.tools._tool import ElicitationReply

if TYPE_CHECKING:
    from agentrt.runtime.engine._run_execution import RunExecution
    from agentrt.tools.mcp._server_requests import McpClientHooks, SamplingTarget

__all__ = ["ElicitationHandler", "RunRequests"]

#: The embedding's way to ask its user: an async callable, or ``"events"``
#: (each question becomes an ``ElicitationRequested`` event of the run).
ElicitationHandler = (
    Callable[[ElicitationQuestion], Awaitable[ElicitationReply]] | Literal["events"]
)


@dataclass(slots=True)
class _Waiting:
    """A question put to the run's stream, until it is answered."""

    event: ElicitationRequested
    answered: anyio.Event = field(default_factory=anyio.Event)
    reply: ElicitationReply | None = None


@final
class RunRequests:
    """The open runs of one ``Runtime``, for what their MCP servers and
    tools need from outside: a person to ask, models to sample."""

    def __init__(
        self,
        runs: Mapping[str, RunExecution],
        backends: Mapping[str, ModelBackend],
        default_model: Callable[[], str | None],
        on_elicitation: ElicitationHandler | None,
    ) -> None:
        self._runs = runs
        self._backends = backends
        self._default_model = default_model
        self._on_elicitation = on_elicitation
        self._waiting: dict[str, _Waiting] = {}
        """The questions on runs' streams, by id, until answered."""

    def hooks(self) -> McpClientHooks:
        from agentrt.tools.mcp._server_requests import McpClientHooks

        return McpClientHooks(ask=self.asker(), sampling_target=self._target)

    def asker(self) -> Callable[[ElicitationQuestion], Awaitable[ElicitationReply]] | None:
        """Who puts a question to the person behind a run (None: nobody can)."""
        return self._ask if self._on_elicitation is not None else None

    def _target(self, run_id: str) -> SamplingTarget | None:
        from agentrt.tools.mcp._server_requests import SamplingTarget

        execution = self._runs.get(run_id)
        if execution is None:
            return None
        return SamplingTarget(
            ledger=execution.ledger, backends=self._backends, default_model=self._default_model()
        )

    async def _ask(self, question: ElicitationQuestion) -> ElicitationReply:
        handler = self._on_elicitation
        if handler is None:
            raise ToolError("nobody can be asked")
        execution = self._runs.get(question.run_id)
        if execution is None:
            if handler == "events":
                raise ToolError(
                    f"MCP server {question.server!r} asked a question outside any open run"
                )
            return await handler(question)
        checkpoint = execution.plan.checkpoint
        if checkpoint is not None:
            recorded = checkpoint.answered.get(question.id)
            if recorded is not None:  # answered before a restart: not asked twice
                return ElicitationReply(action=recorded.action, content=recorded.content)
            earlier = checkpoint.asked.get(question.id)
            if earlier is not None and earlier.expires_at is not None:
                question = msgspec.structs.replace(question, expires_at=earlier.expires_at)
        reply: ElicitationReply | None = None
        # A cancellation of the run leaves the question asked and unanswered
        # (a resumed run asks it again); its deadline or an answer ends it.
        with anyio.move_on_after(
            question.expires_at - time.time() if question.expires_at is not None else math.inf
        ):
            if handler == "events":
                reply = await self._ask_on_stream(execution, question)
            else:
                reply = await handler(question)
        reply = reply or ElicitationReply(action=TIMED_OUT)
        await execution.emitter.emit(
            ElicitationAnswered(
                run_id=question.run_id,
                question_id=question.id,
                action=reply.action,
                content=reply.content,
                rollout_id=question.rollout_id or None,
                call_id=question.call_id,
            )
        )
        return reply

    async def _ask_on_stream(
        self, execution: RunExecution, question: ElicitationQuestion
    ) -> ElicitationReply:
        slot = _Waiting(
            ElicitationRequested(
                run_id=question.run_id,
                question_id=question.id,
                server=question.server,
                mode=question.mode,
                message=question.message,
                requested_schema=question.requested_schema,
                url=question.url,
                arguments=question.arguments,
                tool=question.tool,
                rollout_id=question.rollout_id or None,
                call_id=question.call_id,
                expires_at=question.expires_at,
            )
        )
        self._waiting[question.id] = slot
        try:
            slot.event = await execution.emitter.emit(slot.event)
            await slot.answered.wait()  # the caller's deadline bounds this
            assert slot.reply is not None
            return slot.reply
        finally:
            del self._waiting[question.id]

    def pending(self, run_id: str | None = None) -> list[ElicitationRequested]:
        """The questions waiting for an answer (``run_id``'s only, when
        given), oldest first."""
        found = [
            slot.event
            for slot in self._waiting.values()
            # seq 0: not on the run's stream yet
            if slot.event.seq and not slot.answered.is_set() and run_id in (None, slot.event.run_id)
        ]
        return sorted(found, key=lambda e: (e.ts, e.seq))

    def answer(
        self, question_id: str, reply: ElicitationReply, *, run_id: str | None = None
    ) -> bool:
        """Answer a question a run's ``ElicitationRequested`` event asked;
        False when no such question waits (answered, timed out, unknown, or
        asked by a run other than ``run_id``)."""
        slot = self._waiting.get(question_id)
        if slot is None or slot.answered.is_set() or run_id not in (None, slot.event.run_id):
            return False
        slot.reply = reply
        slot.answered.set()
        return True
