"""The MCP client: agentrt's tools from Model Context Protocol servers.

::

    from agentrt.tools.mcp import McpClientConfig, McpToolbox, StdioServerConfig

    config = McpClientConfig(servers=[StdioServerConfig(
        name="everything", command="npx",
        args=["-y", "@modelcontextprotocol/server-everything"])])
    async with McpToolbox(config) as box:
        for tool in box.tools():          # McpTool: the ``Tool`` protocol
            print(tool.spec.name)         # everything__echo, ...

Built on the official ``mcp`` SDK (2.x): stdio and streamable HTTP
transports, ``ClientSession``.  Each server is one supervised
``McpConnection`` (restart with backoff, clear tool errors meanwhile), its
tools are namespaced ``<server>__<tool>``, and each tool definition is
pinned by hash so a server that changes a tool after approval has it
blocked (``pinning``).

Sits in ``tools``: must not import agents or aggregators.
"""

from agentrt.tools.mcp.config import (
    HttpServerConfig,
    McpClientConfig,
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
from agentrt.tools.mcp.tool import SEPARATOR, McpTool, namespaced_names
from agentrt.tools.mcp.toolbox import McpToolbox

__all__ = [
    "SEPARATOR",
    "ConnectionState",
    "HttpServerConfig",
    "McpClientConfig",
    "McpConnection",
    "McpServerConfig",
    "McpServerError",
    "McpTool",
    "McpToolbox",
    "MemoryPinStore",
    "PinDecision",
    "PinStore",
    "RestartPolicy",
    "SqlitePinStore",
    "StdioServerConfig",
    "namespaced_names",
    "parse_server_spec",
    "tool_definition_hash",
]
