"""``ServerContent``: what one connection's agents get of its server besides
tools: the resource and prompt tools (``resources``, ``prompts``), resources
attached to agents' context (kept current by subscription) and prompts
filled in, their arguments completed by the server.

Sends its requests through the connection's ``Request`` (its deadline and
errors); must not know how the session is kept.  Must not import agents or
aggregators.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, final

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.message import SessionMessage

from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import NotificationSink, ToolOutput
from agentrt.tools.mcp._content import resource_contents
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._prompts import LIST as PROMPTS_LIST
from agentrt.tools.mcp._prompts import PROMPT_TOOLS, prompt_messages, prompts_text
from agentrt.tools.mcp._resources import (
    LIST,
    RESOURCE_TOOLS,
    TEMPLATES,
    listing_text,
    read_text,
    templates_text,
)

__all__ = ["Request", "ServerContent"]

_log = get_logger(__name__)

Request = Callable[[Awaitable[Any]], Awaitable[Any]]
"""Await one SDK request on the live session, with the server's deadline;
failures are ``McpServerError``."""


@final
class ServerContent:
    """One connection's resources and prompts, for ``config``'s server."""

    def __init__(
        self, config: StdioServerConfig | HttpServerConfig, emit: NotificationSink
    ) -> None:
        self._config = config
        self._emit = emit
        self._attached: dict[str, str] = {}
        """Resources agents attached as context, by URI: their text as last read."""
        self._stale: set[str] = set()
        """Attached resources that changed since they were read."""
        self._capabilities: types.ServerCapabilities | None = None

    @property
    def name(self) -> str:
        return self._config.name

    def client_tools(
        self, capabilities: types.ServerCapabilities | None
    ) -> dict[str, tuple[str, dict[str, Any]]]:
        """The resource and prompt tools to offer, by remote name (an MCP
        method name): as configured, when the server has resources or prompts."""
        offered: dict[str, tuple[str, dict[str, Any]]] = {}
        if capabilities is None:
            return offered
        if self._config.resources.tools and capabilities.resources is not None:
            offered.update(RESOURCE_TOOLS)
        if self._config.prompts.tools and capabilities.prompts is not None:
            offered.update(PROMPT_TOOLS)
        return offered

    def is_client_tool(self, remote: str) -> bool:
        return remote in RESOURCE_TOOLS or remote in PROMPT_TOOLS

    async def new_session(
        self,
        session: ClientSession,
        capabilities: types.ServerCapabilities | None,
        request: Request,
    ) -> None:
        """A new session knows nothing of the old one's subscriptions:
        subscribe again, and read each attached resource afresh when next
        asked for it."""
        self._capabilities = capabilities
        for uri in list(self._attached):
            self._stale.add(uri)
            try:
                await self._subscribe(session, request, uri)
            except McpServerError as exc:
                _log.warning(
                    "mcp.resource.subscribe_failed", server=self.name, uri=uri, error=str(exc)
                )

    def on_wire(self, message: object) -> None:
        """Each message as read, in order: a change of an attached resource
        is noted before a reply the server sent after it is delivered, so the
        next ``attached`` reads it again."""
        if not isinstance(message, SessionMessage):
            return
        note = message.message
        if (
            isinstance(note, types.JSONRPCNotification)
            and note.method == "notifications/resources/updated"
            and isinstance(note.params, dict)
            and (uri := note.params.get("uri")) in self._attached
        ):
            self._stale.add(str(uri))

    async def attached(self, session: ClientSession, request: Request, uri: str) -> str:
        """Resource ``uri`` as an agent's context shows it (``read_text``):
        the first call reads it and subscribes to it (when the server offers
        subscriptions); after ``notifications/resources/updated`` for it (or
        a new session) the next call reads it again.  A server whose
        capabilities have no ``resources`` is not asked (it would only
        answer "method not found"): the error says it offers none."""
        if self._capabilities is not None and self._capabilities.resources is None:
            raise McpServerError(self.name, "it offers no resources (no `resources` capability)")
        if uri not in self._attached:
            self._attached[uri] = await self._read(session, request, uri)
            await self._subscribe(session, request, uri)
        elif uri in self._stale:
            self._stale.discard(uri)
            self._attached[uri] = await self._read(session, request, uri)
            await self._emit("resource_updated", {"server": self.name, "uri": uri})
        return self._attached[uri]

    async def prompt(
        self,
        session: ClientSession,
        request: Request,
        name: str,
        arguments: Mapping[str, str],
        complete: Sequence[str],
    ) -> list[tuple[str, str]]:
        """Prompt ``name``'s messages as (role, text) pairs; each argument in
        ``complete`` first takes the server's first completion of its value
        (``completion/complete``, the arguments before it as context)."""
        filled = dict(arguments)
        for argument in complete:
            value = filled.get(argument, "")
            context = {k: v for k, v in filled.items() if k != argument} or None
            result = await request(
                session.complete(
                    types.PromptReference(name=name),
                    {"name": argument, "value": value},
                    context_arguments=context,
                )
            )
            if not result.completion.values:
                raise McpServerError(
                    self.name, f"prompt {name!r}: no completion of {argument}={value!r}"
                )
            filled[argument] = result.completion.values[0]
        return prompt_messages(await request(session.get_prompt(name, filled)))

    async def call(
        self,
        session: ClientSession,
        request: Request,
        remote: str,
        arguments: Mapping[str, Any],
        shown: str,
    ) -> ToolOutput:
        """One call of a resource or prompt tool; failures are error outputs."""
        cursor = arguments.get("cursor")
        params = types.PaginatedRequestParams(cursor=cursor) if isinstance(cursor, str) else None
        try:
            if remote == LIST:
                text = listing_text(await request(session.list_resources(params=params)))
            elif remote == TEMPLATES:
                pages = await request(session.list_resource_templates(params=params))
                text = templates_text(pages)
            elif remote == PROMPTS_LIST:
                text = prompts_text(await request(session.list_prompts(params=params)))
            elif remote in RESOURCE_TOOLS:
                text = await self._read(session, request, str(arguments.get("uri", "")))
            else:
                given = arguments.get("arguments") or {}
                filled = {str(k): str(v) for k, v in given.items()}
                got = await request(session.get_prompt(str(arguments.get("name", "")), filled))
                text = "\n\n".join(f"{role}: {body}" for role, body in prompt_messages(got))
        except McpServerError as exc:
            return ToolOutput.of_text(f"MCP tool {shown!r}: {exc.detail}", is_error=True)
        return ToolOutput.of_text(text)

    async def _read(self, session: ClientSession, request: Request, uri: str) -> str:
        result = await request(session.read_resource(uri))
        contents = resource_contents(result.contents)
        return read_text(contents, max_chars=self._config.resources.max_chars)

    async def _subscribe(self, session: ClientSession, request: Request, uri: str) -> None:
        """``resources/subscribe``, when the server offers it.  The SDK marks
        it deprecated: 2026-07-28 servers take ``subscriptions/listen``
        instead, and do not offer ``subscribe`` on this handshake."""
        capabilities = self._capabilities
        resources = capabilities.resources if capabilities is not None else None
        if resources is None or not resources.subscribe:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            subscribing = session.subscribe_resource(uri)
        await request(subscribing)
