"""The MCP client: agentrt's tools from Model Context Protocol servers.

::

    from agentrt.runtime.actors import ActorSystem
    from agentrt.tools.mcp import StdioServerConfig, spawn_mcp_servers

    servers = [StdioServerConfig(
        name="everything", command="npx",
        args=["-y", "@modelcontextprotocol/server-everything"])]
    async with ActorSystem() as system:
        mcp = await spawn_mcp_servers(system, servers)
        for tool in mcp.tools("everything"):   # McpTool: the ``Tool`` protocol
            print(tool.spec.name)              # everything__echo, ...

Built on the official ``mcp`` SDK (2.x): stdio and streamable HTTP
transports, ``ClientSession``.  Each server is one supervised actor
(``McpServerActor``) owning one ``McpConnection`` (restart with the actor
floor's ``RestartBackoff``, clear tool errors meanwhile); its tools call
through the actor, are namespaced ``<server>__<tool>``, and each tool
definition is pinned by hash so a server that changes a tool after approval
has it blocked (``pinning``).  ``spawn_mcp_servers`` starts them under a
caller's actor system (the ``Runtime``'s: one connection per server, shared
by its runs).

Sits in ``tools``: must not import agents or aggregators.
"""

from agentrt.tools.mcp.config import (
    HttpServerConfig,
    McpServerConfig,
    RestartPolicy,
    StdioServerConfig,
    parse_server_spec,
)
from agentrt.tools.mcp.connection import McpConnection
from agentrt.tools.mcp.errors import McpServerError
from agentrt.tools.mcp.health import ConnectionState
from agentrt.tools.mcp.pinning import (
    MemoryPinStore,
    PinDecision,
    PinStore,
    SqlitePinStore,
    tool_definition_hash,
)
from agentrt.tools.mcp.server_actor import (
    CallTool,
    GetStatus,
    ListTools,
    McpServerActor,
    McpServerReply,
    McpServerRequest,
    McpServerStatus,
    McpToolInfo,
    McpToolList,
    Reconnect,
)
from agentrt.tools.mcp.servers import (
    McpServerHandle,
    McpServers,
    McpServerTools,
    McpToolSource,
    spawn_mcp_servers,
)
from agentrt.tools.mcp.tool import SEPARATOR, McpTool, McpToolCaller, namespaced_names

__all__ = [
    "SEPARATOR",
    "CallTool",
    "ConnectionState",
    "GetStatus",
    "HttpServerConfig",
    "ListTools",
    "McpConnection",
    "McpServerActor",
    "McpServerConfig",
    "McpServerError",
    "McpServerHandle",
    "McpServerReply",
    "McpServerRequest",
    "McpServerStatus",
    "McpServerTools",
    "McpServers",
    "McpTool",
    "McpToolCaller",
    "McpToolInfo",
    "McpToolList",
    "McpToolSource",
    "MemoryPinStore",
    "PinDecision",
    "PinStore",
    "Reconnect",
    "RestartPolicy",
    "SqlitePinStore",
    "StdioServerConfig",
    "namespaced_names",
    "parse_server_spec",
    "spawn_mcp_servers",
    "tool_definition_hash",
]
