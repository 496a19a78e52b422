"""The MCP client: agentrt's tools from Model Context Protocol servers, on the
official ``mcp`` SDK.  Each server is one supervised actor
(``McpServerActor``) owning one ``McpConnection``; its tools are namespaced
``<server>__<tool>`` and pinned by hash (``pinning``).  ``spawn_mcp_servers``
starts them under a caller's actor system.

Sits in ``tools``: must not import agents or aggregators.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.tools.mcp.auth import AuthorizationHandler, McpAuthorizationError
    from agentrt.tools.mcp.auth_config import McpAuthConfig
    from agentrt.tools.mcp.auth_store import FileTokenStore
    from agentrt.tools.mcp.config import (
        ElicitationPolicy,
        HttpServerConfig,
        McpServerConfig,
        RestartPolicy,
        SamplingPolicy,
        StdioServerConfig,
        TaskPolicy,
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
    from agentrt.tools.mcp.rollouts import RolloutConnections
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
    from agentrt.tools.mcp.server_requests import (
        ElicitationQuestion,
        McpClientHooks,
        SamplingTarget,
    )
    from agentrt.tools.mcp.servers import (
        McpServerHandle,
        McpServers,
        McpServerTools,
        McpToolSource,
        spawn_mcp_servers,
    )
    from agentrt.tools.mcp.tool import SEPARATOR, McpTool, McpToolCaller, namespaced_names

# The SDK costs ~0.4 s and ~30 MB to import, and most processes never start
# an MCP connection: each name is imported from its module on first use.
_MODULES = {
    "AuthorizationHandler": "auth",
    "McpAuthorizationError": "auth",
    "McpAuthConfig": "auth_config",
    "FileTokenStore": "auth_store",
    "ElicitationPolicy": "config",
    "SamplingPolicy": "config",
    "TaskPolicy": "config",
    "ElicitationQuestion": "server_requests",
    "McpClientHooks": "server_requests",
    "SamplingTarget": "server_requests",
    "HttpServerConfig": "config",
    "McpServerConfig": "config",
    "RestartPolicy": "config",
    "StdioServerConfig": "config",
    "parse_server_spec": "config",
    "McpConnection": "connection",
    "McpServerError": "errors",
    "ConnectionState": "health",
    "MemoryPinStore": "pinning",
    "PinDecision": "pinning",
    "PinStore": "pinning",
    "SqlitePinStore": "pinning",
    "tool_definition_hash": "pinning",
    "RolloutConnections": "rollouts",
    "CallTool": "server_actor",
    "GetStatus": "server_actor",
    "ListTools": "server_actor",
    "McpServerActor": "server_actor",
    "McpServerReply": "server_actor",
    "McpServerRequest": "server_actor",
    "McpServerStatus": "server_actor",
    "McpToolInfo": "server_actor",
    "McpToolList": "server_actor",
    "Reconnect": "server_actor",
    "McpServerHandle": "servers",
    "McpServers": "servers",
    "McpServerTools": "servers",
    "McpToolSource": "servers",
    "spawn_mcp_servers": "servers",
    "SEPARATOR": "tool",
    "McpTool": "tool",
    "McpToolCaller": "tool",
    "namespaced_names": "tool",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup does not come here
    return value


__all__ = [
    "SEPARATOR",
    "AuthorizationHandler",
    "CallTool",
    "ConnectionState",
    "ElicitationPolicy",
    "ElicitationQuestion",
    "FileTokenStore",
    "GetStatus",
    "HttpServerConfig",
    "ListTools",
    "McpAuthConfig",
    "McpAuthorizationError",
    "McpClientHooks",
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
    "RolloutConnections",
    "SamplingPolicy",
    "SamplingTarget",
    "SqlitePinStore",
    "StdioServerConfig",
    "TaskPolicy",
    "namespaced_names",
    "parse_server_spec",
    "spawn_mcp_servers",
    "tool_definition_hash",
]
