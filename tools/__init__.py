"""Tools: the tool registry, Python-function tools, MCP client connections and
the MCP tool servers the runtime hosts.

Sits above the runtime floor (it may use actors and model types) and below
agents; it never imports agents or aggregators.
"""
