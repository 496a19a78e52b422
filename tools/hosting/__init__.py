"""Hosting agentrt tools as MCP servers, for any MCP client to use:
``ToolServer`` (tools, resources and prompts on the official SDK's
low-level server) and the ``serve_*`` transports that run it in-process,
over stdio or over streamable HTTP (or mounted in another ASGI app).

This package sits in ``tools/``: it may use the runtime floor and the MCP
SDK, never agents or aggregators.
"""
