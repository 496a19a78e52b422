"""``McpToolbox``: every configured MCP server, in an actor system of its own.

::

    async with McpToolbox(McpClientConfig(servers=[...])) as box:
        tools = box.tools()        # all servers' tools, namespaced, sorted
        box.failures               # {server: error} for servers that did not start

For callers that have no actor system: the toolbox opens one, spawns the
servers there with :func:`spawn_mcp_servers` (the one way servers are
started) and closes it on exit.  A ``Runtime`` that owns an actor system
calls ``spawn_mcp_servers`` itself.  Owns only the pin store chosen by the
configuration (``pin_store``) and that private system's lifetime.

Must not import agents or aggregators.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Self, final

from agentrt.runtime.actors import ActorSystem
from agentrt.runtime.errors import AgentrtError
from agentrt.tools.base import NotificationSink
from agentrt.tools.mcp.config import McpClientConfig
from agentrt.tools.mcp.pinning import MemoryPinStore, PinStore, SqlitePinStore
from agentrt.tools.mcp.servers import McpServerHandle, McpServers, spawn_mcp_servers
from agentrt.tools.mcp.tool import McpTool

__all__ = ["McpToolbox"]


@final
class McpToolbox:
    """The MCP servers of one configuration, as one async context manager."""

    def __init__(
        self,
        config: McpClientConfig,
        *,
        pins: PinStore | None = None,
        on_notification: NotificationSink | None = None,
    ) -> None:
        self.config = config
        if pins is None:
            pins = SqlitePinStore(config.pin_store) if config.pin_store else MemoryPinStore()
        self._pins = pins
        self._sink = on_notification
        self._system: ActorSystem | None = None
        self._servers = McpServers({}, {})
        self._opened = False

    @property
    def connections(self) -> Mapping[str, McpServerHandle]:
        """Servers that started, by name (``McpToolSource``)."""
        return self._servers.connections

    @property
    def failures(self) -> dict[str, AgentrtError]:
        """Servers that could not be started, with the reason."""
        return self._servers.failures

    def tools(self) -> list[McpTool]:
        """Every started server's offered tools, sorted by namespaced name
        (a stable order keeps the prompt prefix byte-identical)."""
        return self._servers.tools()

    async def __aenter__(self) -> Self:
        if self._opened:
            raise RuntimeError("Cannot reopen an McpToolbox once it has been opened.")
        self._opened = True
        system = ActorSystem()
        await system.__aenter__()
        try:
            self._servers = await spawn_mcp_servers(
                system,
                self.config.servers,
                pins=self._pins,
                on_notification=self._sink,
                require_all=self.config.require_all,
            )
        except BaseException as exc:
            await system.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._system = system
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        system, self._system = self._system, None
        if system is not None:
            await system.__aexit__(exc_type, exc_val, exc_tb)
