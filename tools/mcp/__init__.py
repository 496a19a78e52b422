"""The MCP client: agentrt's tools from Model Context Protocol servers, on the
official ``mcp`` SDK.  Each server is one supervised actor
(``McpServerActor``) owning one ``McpConnection``; its tools are namespaced
``<server>__<tool>`` and pinned by hash (``pinning``).  ``spawn_mcp_servers``
starts them under a caller's actor system.

Sits in ``tools``: must not import agents or aggregators.
"""
