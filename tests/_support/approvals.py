"""The person behind a run, as tests play them: one answer to every
question, and a record of what was asked; in the run (``Person``) or in the
IDE that started it over ``/mcp`` (``Ide``)."""

from __future__ import annotations

from typing import Any, Literal

import mcp_types
from mcp.client.context import ClientRequestContext

from agentrt.tools import ElicitationQuestion
from agentrt.tools._tool import ElicitationReply


class Person:
    """An ``on_elicitation`` callback that answers every question with
    ``action`` (and ``content``, for a form) and keeps each question in
    ``asked``, in the order asked."""

    def __init__(self, action: str = "accept", content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.asked: list[ElicitationQuestion] = []

    async def __call__(self, question: ElicitationQuestion) -> ElicitationReply:
        self.asked.append(question)
        return ElicitationReply(action=self.action, content=self.content)


class Ide:
    """An MCP client's ``elicitation_callback``: answers every form question
    with ``action`` (and ``content``, when accepting) and keeps each one in
    ``asked``, in the order asked."""

    def __init__(
        self, action: Literal["accept", "decline"], content: dict[str, Any] | None = None
    ) -> None:
        self.action: Literal["accept", "decline"] = action
        self.content = content if action == "accept" else None
        self.asked: list[mcp_types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        self.asked.append(params)
        return mcp_types.ElicitResult(action=self.action, content=self.content)
