"""The person behind a run, as tests play them: one answer to every
question, and a record of what was asked."""

from __future__ import annotations

from typing import Any

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
