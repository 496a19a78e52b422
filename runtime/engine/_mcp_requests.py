"""What the ``Runtime`` answers when an MCP server asks something of a run:
its models for sampling (the run's ledger, the runtime's backends), and a
person for elicitation (the embedding's callback, or the question as an
``ElicitationRequested`` event on the run's stream answered with
``Runtime.answer_elicitation``).  Builds the ``McpClientHooks`` the MCP
connections use.  Loaded only when the Runtime opens an MCP server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Literal, final

import anyio

from agentrt.protocols._events import ElicitationRequested
from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.tools._tool import ElicitationReply
from agentrt.tools.mcp._server_requests import (
    ElicitationQuestion,
    McpClientHooks,
    SamplingTarget,
)

if TYPE_CHECKING:
    from agentrt.runtime.engine._run_execution import RunExecution

__all__ = ["ElicitationHandler", "RunRequests"]

#: The embedding's way to ask its user: an async callable, or ``"events"``
#: (each question becomes an ``ElicitationRequested`` event of the run).
ElicitationHandler = (
    Callable[[ElicitationQuestion], Awaitable[ElicitationReply]] | Literal["events"]
)


@final
class RunRequests:
    """The open runs of one ``Runtime``, for its MCP servers' requests."""

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
        # One slot per question: its run, and the answer once given.
        self._waiting: dict[str, tuple[str, anyio.Event, list[ElicitationReply]]] = {}

    def hooks(self) -> McpClientHooks:
        return McpClientHooks(
            ask=self._ask if self._on_elicitation is not None else None,
            sampling_target=self._target,
        )

    def _target(self, run_id: str) -> SamplingTarget | None:
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
        if handler != "events":
            return await handler(question)
        execution = self._runs.get(question.run_id)
        if execution is None:
            raise ToolError(f"MCP server {question.server!r} asked a question outside any open run")
        slot = (question.run_id, anyio.Event(), list[ElicitationReply]())
        self._waiting[question.id] = slot
        try:
            await execution.emitter.emit(
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
                )
            )
            await slot[1].wait()  # the server's policy timeout bounds this
            return slot[2][0]
        finally:
            del self._waiting[question.id]

    def answer(
        self, question_id: str, reply: ElicitationReply, *, run_id: str | None = None
    ) -> bool:
        """Answer a question a run's ``ElicitationRequested`` event asked;
        False when no such question waits (answered, timed out, unknown, or
        asked by a run other than ``run_id``)."""
        slot = self._waiting.get(question_id)
        if slot is None or slot[1].is_set() or run_id not in (None, slot[0]):
            return False
        slot[2].append(reply)
        slot[1].set()
        return True
