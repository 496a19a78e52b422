"""``agentrt.toml``: the one configuration file of ``run``, ``serve``, ``mcp`` and ``eval``.

Owns ``AgentrtConfig`` (the whole file: ``[server]``, ``[store]``, ``[tools]``,
``[placement]``, ``log_level``, and at the top level the runtime's keys:
``[models]``, ``[agents]``, ``[mcp]``, ``rollouts``, ``aggregate``...),
``load_config`` / ``config_from_mapping``, and ``key_line``, which finds a
key's line in TOML text so that every error names file, line and key.

Reads files and validates; must not know how runs execute or how the daemon
serves them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._spec_loader import load_spec
from agentrt.aggregators._compose import parse_config
from agentrt.protocols._webhooks import WEBHOOK_URL_PATTERN
from agentrt.runtime.config._runtime_config import PlacementConfig, RuntimeConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.models._model_registry import ModelRegistry
from agentrt.tools._tool import Tool
from agentrt.tools.hosting._transports import is_loopback

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK_HOSTS",
    "SCOPES",
    "AgentrtConfig",
    "ApiKeyConfig",
    "PlacementConfig",
    "ServerConfig",
    "StoreConfig",
    "ToolsConfig",
    "WebhookConfig",
    "config_from_mapping",
    "default_store_path",
    "exact_origin",
    "key_line",
    "load_config",
]

DEFAULT_PORT: Final = 8765
LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost", "::1")

Key = tuple[str | int, ...]
"""A dotted key as parts: ``("models", "backends", "vllm", "kind")``."""


def default_store_path() -> Path:
    """``$XDG_STATE_HOME/agentrt/runs.db`` (``~/.local/state/agentrt/runs.db``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "agentrt" / "runs.db"


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def exact_origin(text: str) -> str:
    """``text`` as the exact origin ``scheme://host:port`` (lower case, the
    scheme's default port written out), or ``ValueError`` saying why it is
    not one.  Browsers send an ``Origin`` without a default port; both forms
    become the same string here."""
    parts = urlsplit(text.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not parts.hostname
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or port == -1
    ):
        raise ValueError(
            f"{text!r} is not an origin: expected scheme://host[:port] with scheme http "
            "or https and no path, e.g. https://console.example.com:8443"
        )
    host = parts.hostname.lower()
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{port or _DEFAULT_PORTS[parts.scheme]}"


class WebhookConfig(BaseModel):
    """``[server.webhook]``: where and how the daemon tells of runs that end
    (``POST`` of a signed ``WebhookEvent``; see docs/daemon.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    url: str | None = Field(default=None, pattern=WEBHOOK_URL_PATTERN)
    """The webhook of every run that names none (``RunRequest.webhook``); ``None``: none."""
    secret: str | None = Field(default=None, min_length=16, repr=False)
    """The shared secret every delivery is signed with (HMAC-SHA256 over the
    timestamp and the body); ``secret_env`` reads it from the environment.
    A run may name a webhook only when the daemon has a secret."""
    secret_env: str | None = None
    """The environment variable holding the secret (instead of ``secret``)."""
    attempts: int = Field(default=5, ge=1, le=20)
    """Tries per delivery: a non-2xx answer, no connection or no answer
    within ``timeout_s`` is tried again, after a growing wait."""
    backoff_s: float = Field(default=1.0, gt=0)
    """The wait before the second try; it doubles each time, up to ``max_backoff_s``."""
    max_backoff_s: float = Field(default=60.0, gt=0)
    """The longest wait between two tries."""
    timeout_s: float = Field(default=10.0, gt=0)
    """The deadline of each try (connecting, sending and the receiver's answer)."""
    queue: int = Field(default=256, ge=1)
    """Deliveries waiting to be sent at once; past it, a delivery is recorded
    as ``dropped`` (the runs never wait for their webhooks)."""
    senders: int = Field(default=4, ge=1, le=64)
    """Deliveries in flight at once."""

    def resolved_secret(self) -> str | None:
        """The secret (``secret``, else ``secret_env``'s value), if any.

        Raises ``ConfigError`` when ``secret_env`` names an unset variable."""
        if self.secret is not None:
            return self.secret
        if self.secret_env is not None:
            value = os.environ.get(self.secret_env)
            if not value:
                raise ConfigError(
                    f"environment variable {self.secret_env} is unset or empty",
                    where="server.webhook.secret_env",
                )
            return value
        return None

    @model_validator(mode="after")
    def _url_needs_secret(self) -> WebhookConfig:
        if self.url is not None and not (self.secret or self.secret_env):
            raise ValueError(
                "a webhook url needs a secret to sign deliveries with: set "
                "server.webhook.secret (16+ characters) or server.webhook.secret_env"
            )
        return self


Scope = Literal["runs:create", "runs:read", "runs:read_all", "admin"]
"""What an API key may do (docs/daemon.md, "Clients and keys")."""
SCOPES: Final[tuple[str, ...]] = typing.get_args(Scope)
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_KEY_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class ApiKeyConfig(BaseModel):
    """``[server.keys.NAME]``: one client's API key (made by ``agentrt key
    NAME``, which prints the key once and this table).  The daemon holds the
    key's SHA-256 only; a request carrying the key as its bearer token acts
    as ``NAME``, under these scopes and limits."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    sha256: str = Field(repr=False)
    """The key's SHA-256, 64 lowercase hex digits (never the key itself)."""
    scopes: list[Scope] = Field(min_length=1)
    """What the key may do: ``runs:create`` (create runs and threads, cancel
    and answer its own runs, the OpenAI-compatible endpoints), ``runs:read``
    (read and follow its own runs and threads), ``runs:read_all`` (read every
    run and thread), ``admin`` (everything)."""
    rate_per_minute: int | None = Field(default=None, ge=1)
    """Requests the key may make per minute (a burst of as many, refilled
    evenly); past it, 429 with ``Retry-After``.  ``None``: unlimited."""
    max_active_runs: int | None = Field(default=None, ge=1)
    """The key's runs unfinished at once (pending or running); past it,
    creating a run answers 429.  ``None``: only the daemon's own limits."""

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise ValueError(
                "expected the key's SHA-256 as 64 lowercase hex digits (agentrt key NAME "
                "prints it), not the key itself"
            )
        return value

    @field_validator("scopes", mode="before")
    @classmethod
    def _known_scopes(cls, value: Any) -> Any:
        if isinstance(value, list):
            for scope in value:
                if scope not in SCOPES:
                    raise ValueError(
                        f"unknown scope {scope!r}: expected one of {', '.join(SCOPES)}"
                    )
        return value


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
    keys: dict[str, ApiKeyConfig] = Field(default_factory=dict)
    """Per-client API keys by name (``[server.keys.NAME]``), each with its
    scopes and limits; they work beside ``token``, which acts as an admin key."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """``Host`` header values accepted besides the loopback names (DNS-rebinding
    protection: any other gets 421), e.g. ``["agentrt.internal:8765"]``."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser ``Origin`` values accepted besides the daemon's own address
    (``http://127.0.0.1:<port>``, ``http://localhost:<port>``,
    ``http://[::1]:<port>``); any other gets 403.  Each is an exact
    ``scheme://host[:port]`` (no path; the scheme's default port when none
    is given), e.g. ``["https://console.example.com"]``."""
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
    max_pending_runs: int = Field(default=1024, ge=0)
    """Runs admitted beyond ``max_active_runs`` to wait as ``pending``; past
    it, ``POST /v1/runs`` and chat completions answer 429 with ``Retry-After``."""
    max_connections: int = Field(default=512, ge=1)
    """Open HTTP connections at once; a request on one more gets 429."""
    max_request_bytes: int = Field(default=4 << 20, ge=1024)
    """The largest request body (413 past it, before it is read when
    ``Content-Length`` says so)."""
    max_header_bytes: int = Field(default=16384, ge=1024)
    """The largest request line plus headers (431 past it)."""
    max_json_depth: int = Field(default=64, ge=2, le=500)
    """How deeply a JSON body may nest arrays and objects (400 past it)."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """Time a connection has to send a request's headers (408, then closed):
    from its start, or from the first bytes of a request after an idle spell."""
    keep_alive_s: float = Field(default=30.0, gt=0)
    """Seconds an idle keep-alive connection is held open after a response.
    Above what clients keep theirs (httpx and the OpenAI SDK: 5 s, aiohttp:
    15 s): a server that closes first races a client's next request, which
    then meets a reset connection."""
    body_timeout_s: float = Field(default=30.0, gt=0)
    """Time a request has to send its whole body, once its headers are in (408)."""
    webhook: WebhookConfig = WebhookConfig()
    """Webhooks: the daemon's default one, the signing secret, retries."""

    @field_validator("allowed_origins")
    @classmethod
    def _exact_origins(cls, values: list[str]) -> list[str]:
        return [exact_origin(value) for value in values]

    @field_validator("keys")
    @classmethod
    def _key_names(cls, keys: dict[str, ApiKeyConfig]) -> dict[str, ApiKeyConfig]:
        digests: dict[str, str] = {}
        for name, key in keys.items():
            if not _KEY_NAME.fullmatch(name):
                raise ValueError(
                    f"key name {name!r}: 1-64 letters, digits, '_', '.' or '-', "
                    "starting with a letter or digit"
                )
            if key.sha256 in digests:
                raise ValueError(f"keys {digests[key.sha256]!r} and {name!r} have the same sha256")
            digests[key.sha256] = name
        return keys

    @model_validator(mode="after")
    def _token_off_loopback(self) -> ServerConfig:
        if not is_loopback(self.host) and not (self.token or self.token_env or self.keys):
            raise ValueError(
                f"binding the non-loopback address {self.host!r} requires a bearer "
                "token or API keys: set server.token (16+ characters), server.token_env "
                "or [server.keys.NAME]"
            )
        return self

    def resolved_token(self) -> str | None:
        """The bearer token (``token``, else ``token_env``'s value), if any.

        Raises ``ConfigError`` when ``token_env`` names an unset variable."""
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
    """``[store]``: the durable run store of ``serve`` and ``mcp``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    path: Path = Field(default_factory=default_store_path)
    """The SQLite file (created with its folder); relative to the config file."""
    durability: Literal["process", "power"] = "process"
    """What a committed step (and a journaled call) survives: ``process``, the
    daemon being killed at any instant (SQLite WAL, ``synchronous=NORMAL``);
    ``power``, also the machine losing power (``synchronous=FULL``: an fsync
    per commit group, slower commits)."""
    readers: int = Field(default=4, ge=1, le=64)
    """Read connections the store may hold open at once (reads beyond wait)."""
    reader_idle_s: float = Field(default=10.0, gt=0)
    """A read connection unused this long is closed (idle daemons hold none)."""

    @property
    def synchronous(self) -> Literal["normal", "full"]:
        """SQLite's ``synchronous`` setting for ``durability``."""
        return "full" if self.durability == "power" else "normal"


class ToolsConfig(BaseModel):
    """``[tools]``: the built-in tools agents may call (by name in their ``tools``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    calculator: bool = True
    """``calculator``: safe arithmetic."""
    python_sandbox: bool = False
    """``python``: Python in the bubblewrap sandbox (``docs/sandbox.md``)."""
    shell: bool = False
    """``shell``: one bash command per call, in the bubblewrap sandbox, in
    the rollout's own workspace (``docs/sandbox.md``); pair it with
    ``[approvals.shell]`` to approve each command."""
    files_root: Path | None = None
    """``read_file``/``list_directory`` confined to this folder (relative to
    the config file)."""

    def build(self) -> list[Tool]:
        """The enabled tools, new instances."""
        from agentrt.tools.builtins._calculator import Calculator
        from agentrt.tools.builtins._files import file_tools
        from agentrt.tools.builtins._python_sandbox import PythonSandbox
        from agentrt.tools.builtins._shell import ShellTool
        from agentrt.tools.sandbox._workspaces import Workspaces

        tools: list[Tool] = []
        if self.calculator:
            tools.append(Calculator())
        if self.python_sandbox:
            tools.append(PythonSandbox())
        if self.shell:
            tools.append(ShellTool(Workspaces()))
        if self.files_root is not None:
            tools.extend(file_tools(self.files_root))
        return tools


_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class AgentrtConfig(BaseModel):
    """The whole file: ``[server]``, ``[store]``, ``[tools]``, ``log_level``,
    and the runtime's keys (``[models]``, ``[agents]``, ``[mcp]``,
    ``[placement]``, ``rollouts``...) at the top level."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    server: ServerConfig = ServerConfig()
    """Where the daemon listens and who may connect."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """The run store."""
    tools: ToolsConfig = ToolsConfig()
    """Built-in tools."""
    log_level: str = "INFO"
    """Level of the logs on stderr: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``
    or ``CRITICAL``."""
    runtime: RuntimeConfig = RuntimeConfig()
    """Models, agents, MCP servers and scaling defaults (the file's other top-level keys)."""
    source: str = "<defaults>"
    """Where this configuration came from (for error messages)."""

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in _LOG_LEVELS:
            raise ValueError(f"log level {value!r}: expected one of {', '.join(_LOG_LEVELS)}")
        return value.upper()

    @property
    def placement(self) -> PlacementConfig:
        """Where rollouts run (``[placement]``; part of the runtime's configuration)."""
        return self.runtime.placement

    def with_placement(self, kind: str | None, address: str | None) -> AgentrtConfig:
        """A copy with ``--placement``/``--ray-address`` applied (``None``:
        unchanged; an address alone means ``ray``), validated."""
        if kind is None and address is None:
            return self
        if kind == "local" and address is not None:
            raise ConfigError("--ray-address needs the ray placement", where="--placement local")
        given: dict[str, Any] = self.placement.model_dump(exclude_unset=True)
        if kind == "local":
            given = {"kind": "local"}  # the file's Ray keys do not apply
        given["kind"] = kind or ("ray" if address is not None else given.get("kind", "local"))
        if address is not None:
            given["address"] = address
        try:
            placement = PlacementConfig.model_validate(given)
        except ValidationError as error:
            first = _ordered(error)[0]
            key = ".".join(("placement", *(str(p) for p in first["loc"])))
            raise ConfigError(first["msg"], where=f"{self.source}: {key}") from None
        runtime = self.runtime.model_copy(update={"placement": placement})
        return self.model_copy(update={"runtime": runtime})

    def with_server(self, **changes: Any) -> AgentrtConfig:
        """A copy with ``[server]`` keys changed (command-line overrides; ``None``
        values are ignored), validated."""
        given = {k: v for k, v in changes.items() if v is not None}
        try:
            server = ServerConfig.model_validate({**self.server.model_dump(), **given})
        except ValidationError as error:
            first = _ordered(error)[0]
            key = ".".join(("server", *(str(p) for p in first["loc"])))
            raise ConfigError(first["msg"], where=f"{self.source}: {key}") from None
        return self.model_copy(update={"server": server})

    def with_store(self, path: Path | None) -> AgentrtConfig:
        """A copy whose run store is ``path`` (``--store``); ``None``: unchanged."""
        if path is None:
            return self
        return self.model_copy(update={"store": self.store.model_copy(update={"path": path})})


#: Top-level keys that are not the runtime's.
_SECTIONS: Final = frozenset({"server", "store", "tools", "log_level"})


def load_config(path: Path | None) -> AgentrtConfig:
    """Read ``agentrt.toml`` at ``path`` (JSON when it ends in ``.json``);
    ``None``: the defaults (the embedded model, no agents, no MCP servers).

    Relative paths in the file (spec files, ``[store] path``, ``[tools]
    files_root``, ``memory_path``, an MCP server's ``cwd``) are relative to
    the file.  Every problem -- unreadable file, bad syntax, unknown key, bad
    value, unknown backend kind or aggregator, a spec file that is missing or
    invalid -- raises one ``ConfigError`` naming ``file:line: key``."""
    if path is None:
        return config_from_mapping({}, source="<defaults>")
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(
            f"cannot read the configuration: {error.strerror}", where=source
        ) from None
    try:
        text = raw.decode()
    except UnicodeDecodeError as error:
        raise ConfigError(f"not UTF-8: {error.reason}", where=source) from None
    data: Any
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(
                f"not valid JSON: {error.msg}", where=f"{source}:{error.lineno}"
            ) from None
        toml_text = None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise _syntax_error(error, source) from None
        toml_text = text
    return config_from_mapping(data, source=source, base=path.resolve().parent, text=toml_text)


def config_from_mapping(
    data: Mapping[str, Any], *, source: str, base: Path | None = None, text: str | None = None
) -> AgentrtConfig:
    """Validate a parsed file (or a dict built in code).

    ``source`` names it in errors; ``base`` is what relative paths are
    relative to (``None``: left as given); ``text`` is the TOML source, for
    line numbers.  Raises ``ConfigError`` (``source:line: key: reason``)."""
    if not isinstance(data, Mapping):
        raise ConfigError("the configuration must be a table/object", where=source)
    fail = _Failures(source, data, text)
    daemon = {k: v for k, v in data.items() if k in _SECTIONS}
    runtime = {k: v for k, v in data.items() if k not in _SECTIONS}
    if base is not None:
        daemon = _resolve_daemon_paths(daemon, base)
        runtime = _resolve_runtime_paths(runtime, base)
    spec_files: dict[str, Path] = {}
    agents = runtime.get("agents")
    if isinstance(agents, Mapping):
        runtime["agents"] = {
            name: _agent(name, entry, base, fail, spec_files) for name, entry in agents.items()
        }
    try:
        config = AgentrtConfig.model_validate({**daemon, "runtime": runtime, "source": source})
    except ValidationError as error:
        raise fail.validation(error, drop_prefix="runtime") from None
    _check_models(config.runtime, fail)
    _check_aggregate(config.runtime, fail)
    _check_mcp_context(config.runtime, fail)
    for name, spec in spec_files.items():
        try:
            load_spec(spec, servers=config.runtime.mcp)
        except ConfigError as error:
            raise fail.at(("agents", name), f"the spec file is invalid: {error}") from None
    return config


def _check_models(runtime: RuntimeConfig, fail: _Failures) -> None:
    """Each backend's options, checked by its kind (unknown kinds too)."""
    try:
        ModelRegistry(runtime.models, where="models")
    except ConfigError as error:
        key = _split_key(error.where)
        reason = _reason(error)
        extra = "Extra inputs are not permitted"
        if reason.startswith(extra) and key:
            reason = f"unknown key {key[-1]!r}{reason.removeprefix(extra)}"
        raise fail.at(key, reason) from None


def _check_mcp_context(runtime: RuntimeConfig, fail: _Failures) -> None:
    """The MCP servers an inline agent's ``resources`` and ``prompt`` read
    from are configured under ``[mcp]``."""
    configured = ", ".join(runtime.mcp) or "none"
    for name, agent in runtime.agents.items():
        if not isinstance(agent, AgentConfig):
            continue
        named: list[tuple[Key, str]] = [
            (("agents", name, "resources", index, "mcp"), attached.mcp)
            for index, attached in enumerate(agent.resources)
        ]
        if agent.prompt is not None:
            named.append((("agents", name, "prompt", "mcp"), agent.prompt.mcp))
        for key, server in named:
            if server not in runtime.mcp:
                raise fail.at(
                    key, f"no MCP server named {server!r} under [mcp] (configured: {configured})"
                )


def _check_aggregate(runtime: RuntimeConfig, fail: _Failures) -> None:
    """The default aggregator exists and takes its options."""
    try:
        parse_config({**runtime.aggregate_options, "name": runtime.aggregate}, "aggregate")
    except ConfigError as error:
        key = ("aggregate",) if error.where == "aggregate.name" else ("aggregate_options",)
        raise fail.at(key, _reason(error)) from None


def _agent(
    name: str, entry: Any, base: Path | None, fail: _Failures, spec_files: dict[str, Path]
) -> AgentConfig | str:
    """One ``[agents]`` entry: an inline table, validated here so that errors
    name its keys, or a spec file path (resolved; it must exist)."""
    key: Key = ("agents", name)
    if isinstance(entry, Mapping):
        given = entry.get("name", name)
        if given != name:
            raise fail.at((*key, "name"), f"differs from its key {name!r}; drop it or match it")
        try:
            return AgentConfig.model_validate({**entry, "name": name})
        except ValidationError as error:
            raise fail.validation(error, prefix=key, model=AgentConfig) from None
    if isinstance(entry, str):
        file_part, sep, unit = entry.partition("#")
        spec = Path(file_part).expanduser()
        if base is not None:
            spec = base / spec
        if not spec.is_file():
            raise fail.at(key, f"no spec file {file_part!r} (looked for {spec})")
        spec_files[name] = Path(f"{spec}{sep}{unit}")
        return f"{spec}{sep}{unit}"
    raise fail.at(
        key,
        "an agent is a table ([agents.NAME] with an agent's keys) or the path of a "
        f"YAML spec file, got {type(entry).__name__}",
    )


def _resolve_daemon_paths(daemon: dict[str, Any], base: Path) -> dict[str, Any]:
    store = daemon.get("store")
    if isinstance(store, Mapping) and isinstance(store.get("path"), str):
        daemon["store"] = {**store, "path": str(base / Path(store["path"]).expanduser())}
    tools = daemon.get("tools")
    if isinstance(tools, Mapping) and isinstance(tools.get("files_root"), str):
        root = Path(tools["files_root"]).expanduser()
        daemon["tools"] = {**tools, "files_root": str(base / root)}
    return daemon


def _resolve_runtime_paths(runtime: dict[str, Any], base: Path) -> dict[str, Any]:
    if isinstance(runtime.get("memory_path"), str):
        runtime["memory_path"] = str(base / Path(runtime["memory_path"]).expanduser())
    servers = runtime.get("mcp")
    if isinstance(servers, Mapping):
        runtime["mcp"] = {
            name: (
                {**server, "cwd": str(base / Path(server["cwd"]).expanduser())}
                if isinstance(server, Mapping) and isinstance(server.get("cwd"), str)
                else server
            )
            for name, server in servers.items()
        }
    return runtime


# -- errors: file, line, key ---------------------------------------------------------


class _Failures:
    """Builds the ``ConfigError`` of one file: ``source:line: key: reason``."""

    def __init__(self, source: str, data: Mapping[str, Any], text: str | None) -> None:
        self.source = source
        self.data = data
        self.text = text

    def at(self, key: Key, reason: str) -> ConfigError:
        dotted = ".".join(str(part) for part in key)
        line = key_line(self.text, key) if self.text is not None and key else None
        place = self.source if line is None else f"{self.source}:{line}"
        return ConfigError(reason, where=f"{place}: {dotted}" if dotted else place)

    def validation(
        self,
        error: ValidationError,
        *,
        prefix: Key = (),
        drop_prefix: str | None = None,
        model: type[BaseModel] = AgentrtConfig,
    ) -> ConfigError:
        problems = _ordered(error)
        first = problems[0]
        loc = tuple(first["loc"])
        flattened = drop_prefix is not None and loc[:1] == (drop_prefix,)
        if flattened:
            loc = loc[1:]
            model = RuntimeConfig
        key = _data_key((*prefix, *loc), self.data)
        reason = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            reason = _unknown_key(key, model, len(prefix), flattened)
        more = len(problems) - 1
        if more:
            reason += f" (and {more} more problem{'s' if more > 1 else ''})"
        return self.at(key, reason)


def _ordered(error: ValidationError) -> list[ErrorDetails]:
    """Unknown keys first: a misspelt key also makes the right one missing."""
    problems = error.errors()
    return sorted(problems, key=lambda p: p["type"] != "extra_forbidden")


def _data_key(loc: Sequence[str | int], data: Any) -> Key:
    """``loc`` as the file spells it: the parts pydantic adds for union members
    (``stdio``, ``AgentConfig``...) are not keys of the file and are dropped."""
    key: list[str | int] = []
    node = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_list or (isinstance(node, Mapping) and part in node):
            key.append(part)
            node = node[part]
        elif last and isinstance(node, Mapping):
            key.append(part)  # a missing key, or one the file lacks on purpose
        elif not isinstance(node, Mapping | list):
            break  # the rest names union members of a scalar
    return tuple(key)


def _unknown_key(key: Key, model: type[BaseModel], offset: int, flattened: bool) -> str:
    """``unknown key 'x'``, with the closest known one when there is one."""
    name = str(key[-1])
    known = _known_keys(model, key[offset:-1], flattened)
    close = difflib.get_close_matches(name, known, n=1) if known else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {name!r}{hint}"


def _known_keys(model: type[BaseModel], path: Key, flattened: bool) -> list[str]:
    """The keys a table at ``path`` under ``model`` may hold (best effort)."""
    if flattened and not path:
        top = [k for k in AgentrtConfig.model_fields if k not in ("runtime", "source")]
        return [*top, *RuntimeConfig.model_fields]
    current: Any = model
    for part in path:
        fields = _model_of(current)
        if fields is None:
            current = _value_type(current)  # a dict's key
        elif isinstance(part, str) and part in fields.model_fields:
            current = fields.model_fields[part].annotation
        else:
            return []
    found = _model_of(current)
    return list(found.model_fields) if found is not None else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            found = _model_of(member)
            if found is not None:
                return found
    return None


def _value_type(annotation: Any) -> Any:
    """``X`` of ``dict[str, X]`` (through ``Annotated``); ``None`` otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _value_type(typing.get_args(annotation)[0])
    if origin is dict:
        return typing.get_args(annotation)[1]
    return None


def _split_key(where: str) -> Key:
    return tuple(part for part in where.split(".") if part)


def _reason(error: ConfigError) -> str:
    return str(error).removeprefix(f"{error.where}: ") if error.where else str(error)


_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def _syntax_error(error: tomllib.TOMLDecodeError, source: str) -> ConfigError:
    message = str(error)
    found = _AT_LINE.search(message)
    if found is None:
        return ConfigError(f"not valid TOML: {message}", where=source)
    line, column = found.groups()
    reason = message[: found.start()]
    return ConfigError(f"not valid TOML: {reason} (column {column})", where=f"{source}:{line}")


# -- where a key is written -----------------------------------------------------------

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_BASIC = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LITERAL = re.compile(r"'([^']*)'")


def key_line(text: str, key: Sequence[str | int]) -> int | None:
    """The 1-based line where TOML ``text`` writes ``key`` (``("models",
    "backends", "vllm", "kind")``): its assignment or table header; else the
    line of the longest enclosing key that is written (a key inside an inline
    table or an array is on its parent's line); ``None`` if none is."""
    written, implied = _key_lines(text)
    parts = tuple(key)
    for length in range(len(parts), 0, -1):
        prefix = parts[:length]
        if prefix in written:
            return written[prefix]
        if prefix in implied:
            return implied[prefix]
    return None


def _key_lines(text: str) -> tuple[dict[Key, int], dict[Key, int]]:
    """Every written key's line (assignments and headers, first one wins), and
    the line of keys only implied by a dotted one (``[a.b]`` implies ``a``)."""
    written: dict[Key, int] = {}
    implied: dict[Key, int] = {}
    arrays: dict[Key, int] = {}  # array-of-tables path -> index of its last element
    table: Key = ()
    scanner = _ValueScanner()
    for number, line in enumerate(text.splitlines(), start=1):
        if scanner.open:  # inside a multi-line string or array
            scanner.scan(line)
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        is_array = stripped.startswith("[[")
        if stripped.startswith("["):
            parsed = _dotted(stripped, 2 if is_array else 1)
            if parsed is None:
                continue
            path = _within_arrays(parsed[0], arrays)
            if is_array:
                arrays[path] = arrays.get(path, -1) + 1
                path = (*path, arrays[path])
            table = path
            written.setdefault(path, number)
        else:
            parsed = _dotted(stripped, 0)
            if parsed is None:
                continue
            parts, rest = parsed
            path = (*table, *parts)
            written.setdefault(path, number)
            scanner.scan(rest)
        for length in range(1, len(path)):
            implied.setdefault(path[:length], number)
    return written, implied


def _within_arrays(parts: tuple[str, ...], arrays: dict[Key, int]) -> Key:
    """A header's path with the index of each array of tables it goes through
    (``[fruit.variety]`` after ``[[fruit]]`` is ``fruit.<last>.variety``)."""
    path: list[str | int] = []
    for part in parts:
        path.append(part)
        index = arrays.get(tuple(path))
        if index is not None and len(path) < len(parts):
            path.append(index)
    return tuple(path)


def _dotted(line: str, brackets: int) -> tuple[tuple[str, ...], str] | None:
    """The dotted key at the start of ``line`` (after ``brackets`` opening
    brackets) and what follows its ``=`` or closing brackets."""
    position = brackets
    parts: list[str] = []
    while True:
        while position < len(line) and line[position] in " \t":
            position += 1
        for pattern in (_BARE, _BASIC, _LITERAL):
            match = pattern.match(line, position)
            if match is not None:
                parts.append(match.group(1) if match.re is not _BARE else match.group(0))
                position = match.end()
                break
        else:
            return None
        while position < len(line) and line[position] in " \t":
            position += 1
        if position < len(line) and line[position] == ".":
            position += 1
            continue
        end = "]" * brackets if brackets else "="
        if not line.startswith(end, position):
            return None
        return tuple(parts), line[position + len(end) :]


class _ValueScanner:
    """Tracks whether a value goes on past its line: an open multi-line
    string (``\"\"\"``, ``'''``) or an open array / inline table."""

    def __init__(self) -> None:
        self.string: str | None = None
        self.depth = 0

    @property
    def open(self) -> bool:
        return self.string is not None or self.depth > 0

    def scan(self, text: str) -> None:
        position = 0
        while position < len(text):
            if self.string is not None:
                end = self._string_end(text, position, self.string)
                if end is None:
                    return
                position, self.string = end, None
                continue
            char = text[position]
            if char == "#":
                return
            if text.startswith(('"""', "'''"), position):
                self.string = text[position : position + 3]
                position += 3
            elif char in "\"'":
                end = self._string_end(text, position + 1, char)
                position = len(text) if end is None else end
            else:
                if char in "[{":
                    self.depth += 1
                elif char in "]}":
                    self.depth = max(0, self.depth - 1)
                position += 1

    @staticmethod
    def _string_end(text: str, position: int, quote: str) -> int | None:
        """Where the string closed by ``quote`` ends (after it), or ``None``."""
        escapes = quote.startswith('"')
        while position < len(text):
            if escapes and text[position] == "\\":
                position += 2
                continue
            if text.startswith(quote, position):
                return position + len(quote)
            position += 1
        return None
