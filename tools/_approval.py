"""Asking the person behind a run: the question they see
(``ElicitationQuestion``), who asks it (``PersonAsker``, under a deadline:
``ask_person``), and a tool whose every call waits for their approval
(``ApprovalGate``, configured per tool by ``ApprovalPolicy``).  MCP servers'
questions and approvals of destructive MCP tools go through ``ask_person``
too: one way to ask.

May import protocols and the runtime floor; never agents, aggregators or the
roof, and not the MCP SDK (a function tool's approval must not load it).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, final

import anyio
import msgspec
from pydantic import BaseModel, ConfigDict, Field

from agentrt.protocols._tools import ApprovalOutcome, ToolApproval, ToolSpec
from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import ElicitationReply, Tool, ToolContext, ToolOutput

__all__ = [
    "TIMED_OUT",
    "ApprovalGate",
    "ApprovalPolicy",
    "ElicitationQuestion",
    "PersonAsker",
    "approval_id",
    "ask_person",
]

_log = get_logger(__name__)

#: The action of a question nobody answered before its deadline (an MCP
#: server hears ``cancel``).
TIMED_OUT: Final = "timeout"

#: How much longer than a question's deadline its asker is given to say it
#: timed out (and record that) before the caller stops waiting regardless.
_RECORD_GRACE_S: Final = 1.0


class ElicitationQuestion(msgspec.Struct, frozen=True, kw_only=True):
    """A question for the person behind a run, as that person (or the
    embedding's callback) sees it.  ``mode``: ``form`` (fill
    ``requested_schema``, a flat JSON schema), ``url`` (open ``url`` in a
    browser; accept means the person agreed to go there) or ``approval``
    (may the tool ``tool`` be called with ``arguments``? accept or decline).
    ``server``: the MCP server that asks, empty for a tool of agentrt's own."""

    id: str
    """Unique; the daemon's answer endpoint takes it.  An approval's is made
    from its call (``approval_id``): the same call asks the same question
    again after a restart."""
    server: str
    mode: Literal["form", "url", "approval"]
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str = ""
    elicitation_id: str = ""
    arguments: dict[str, Any] | None = None
    run_id: str = ""
    rollout_id: str = ""
    call_id: str = ""
    tool: str = ""
    expires_at: float | None = None
    """Unix seconds when an unanswered question is given up (``TIMED_OUT``);
    None: the caller's own deadline bounds it."""


#: Asks the person behind a run; returns their answer.  Raising (or an
#: ``AgentrtError``) counts as "cancel".
PersonAsker = Callable[[ElicitationQuestion], Awaitable[ElicitationReply]]


async def ask_person(
    ask: PersonAsker | None, question: ElicitationQuestion, timeout_s: float
) -> ElicitationReply | None:
    """The person's answer, or None when nobody can be asked; ``TIMED_OUT``
    when they do not answer by ``question.expires_at`` (set ``timeout_s``
    from now when unset: ``ask`` ends the wait then, and may record it),
    "cancel" when asking failed."""
    if ask is None:
        return None
    if question.expires_at is None:
        question = msgspec.structs.replace(question, expires_at=time.time() + timeout_s)
    try:
        with anyio.fail_after(timeout_s + _RECORD_GRACE_S):
            return await ask(question)
    except TimeoutError:
        _log.warning("elicitation_unanswered", server=question.server, id=question.id)
        return ElicitationReply(action=TIMED_OUT)
    except AgentrtError as exc:
        _log.warning("elicitation_failed", server=question.server, error=str(exc))
    return ElicitationReply(action="cancel")


def approval_id(context: ToolContext, tool: str) -> str:
    """The id of the approval a call asks for: made from the call's
    idempotency key (its run, rollout, step and call id), so a run resumed
    after a crash asks the same question for the same call."""
    key = context.idempotency_key or f"{context.run_id}/{context.rollout_id}/{context.call_id}"
    return "approve-" + hashlib.sha256(f"{key}/{tool}".encode()).hexdigest()[:20]


