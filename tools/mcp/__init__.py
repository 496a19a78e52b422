"""The MCP client: agentrt's tools from Model Context Protocol servers, on the
official ``mcp`` SDK.  Each server is one supervised actor
(``McpServerActor``) owning one ``McpConnection``; its tools are namespaced
``<server>__<tool>`` and pinned by hash (``pinning``).  ``spawn_mcp_servers``
starts them under a caller's actor system.

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
