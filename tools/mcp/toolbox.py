"""``McpToolbox``: every configured MCP server, started together.

::

    async with McpToolbox(McpClientConfig(servers=[...])) as box:
        tools = box.tools()        # all servers' tools, namespaced, sorted
        box.failures               # {server: error} for servers that did not start

Owns starting the connections concurrently (one task group, one task per
server holding its ``McpConnection`` open), the shared pin store, and the
policy for a server that cannot start: reported in ``failures`` and left
out (the run goes on with the rest) unless ``require_all`` is set, in which
case entering the toolbox raises the first failure.

Must not import agents or aggregators.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self, final

import anyio
import anyio.abc

from agentrt.runtime.errors import AgentrtError
from agentrt.runtime.log import get_logger
from agentrt.tools.base import NotificationSink
from agentrt.tools.mcp.config import HttpServerConfig, McpClientConfig, StdioServerConfig
from agentrt.tools.mcp.connection import McpConnection
from agentrt.tools.mcp.pinning import MemoryPinStore, PinStore, SqlitePinStore
from agentrt.tools.mcp.tool import McpTool

__all__ = ["McpToolbox"]

_log = get_logger(__name__)


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
        self.connections: dict[str, McpConnection] = {}
        """Servers that started, by name."""
        self.failures: dict[str, AgentrtError] = {}
        """Servers that could not be started, with the reason."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._opened = False

    def tools(self) -> list[McpTool]:
        """Every started server's offered tools, sorted by namespaced name
        (a stable order keeps the prompt prefix byte-identical)."""
        found = [t for conn in self.connections.values() for t in conn.tools()]
        return sorted(found, key=lambda t: t.spec.name)

    async def _hold(
        self,
        server: StdioServerConfig | HttpServerConfig,
        *,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        """Open one connection, report readiness (or the failure), then hold
        it open until the toolbox closes."""
        try:
            connection = McpConnection(server, pins=self._pins, on_notification=self._sink)
            async with connection:
                self.connections[server.name] = connection
                task_status.started()
                await anyio.sleep_forever()
        except AgentrtError as exc:
            _log.error("mcp.server.not_started", server=server.name, error=str(exc))
            self.failures[server.name] = exc
            task_status.started()

    async def __aenter__(self) -> Self:
        if self._opened:
            raise RuntimeError("Cannot reopen an McpToolbox once it has been opened.")
        self._opened = True
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            async with anyio.create_task_group() as starting:
                for server in self.config.servers:
                    # Start concurrently: one slow npx download must not serialise the rest.
                    starting.start_soon(self._tg.start, self._hold, server)
            if self.config.require_all and self.failures:
                raise next(iter(self.failures.values()))
        except BaseException:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc_val, exc_tb)
