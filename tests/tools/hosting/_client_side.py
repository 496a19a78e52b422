"""The client's half of an MCP session, as the hosting tests play it."""

from __future__ import annotations

from typing import Any

import mcp_types as mcp
from mcp.client.session import ClientRequestContext


class ClientSide:
    """Callbacks for an MCP ``Client``: they keep every log message and
    progress report the server sends, and answer each sampling request
    with ``reply`` (``None``: the server must not ask, and asking fails the
    test)."""

    def __init__(self, reply: str | None = None, *, model: str = "m") -> None:
        self.reply = reply
        self.model = model
        self.logs: list[tuple[str, Any, str | None]] = []
        """``(level, data, logger)`` of each log message, in order."""
        self.progress: list[tuple[float, float | None, str | None]] = []
        """``(progress, total, message)`` of each progress report, in order."""
        self.prompts: list[str] = []
        """The first message of each sampling request."""

    async def on_log(self, params: mcp.LoggingMessageNotificationParams) -> None:
        self.logs.append((params.level, params.data, params.logger))

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    async def sample(
        self, context: ClientRequestContext, params: mcp.CreateMessageRequestParams
    ) -> mcp.CreateMessageResult:
        if self.reply is None:
            raise AssertionError(f"this server must not ask for sampling: {params}")
        content = params.messages[0].content
        assert isinstance(content, mcp.TextContent)
        self.prompts.append(content.text)
        return mcp.CreateMessageResult(
            role="assistant", content=mcp.TextContent(text=self.reply), model=self.model
        )

    @property
    def levels(self) -> list[str]:
        return [level for level, _, _ in self.logs]

    @property
    def steps(self) -> list[float]:
        """The ``progress`` values reported, in order."""
        return [progress for progress, _, _ in self.progress]
