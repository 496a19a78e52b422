"""The daemon's MCP surface: runs as MCP tools and resources, over
``/mcp`` and over stdio (``agentrt mcp``).
"""
