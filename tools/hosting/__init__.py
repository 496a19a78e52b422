"""Hosting agentrt tools as MCP servers, for any MCP client to use.

``ToolServer`` turns objects implementing the ``Tool`` protocol (Python
function tools, the built-ins, anything else), ``StaticResource``s,
``ResourceTemplate``s and ``Prompt``s into an MCP server built on the
official SDK's low-level server.  The ``serve_*`` functions in
``transports`` run it in-process, over stdio, or over streamable HTTP, each
started in the caller's task group::

    server = ToolServer("calc", tools=[calculator])
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(serve_streamable_http, server)
        print(endpoint.url)  # http://127.0.0.1:PORT/mcp

or, inside another ASGI app, ``streamable_http_mount`` (an app to route to
plus the lifespan to enter), with Host/Origin validation always on.

Tools talk back through their ``ToolContext``: ``notify("log", ...)`` and
``notify("progress", ...)`` become MCP log and progress notifications, and
``context.peer`` (an ``McpCallPeer``) asks the client for sampling or
elicitation.

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
