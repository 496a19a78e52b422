"""The engine: ``Runtime``, the one executor every entry point runs through.

Owns the runs (each a supervised actor tree on the actor kernel), the
long-lived services a ``Runtime`` shares between its runs (model backends,
MCP server connections, memory banks) and the run's one budget ledger.

The roof: may import every layer; the CLI, the daemon and embedders use it.
"""
