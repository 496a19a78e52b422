"""The daemon's configuration file (``agentrt.toml``) and its validation.

Owns ``DaemonConfig``: ``[server]`` (address, token, allowed hosts and
origins, limits, shutdown grace), ``[store]`` (the SQLite file), ``[tools]``
(built-in tools agents may use) and every key of the embedding facade's
``RuntimeConfig`` at the top level (``[models]``, ``[agents.<name>]``,
``rollouts``, ``aggregate``...).  ``load_daemon_config`` turns a bad file
into a ``ConfigError`` naming the file, the key and the reason.

May import the facade, the runtime's configuration types and the built-in
tools; nothing of HTTP.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrt.runtime.engine import RuntimeConfig
from agentrt.runtime.errors import ConfigError
from agentrt.runtime.models.registry import ModelRegistry
from agentrt.tools.base import Tool
from agentrt.tools.hosting.transports import is_loopback

DEFAULT_PORT = 8765
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def default_store_path() -> Path:
    """``$XDG_STATE_HOME/agentrt/runs.db`` (``~/.local/state/agentrt/runs.db``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "agentrt" / "runs.db"


class ServerConfig(BaseModel):
    """``[server]``: where the daemon listens and who may talk to it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """The interface to listen on; a non-loopback one requires ``token``."""
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    """The TCP port (0: any free port; the log line says which)."""
    token: str | None = Field(default=None, min_length=16)
    """Bearer token every request must carry (``Authorization: Bearer ...``),
    except ``/healthz`` and ``/readyz``; ``token_env`` reads it from the environment."""
    token_env: str | None = None
    """The environment variable holding the token (instead of ``token``)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """``Host`` header values accepted besides the loopback names (DNS-rebinding
    protection: any other gets 421), e.g. ``["agentrt.internal:8765"]``."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser ``Origin`` values accepted besides the daemon's own loopback
    origins (any other gets 403), e.g. ``["https://console.example.com"]``."""
    max_active_runs: int = Field(default=256, ge=1)
    """Runs executing at once; further runs wait as ``pending``."""
    max_rollouts: int = Field(default=64, ge=1)
    """The most rollouts one run may ask for."""
    finished_runs_cached: int = Field(default=1024, ge=0)
    """Finished runs whose final state stays in memory, so polling clients
    never wait on the store for them (the most recent ones; 0: none).  Each
    holds its result, rollout summaries included: a few KB per rollout."""
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    """On SIGTERM: how long running runs may take to finish before they are
    checkpointed (stopped; resumed from their committed steps on restart)."""
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    """Comment lines sent on idle event streams so proxies keep them open."""

    def resolved_token(self) -> str | None:
        if self.token is not None:
            return self.token
        if self.token_env is not None:
            value = os.environ.get(self.token_env)
            if not value:
                raise ConfigError(
                    f"environment variable {self.token_env} is unset or empty",
                    where="server.token_env",
                )
            return value
        return None


class StoreConfig(BaseModel):
    """``[store]``: the durable run store."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    path: Path = Field(default_factory=default_store_path)
    """The SQLite file (created with its folder); relative to the config file."""
    synchronous: Literal["normal", "full"] = "normal"
    """``normal``: commits survive the process being killed; ``full``: also
    power loss (an fsync per commit group)."""


class ToolsConfig(BaseModel):
    """``[tools]``: the built-in tools agents may call (by name in their ``tools``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    calculator: bool = True
    """``calculator``: safe arithmetic."""
    python_sandbox: bool = False
    """``python``: a Python sandbox (a user and network namespace, limits)."""
    files_root: Path | None = None
    """``read_file``/``list_directory`` confined to this folder."""

    def build(self) -> list[Tool]:
        from agentrt.tools.builtins import Calculator, PythonSandbox, file_tools

        tools: list[Tool] = []
        if self.calculator:
            tools.append(Calculator())
        if self.python_sandbox:
            tools.append(PythonSandbox())
        if self.files_root is not None:
            tools.extend(file_tools(self.files_root))
        return tools


class DaemonConfig(BaseModel):
    """The whole file: ``[server]``, ``[store]``, ``[tools]``, ``[log]`` and
    the facade's keys (``[models]``, ``[agents.<name>]``, ``rollouts``...)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    server: ServerConfig = ServerConfig()
    """Where to listen and who may connect."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """The run store."""
    tools: ToolsConfig = ToolsConfig()
    """Built-in tools."""
    log_level: str = "INFO"
    """Log level of the JSON logs on stderr."""
    runtime: RuntimeConfig = RuntimeConfig()
    """Models, agents and scaling defaults (the file's other top-level keys)."""
    source: str = "<defaults>"
    """Where this configuration came from (for error messages)."""

    @model_validator(mode="after")
    def _token_off_loopback(self) -> DaemonConfig:
        if not is_loopback(self.server.host) and not (self.server.token or self.server.token_env):
            raise ValueError(
                f"binding the non-loopback address {self.server.host!r} requires a bearer "
                "token: set server.token (16+ characters) or server.token_env"
            )
        return self

    def with_server(self, **changes: Any) -> DaemonConfig:
        """A copy with ``[server]`` keys changed (command-line overrides), validated."""
        data = self.model_dump()
        data["server"] = {**data["server"], **{k: v for k, v in changes.items() if v is not None}}
        return _validate(data, self.source)


_SECTIONS = frozenset({"server", "store", "tools", "log_level"})


def _validate(data: dict[str, Any], source: str) -> DaemonConfig:
    try:
        return DaemonConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        if key.startswith("runtime."):
            key = key.removeprefix("runtime.")
        extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{first['msg']}{extra}", where=f"{source}: {key}") from None


def config_from_mapping(
    data: dict[str, Any], *, source: str, base: Path | None = None
) -> DaemonConfig:
    """Validate a parsed file: split the daemon's sections from the facade's
    keys, name agents after their tables, resolve paths against ``base``."""
    daemon = {k: v for k, v in data.items() if k in _SECTIONS}
    runtime = {k: v for k, v in data.items() if k not in _SECTIONS}
    agents = runtime.get("agents")
    if isinstance(agents, dict):
        fixed: dict[str, Any] = {}
        for name, entry in agents.items():
            if isinstance(entry, dict):
                fixed[name] = {"name": name, **entry}
            elif isinstance(entry, str) and base is not None:
                fixed[name] = str(base / entry)
            else:
                fixed[name] = entry
        runtime["agents"] = fixed
    store = daemon.get("store")
    if base is not None and isinstance(store, dict) and isinstance(store.get("path"), str):
        daemon["store"] = {**store, "path": str(base / Path(store["path"]).expanduser())}
    tools = daemon.get("tools")
    if base is not None and isinstance(tools, dict) and isinstance(tools.get("files_root"), str):
        daemon["tools"] = {**tools, "files_root": str(base / tools["files_root"])}
    config = _validate({**daemon, "runtime": runtime}, source)
    # Each backend's own options are checked by its kind (unknown kinds too).
    ModelRegistry(config.runtime.models, where=f"{source}: models")
    return config


def load_daemon_config(path: Path | None) -> DaemonConfig:
    """Read ``agentrt.toml``; ``None``: the defaults (the embedded model)."""
    if path is None:
        return _validate({}, "<defaults>")
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the configuration: {error.strerror}", where=where) from None
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"not valid TOML: {error}", where=where) from None
    return config_from_mapping(data, source=where, base=path.resolve().parent)


__all__ = [
    "DEFAULT_PORT",
    "DaemonConfig",
    "ServerConfig",
    "StoreConfig",
    "ToolsConfig",
    "config_from_mapping",
    "default_store_path",
    "load_daemon_config",
]
