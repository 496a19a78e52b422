"""Tool definitions and results as the model and the agent loop see them."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as offered to a model: a name, a description and a JSON schema
    for its arguments.  The implementation binding lives elsewhere."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    annotations: dict[str, Any] = msgspec.field(default_factory=dict)
    """Hints about the tool's behaviour for policy, not sent to the model
    (MCP tool annotations: ``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``)."""

    def to_openai(self) -> dict[str, Any]:
        """The ``tools`` entry of a chat-completions request."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


ApprovalOutcome = Literal["accept", "decline", "timeout", "cancel", "unavailable"]
"""How a call's approval ended: ``accept`` (approved, the call ran),
``decline`` (the person denied it), ``timeout`` (nobody answered in time),
``cancel`` (asking failed or was cancelled), ``unavailable`` (nobody can be
asked in this run)."""


class ToolApproval(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """The approval a tool call asked for, as the trajectory records it."""

    question_id: str
    """The question's id (the run's ``ElicitationRequested``/``Answered`` events carry it)."""
    message: str
    """What the person was asked."""
    outcome: ApprovalOutcome
    """How it ended; the call ran only on ``accept``."""


class ToolResult(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """The outcome of one tool call.  ``is_error`` results go back to the
    model as text it can act on; they are data, not exceptions.  (Not
    tracked by the cyclic collector: its fields are strings and numbers, so
    it can take part in no cycle.)"""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    duration_s: float = 0.0
    for_user: str = ""
    """What the tool meant for the person behind the run (MCP content
    annotated ``audience: ["user"]``): shown in the run's events; the model
    sees it only when it was meant for the model too."""
    approval: ToolApproval | None = None
    """The approval the call waited for (a tool that requires one), else None."""