class ApprovalPolicy(BaseModel):
    """``[approvals.TOOL]``: every call of the tool ``TOOL`` (a built-in, a
    function tool, or an MCP server's ``server__tool``) waits until the
    person behind the run approves it; a denied or unanswered call is a
    tool result saying so, for the model to read."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    timeout_s: float = Field(default=3600.0, gt=0)
    """How long a call waits for an answer, across daemon restarts (the
    deadline is fixed when it is first asked); then it is declined as
    unanswered."""
    message: str | None = None
    """What the person is asked (default: which tool wants to run, with the
    arguments shown beside it)."""


@final
class ApprovalGate:
    """``tool``, whose every call first asks ``ask`` for approval under
    ``policy`` (``ask`` None: nobody can approve, so every call is declined)."""

    def __init__(self, tool: Tool, policy: ApprovalPolicy, ask: PersonAsker | None) -> None:
        self.tool = tool
        self.policy = policy
        self.ask = ask

    @property
    def spec(self) -> ToolSpec:
        return self.tool.spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return await self.call_approved(
            await self.ask_approval(arguments, context), arguments, context
        )

    async def ask_approval(
        self, arguments: Mapping[str, Any], context: ToolContext
    ) -> ToolApproval:
        """Ask whether this call may run; how it ended.  Its wait is bounded
        by ``policy.timeout_s`` (a caller with its own deadline for the tool's
        work, like the agent loop, asks before arming it)."""
        name = self.tool.spec.name
        question = ElicitationQuestion(
            id=approval_id(context, name),
            server="",
            mode="approval",
            message=self.policy.message or f"The agent wants to run the tool {name!r}; allow it?",
            arguments=dict(arguments),
            run_id=context.run_id,
            rollout_id=context.rollout_id,
            call_id=context.call_id,
            tool=name,
            expires_at=time.time() + self.policy.timeout_s,
        )
        reply = await ask_person(self.ask, question, self.policy.timeout_s)
        return ToolApproval(
            question_id=question.id, message=question.message, outcome=approval_outcome(reply)
        )

    async def call_approved(
        self, approval: ToolApproval, arguments: Mapping[str, Any], context: ToolContext
    ) -> ToolOutput:
        """Run the call when ``approval`` (``ask_approval``'s) accepted it,
        else say why not; the output records ``approval``."""
        if approval.outcome != "accept":
            where = f"tool {self.tool.spec.name!r} needs approval"
            refusal = refusal_text(approval.outcome, where, self.policy.timeout_s)
            return msgspec.structs.replace(
                ToolOutput.of_text(refusal, is_error=True), approval=approval
            )
        output = await self.tool.call(arguments, context)
        return msgspec.structs.replace(output, approval=approval)


def approval_outcome(reply: ElicitationReply | None) -> ApprovalOutcome:
    """How an approval ended, from the person's ``reply`` (None: nobody
    could be asked)."""
    if reply is None:
        return "unavailable"
    if reply.action in ("accept", "decline", TIMED_OUT):
        return reply.action  # type: ignore[return-value]
    return "cancel"


def refusal_text(outcome: ApprovalOutcome, where: str, timeout_s: float) -> str:
    """Why a call whose approval ended in ``outcome`` (not ``accept``) did
    not run, for the model (``where`` says which tool and why it asks)."""
    if outcome == "unavailable":
        return f"{where}, but nobody can be asked in this run; the call did not run"
    if outcome == TIMED_OUT:
        return f"{where}, and nobody answered within {timeout_s:g} s; the call did not run"
    if outcome == "decline":
        return f"{where}, and the person denied it; the call did not run"
    return f"{where}; the call was not approved ({outcome}) and did not run"


async def request_approval(
    ask: PersonAsker | None, question: ElicitationQuestion, timeout_s: float, *, where: str
) -> str | None:
    """Put an approval ``question`` to the person: None when they approved,
    else why the call does not run (``where`` says which tool and why it asks)."""
    outcome = approval_outcome(await ask_person(ask, question, timeout_s))
    return None if outcome == "accept" else refusal_text(outcome, where, timeout_s)
