"""The daemon, ``agentrt serve``: runs over HTTP + SSE, an OpenAI-compatible
endpoint, MCP for IDEs (``/mcp`` and ``agentrt mcp`` over stdio), a durable
SQLite run store that survives ``kill -9``, Prometheus metrics and a web page.

Modules: ``config`` (``agentrt.toml``), ``store`` (the run store),
``manager`` (``RunManager``: admits, executes, resumes, follows runs),
``app`` (routes, Host/Origin/token guard, SSE), ``openapi``,
``openai_compat``, ``mcp_server``/``mcp_stdio``, ``metrics``, ``web``,
``daemon`` (``run_daemon``: sockets, uvicorn, graceful shutdown) and ``cli``.

The roof: may import every layer; nothing below it imports this package.
Import the modules themselves; this package re-exports nothing so that
``import agentrt`` stays light.
"""
