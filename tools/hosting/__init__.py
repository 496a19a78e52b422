"""Hosting agentrt tools as MCP servers, for any MCP client to use:
``ToolServer`` (tools, resources and prompts on the official SDK's
low-level server) and the ``serve_*`` transports that run it in-process,
over stdio or over streamable HTTP (or mounted in another ASGI app).

This package sits in ``tools/``: it may use the runtime floor and the MCP
SDK, never agents or aggregators.
"""

from agentrt.tools.hosting.calls import McpCallPeer
from agentrt.tools.hosting.catalog import (
    ListedResource,
    Prompt,
    PromptArgument,
    PromptMessage,
    ResourceTemplate,
    StaticResource,
)
from agentrt.tools.hosting.config import HttpServeConfig, LogLevel, ToolServerConfig
from agentrt.tools.hosting.event_store import MemoryEventStore
from agentrt.tools.hosting.server import ToolServer
from agentrt.tools.hosting.transports import (
    HttpEndpoint,
    HttpMount,
    connect_in_process,
    loopback_security,
    serve_in_process,
    serve_stdio,
    serve_streamable_http,
    streamable_http_mount,
)

__all__ = [
    "HttpEndpoint",
    "HttpMount",
    "HttpServeConfig",
    "ListedResource",
    "LogLevel",
    "McpCallPeer",
    "MemoryEventStore",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ResourceTemplate",
    "StaticResource",
    "ToolServer",
    "ToolServerConfig",
    "connect_in_process",
    "loopback_security",
    "serve_in_process",
    "serve_stdio",
    "serve_streamable_http",
    "streamable_http_mount",
]
