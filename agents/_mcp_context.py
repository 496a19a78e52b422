"""What an agent's context takes from its MCP servers: resources attached
to every step (``AgentConfig.resources``) and the prompt a rollout starts
from (``AgentConfig.prompt``), built from the configuration by
``mcp_context`` (the one way, whether the agent came from a YAML spec, an
agent of ``agentrt.toml`` or Python).

Reads through ``McpServerTools`` (``attached``, ``prompt``); must not know
how the server is reached.  Never imports aggregators or the roof.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, final

from agentrt.agents._agent_config import AgentConfig
from agentrt.protocols._messages import AssistantMessage, ChatMessage, SystemMessage, UserMessage
from agentrt.runtime.kernel._errors import ConfigError, ToolError

if TYPE_CHECKING:  # the MCP SDK loads when a connection opens, not with the agents
    from agentrt.tools.mcp._servers import McpServerTools, McpToolSource

__all__ = ["PromptStart", "ResourceNote", "RolloutMcpContext", "mcp_context"]


@final
class ResourceNote:
    """Resource ``uri`` of MCP server ``server`` (named ``server_name``), as
    the message a step shows."""

    def __init__(self, server_name: str, server: McpServerTools, uri: str) -> None:
        self.server_name = server_name
        self.uri = uri
        self._server = server

    async def message(self) -> UserMessage:
        """The resource's current text (or why it could not be read: the
        step goes on without it)."""
        try:
            text = await self._server.attached(self.uri)
        except ToolError as exc:
            text = f"[it could not be read: {exc}]"
        header = f"Attached resource {self.uri} (MCP server {self.server_name!r}):"
        return UserMessage(content=f"{header}\n{text}")


@final
class PromptStart:
    """Prompt ``name`` of an MCP server, filled in with ``arguments`` (those
    named in ``complete`` completed by the server first): the messages a
    rollout starts from, after the instructions and before the task."""

    def __init__(
        self,
        server: McpServerTools,
        name: str,
        arguments: Mapping[str, str],
        complete: Sequence[str] = (),
    ) -> None:
        self.name = name
        self._server = server
        self._arguments = dict(arguments)
        self._complete = tuple(complete)

    async def messages(self) -> list[ChatMessage]:
        """The prompt's messages, got from the server now.  Raises
        ``ToolError`` (``McpServerError``) when it cannot be got."""
        got = await self._server.prompt(self.name, self._arguments, complete=self._complete)
        return [
            AssistantMessage(content=text) if role == "assistant" else UserMessage(content=text)
            for role, text in got
        ]


@final
class RolloutMcpContext:
    """One rollout's MCP context: the prompt it starts from (got once, at
    its first step) and the resources every step shows."""

    def __init__(self, prompt: PromptStart | None, resources: Sequence[ResourceNote]) -> None:
        self._prompt = prompt
        self._resources = tuple(resources)
        self._started: list[ChatMessage] | None = None

    async def add_to(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """Put the prompt's messages after the instructions and the
        resources at the end of ``messages``; returns what was added.
        Raises ``ToolError`` when the prompt cannot be got."""
        added: list[ChatMessage] = []
        if self._prompt is not None:
            if self._started is None:
                try:
                    self._started = await self._prompt.messages()
                except ToolError as exc:
                    raise ToolError(f"MCP prompt {self._prompt.name!r}: {exc}") from exc
            after = 1 if messages and isinstance(messages[0], SystemMessage) else 0
            messages[after:after] = self._started
            added += self._started
        for resource in self._resources:
            shown = await resource.message()
            messages.append(shown)
            added.append(shown)
        return added


def mcp_context(
    config: AgentConfig, mcp: McpToolSource | None, *, where: str
) -> tuple[tuple[ResourceNote, ...], PromptStart | None]:
    """The resources ``config`` attaches and the prompt it starts from, read
    from the open servers of ``mcp``.  A ``ConfigError`` (at ``where``,
    naming the entry) when one names a server that is not open."""

    def server(name: str, key: str) -> McpServerTools:
        found = mcp.connections.get(name) if mcp is not None else None
        if found is None:
            opened = ", ".join(sorted(mcp.connections)) if mcp is not None else ""
            raise ConfigError(
                f"{key} reads from the MCP server {name!r}, which is not open "
                f"(open: {opened or 'none'})",
                where=where,
            )
        return found

    resources = tuple(
        ResourceNote(a.mcp, server(a.mcp, f"resources[{i}]"), a.resolved_uri)
        for i, a in enumerate(config.resources)
    )
    start = config.prompt
    prompt = (
        None
        if start is None
        else PromptStart(server(start.mcp, "prompt"), start.name, start.arguments, start.complete)
    )
    return resources, prompt
