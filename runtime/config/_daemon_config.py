"""The daemon's view of ``agentrt.toml``.

The file, its sections and its loader live in
``agentrt.runtime.config._config_file`` (one file for every command); the
daemon's modules name the whole configuration ``DaemonConfig``, which is
that ``AgentrtConfig``.  Nothing of HTTP.
"""

from __future__ import annotations

from agentrt.runtime.config._config_file import (
    DEFAULT_PORT,
    LOOPBACK_HOSTS,
    AgentrtConfig,
    ServerConfig,
    StoreConfig,
    ToolsConfig,
    default_store_path,
)

DaemonConfig = AgentrtConfig
"""The daemon's configuration: the whole ``agentrt.toml`` (``AgentrtConfig``)."""

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK_HOSTS",
    "DaemonConfig",
    "ServerConfig",
    "StoreConfig",
    "ToolsConfig",
    "default_store_path",
]
