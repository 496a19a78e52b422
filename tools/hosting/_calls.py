"""One hosted tool call's line back to the MCP client (``McpCallPeer``): its
notifications and its server-to-client requests, on the call's own
response stream.

Imports the MCP SDK's session types; never the server or transports modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeVar, final

import anyio
import mcp_types as mcp
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import ElicitationReply
from agentrt.tools.hosting._hosting_config import LOG_LEVELS, LogLevel

log = get_logger(__name__)

_ResultT = TypeVar("_ResultT", bound=BaseModel)

_SAMPLING: Final = mcp.ClientCapabilities(sampling=mcp.SamplingCapability())
_ELICITATION: Final = mcp.ClientCapabilities(elicitation=mcp.ElicitationCapability())


def levels_from(floor: LogLevel) -> frozenset[LogLevel]:
    """``floor`` and every more severe level."""
    return frozenset(LOG_LEVELS[LOG_LEVELS.index(floor) :])


@final
class McpCallPeer:
    """The MCP client behind one ``tools/call``, as the tool sees it: its
    ``ToolContext.notify`` sink (``"log"`` -> ``notifications/message`` at
    the client's level, ``"progress"`` -> ``notifications/progress`` when the
    client sent a progress token) and its ``ToolContext.peer``.  Everything
    rides the call's own response stream, so on streamable HTTP it reaches
    the calling client only."""

    def __init__(
        self,
        ctx: ServerRequestContext[Any, Any],
        *,
        tool: str,
        log_floor: LogLevel,
        request_timeout_s: float,
    ) -> None:
        self._ctx = ctx
        self._tool = tool
        self._request_timeout_s = request_timeout_s
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # 2026-07-28: each request opts in to logs (and picks the level) in its _meta.
            self._log_levels: frozenset[str] = allowed_log_levels(ctx.protocol_version, ctx.meta)
        else:
            self._log_levels = levels_from(log_floor)

    # -- ToolContext.notify ------------------------------------------------

    async def notify(self, kind: str, payload: Mapping[str, Any]) -> None:
        """The tool's notification sink.  Notifications are advisory: one the
        client can no longer receive is dropped and the call goes on.  Kinds
        other than ``"log"`` and ``"progress"`` are ignored."""
        try:
            if kind == "log":
                await self._log(payload)
            elif kind == "progress":
                await self._progress(payload)
            else:
                log.debug("hosted_notify_ignored", tool=self._tool, kind=kind)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("hosted_notify_dropped", tool=self._tool, kind=kind, reason="stream closed")

    async def _log(self, payload: Mapping[str, Any]) -> None:
        level = payload.get("level", "info")
        if level not in LOG_LEVELS:
            raise ToolError(
                f"tool {self._tool!r} logged at level {level!r}; use one of {', '.join(LOG_LEVELS)}"
            )
        if level not in self._log_levels:
            return
        data = payload["data"] if "data" in payload else payload.get("message", "")
        logger = payload.get("logger", self._tool)
        note = mcp.LoggingMessageNotification(
            params=mcp.LoggingMessageNotificationParams(level=level, data=data, logger=str(logger))
        )
        await self._ctx.session.send_notification(note, related_request_id=self._ctx.request_id)

    async def _progress(self, payload: Mapping[str, Any]) -> None:
        try:
            progress = float(payload["progress"])
            total = None if payload.get("total") is None else float(payload["total"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ToolError(
                f"tool {self._tool!r} reported progress without a numeric 'progress': "
                f"{dict(payload)!r}"
            ) from exc
        message = payload.get("message")
        # A no-op when the client sent no progress token with the call.
        await self._ctx.session.report_progress(
            progress, total, None if message is None else str(message)
        )

    # -- ToolContext.peer (ClientPeer) -------------------------------------

    async def sample(
        self, prompt: str, *, max_tokens: int, system_prompt: str | None = None
    ) -> str:
        """Ask the client's model to complete ``prompt``
        (``sampling/createMessage``).  Raises ``ToolError`` on a 2026-07-28
        connection or a transport without a back channel (stateless or
        JSON-response HTTP)."""
        self._require(_SAMPLING, "sampling")
        request = mcp.CreateMessageRequest(
            params=mcp.CreateMessageRequestParams(
                messages=[mcp.SamplingMessage(role="user", content=mcp.TextContent(text=prompt))],
                max_tokens=max_tokens,
                system_prompt=system_prompt,
            )
        )
        result = await self._ask(request, mcp.CreateMessageResult, "sampling")
        if not isinstance(result.content, mcp.TextContent):
            raise ToolError(
                f"tool {self._tool!r}: the client answered sampling with "
                f"{result.content.type} content; text was expected"
            )
        return result.content.text

    async def elicit(self, message: str, requested_schema: Mapping[str, Any]) -> ElicitationReply:
        """Ask the client's user to fill the form ``requested_schema``
        (``elicitation/create``); ``ToolError`` where ``sample`` raises it."""
        self._require(_ELICITATION, "elicitation")
        request = mcp.ElicitRequest(
            params=mcp.ElicitRequestFormParams(
                message=message, requested_schema=dict(requested_schema)
            )
        )
        result = await self._ask(request, mcp.ElicitResult, "elicitation")
        content = None if result.content is None else dict(result.content)
        return ElicitationReply(action=result.action, content=content)

    # -- transport hooks ---------------------------------------------------

    async def request_reconnect(self) -> bool:
        """Close this call's SSE stream so the client reconnects and resumes
        it (``Last-Event-ID``); the call keeps running and its later events
        are replayed.  ``False`` when the transport cannot resume (stdio,
        in-process, no event store, or a client older than 2025-11-25)."""
        close = self._ctx.close_sse_stream
        if close is None:
            return False
        await close()
        return True

    # -- helpers -----------------------------------------------------------

    def _require(self, capability: mcp.ClientCapabilities, what: str) -> None:
        if not self._ctx.session.check_client_capability(capability):
            raise ToolError(
                f"tool {self._tool!r} needs {what}, but the MCP client did not declare "
                f"the {what} capability"
            )

    async def _ask(
        self, request: mcp.ServerRequest, result_type: type[_ResultT], what: str
    ) -> _ResultT:
        session = self._ctx.session
        try:
            return await session.send_request(
                request,
                result_type,
                request_read_timeout_seconds=self._request_timeout_s,
                metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id),
            )
        except NoBackChannelError as exc:
            why = (
                f"protocol {session.protocol_version} has no server-to-client requests"
                if session.protocol_version in MODERN_PROTOCOL_VERSIONS
                else "the transport has no back channel (stateless or JSON-response HTTP)"
            )
            raise ToolError(f"tool {self._tool!r} needs {what}, but {why}") from exc
        except MCPError as exc:
            raise ToolError(
                f"tool {self._tool!r}: the client did not answer the {what} request: {exc.message}"
            ) from exc
        except ValidationError as exc:
            raise ToolError(
                f"tool {self._tool!r}: the client's {what} answer is malformed: {exc}"
            ) from exc
