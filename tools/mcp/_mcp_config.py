"""User configuration of MCP client connections (pydantic).

Owns the ``mcp`` section of agentrt's configuration: one entry per server,
over stdio (``command``, ``args``, ``env``, ``cwd``) or streamable HTTP
(``url``, ``headers``, bearer token), with its timeouts, its restart
backoff and the tool definitions the user approved (``approved``: tool name
-> sha256 of its definition, the rug-pull defence of ``pinning``).
``parse_server_spec`` turns a command-line ``--mcp "CMD ARGS"`` or
``--mcp URL`` into an entry.

Pure data and validation: no I/O, no SDK imports.  Must not import agents
or aggregators.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    field_validator,
    model_validator,
)

from agentrt.runtime.kernel._backoff import Backoff
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools.mcp._auth_config import McpAuthConfig

__all__ = [
    "SERVER_NAME_PATTERN",
    "ElicitationPolicy",
    "HttpServerConfig",
    "McpServerConfig",
    "PromptPolicy",
    "ResourcePolicy",
    "RestartPolicy",
    "SamplingPolicy",
    "StdioServerConfig",
    "TaskPolicy",
    "parse_server_spec",
]

#: A server name: it prefixes every tool name the server offers, so it must
#: fit OpenAI function names (``^[a-zA-Z0-9_-]{1,64}$``) and must not contain
#: the ``__`` separator.
SERVER_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class RestartPolicy(BaseModel):
    """How a connection that died is brought back: exponential backoff, and
    a limit on failures in a row after which the server is given up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_delay_s: float = Field(default=0.5, gt=0)
    """Wait before the first restart attempt."""
    max_delay_s: float = Field(default=30.0, gt=0)
    """The backoff never waits longer than this."""
    multiplier: float = Field(default=2.0, ge=1.0)
    """Each failure in a row multiplies the wait by this."""
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    """Random extra fraction of the wait, so many clients do not restart in step."""
    max_failures: int = Field(default=8, ge=1)
    """Deaths or failed reconnects in a row before the server is marked failed."""
    stable_after_s: float = Field(default=30.0, gt=0)
    """A session that lived this long resets the failure count."""

    def backoff(self) -> Backoff:
        """The restart policy these fields describe (the actor floor's one
        implementation does the arithmetic)."""
        return Backoff(
            initial_s=self.initial_delay_s,
            max_s=self.max_delay_s,
            multiplier=self.multiplier,
            jitter=self.jitter,
            reset_after_s=self.stable_after_s,
            max_restarts=self.max_failures - 1,
        )


class ElicitationPolicy(BaseModel):
    """How a server's ``elicitation/create`` (a question for the user) is
    answered."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["decline", "defaults", "ask"] = "decline"
    """``decline``: answer "declined" without asking anyone; ``defaults``:
    accept with each field's schema default (and ``values``), declining when
    a required field has neither; ``ask``: ask the person behind the run
    (the embedding's callback, or the daemon's run event answered through
    its REST API), declining when nobody can be asked."""
    values: dict[str, Any] = Field(default_factory=dict)
    """Answers by field name, used by ``defaults`` before the schema's own."""
    url: Literal["decline", "ask"] = "decline"
    """URL-mode elicitations (open a link in a browser): decline them, or
    hand the link to the person behind the run (``ask``)."""
    timeout_s: float = Field(default=600.0, gt=0)
    """How long a person is waited for before the question is cancelled."""


class SamplingPolicy(BaseModel):
    """Whether and how a server's ``sampling/createMessage`` is served by
    agentrt's models, charged to the run whose tool call asked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["deny", "allow"] = "deny"
    """``deny`` refuses every request (an MCP error the server sees);
    ``allow`` serves it under the limits below."""
    models: list[str] = Field(default_factory=list)
    """Models the server may be given (it picks by its hints among them);
    empty: the runtime's default model only."""
    max_tokens: int = Field(default=1024, ge=1)
    """Cap on the completion tokens of one request (a larger ask is cut)."""


class ResourcePolicy(BaseModel):
    """What agents get of the server's resources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: bool = False
    """Offer the model three tools, ``<server>__resources_list``,
    ``<server>__resources_templates_list`` and ``<server>__resources_read``
    (one page per call, with a cursor for the next), when the server has
    resources."""
    max_chars: int = Field(default=20_000, ge=1)
    """A read shows the model at most this many characters of text (the
    rest is cut, saying how much); binary contents are never inlined, only
    named (URI, MIME type, size)."""


class PromptPolicy(BaseModel):
    """What agents get of the server's prompts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: bool = False
    """Offer the model ``<server>__prompts_list`` (one page per call, with
    a cursor for the next) and ``<server>__prompts_get`` (a prompt's
    messages, filled in with its arguments), when the server has prompts."""


class TaskPolicy(BaseModel):
    """Task-augmented tool calls (MCP tasks): for tools that declare
    ``taskSupport: required`` (and, with ``prefer``, ``optional``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefer: bool = False
    """Also run tools whose task support is ``optional`` as tasks."""
    deadline_s: float = Field(default=900.0, gt=0)
    """A task's own deadline (it outlives the model's step timeout, not
    this); past it the task is cancelled."""
    poll_interval_s: float = Field(default=1.0, gt=0)
    """Polling interval when the server suggests none."""


class _ServerBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SERVER_NAME_PATTERN)
    """The server's name; its tools are offered as ``<name>__<tool>``."""
    connect_timeout_s: float = Field(default=60.0, gt=0)
    """Deadline for starting the server and the MCP handshake (``npx -y``
    may download the package on first use)."""
    call_timeout_s: float = Field(default=120.0, gt=0)
    """Deadline for one tool call (a caller's shorter deadline wins); on
    expiry the server is sent an MCP cancellation."""
    request_timeout_s: float = Field(default=30.0, gt=0)
    """Deadline for other requests: listings, resource reads, pings."""
    keepalive_s: float | None = Field(default=None, gt=0)
    """Ping the server this often (seconds) while connected, so a session
    it lost (an HTTP server that restarted and forgot it, a server that
    stopped answering) is found and replaced before a call needs it; None
    sends no pings."""
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    """Backoff for bringing back a server that died."""
    approved: dict[str, str] = Field(default_factory=dict)
    """Approved tool definitions: tool name (as the server names it) ->
    sha256 hex of its canonical definition.  A tool whose definition no
    longer hashes to its approved (or first-seen) value is blocked until its
    new hash is approved here."""
    new_tools: Literal["trust", "block"] = "trust"
    """A tool never seen before: ``trust`` pins it on first sight
    (trust on first use); ``block`` offers it only once approved here."""
    log_level: LogLevel | None = None
    """Ask the server for log messages at this level and above; None keeps
    the server's default."""
    required: bool = True
    """A required server must start (within ``connect_timeout_s``): the
    ``Runtime`` that cannot start it fails to open, saying why.  An
    optional one starts in the background without delaying the open, and
    its tools join the runs that begin once it is ready."""
    elicitation: ElicitationPolicy = Field(default_factory=ElicitationPolicy)
    """How the server's questions for the user are answered."""
    sampling: SamplingPolicy = Field(default_factory=SamplingPolicy)
    """Whether the server may ask agentrt's models to sample."""
    roots: list[Path] = Field(default_factory=list)
    """Folders offered to the server as roots (``roots/list``); with
    ``per_rollout``, each rollout's connection offers its workspace too."""
    per_rollout: bool = False
    """One connection (one server process, or one HTTP session) per
    rollout instead of one shared by every run: started when the rollout
    first calls the server, closed when the rollout ends, offering as roots
    exactly that rollout's workspace (the ``shell``'s and ``editor``'s
    directory) besides ``roots``, so the server sees no other rollout's
    files.  The shared connection still lists the tools and serves calls
    that belong to no rollout, with ``roots`` only."""
    workspace_root: Path | None = None
    """Where the rollouts' workspaces are (``per_rollout`` only): the
    ``Workspaces`` root of the tools that write them; default
    ``$TMPDIR/agentrt-workspaces``, the built-in ``shell``'s and ``editor``'s."""
    destructive: Literal["allow", "approve", "refuse"] = "allow"
    """Tools annotated ``destructiveHint`` (and not ``readOnlyHint``):
    call them, ask the person behind the run to approve each call, or
    refuse them (they are not offered)."""
    tasks: TaskPolicy = Field(default_factory=TaskPolicy)
    """Task-augmented calls of long-running tools."""
    resources: ResourcePolicy = Field(default_factory=ResourcePolicy)
    """The server's resources as tools of the model, and how much of a read it sees."""
    prompts: PromptPolicy = Field(default_factory=PromptPolicy)
    """The server's prompts as tools of the model."""

    @field_validator("name")
    @classmethod
    def _no_separator(cls, value: str) -> str:
        if "__" in value:
            raise ValueError(f"server name {value!r} must not contain '__' (the tool separator)")
        return value

    @model_validator(mode="after")
    def _workspace_root_needs_per_rollout(self) -> Self:
        if self.workspace_root is not None and not self.per_rollout:
            raise ValueError(
                "workspace_root is only read with per_rollout = true "
                "(a shared connection offers no rollout's workspace)"
            )
        return self

    @field_validator("approved")
    @classmethod
    def _hashes(cls, value: dict[str, str]) -> dict[str, str]:
        cleaned: dict[str, str] = {}
        for tool, digest in value.items():
            hexpart = digest.removeprefix("sha256:").lower()
            if not _SHA256_HEX.match(hexpart):
                raise ValueError(
                    f"approved[{tool!r}] must be a sha256 hex digest (64 hex digits), "
                    f"got {digest!r}"
                )
            cleaned[tool] = hexpart
        return cleaned


class StdioServerConfig(_ServerBase):
    """An MCP server the runtime starts as a subprocess and talks to over
    its stdin/stdout."""

    transport: Literal["stdio"] = "stdio"
    """Discriminator."""
    command: str = Field(min_length=1)
    """The executable, looked up on PATH (e.g. ``npx``)."""
    args: list[str] = Field(default_factory=list)
    """Its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables, over the SDK's safe default set
    (HOME, LOGNAME, PATH, SHELL, TERM, USER)."""
    cwd: Path | None = None
    """Working directory of the server; the runtime's when None."""

    def describe(self) -> str:
        """The command line, for messages."""
        return shlex.join([self.command, *self.args])


class HttpServerConfig(_ServerBase):
    """An MCP server reached over streamable HTTP."""

    transport: Literal["http"] = "http"
    """Discriminator."""
    url: str = Field(pattern=r"^https?://")
    """The MCP endpoint, e.g. ``http://127.0.0.1:8000/mcp``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request."""
    bearer_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer ...``; never logged."""
    bearer_token_env: str | None = None
    """Read the bearer token from this environment variable when connecting."""
    sse_read_timeout_s: float = Field(default=300.0, gt=0)
    """How long an open SSE stream may stay silent."""
    auth: McpAuthConfig | None = None
    """OAuth (``[mcp.NAME.auth]``): discovery, registration, the
    authorization-code or client-credentials flow, refresh and step-up;
    see docs/mcp-auth.md.  Not with ``bearer_token``."""

    @model_validator(mode="after")
    def _one_token_source(self) -> HttpServerConfig:
        if self.bearer_token is not None and self.bearer_token_env is not None:
            raise ValueError("set bearer_token or bearer_token_env, not both")
        if self.auth is not None and (
            self.bearer_token is not None
            or self.bearer_token_env is not None
            or any(k.lower() == "authorization" for k in self.headers)
        ):
            raise ValueError("auth (OAuth) and a bearer token or Authorization header both given")
        if self.bearer_token is not None and any(
            k.lower() == "authorization" for k in self.headers
        ):
            raise ValueError("bearer_token and an Authorization header both given")
        return self

    def describe(self) -> str:
        """The URL, for messages."""
        return self.url

    def authorization_wait_s(self) -> float:
        """How much longer than ``connect_timeout_s`` a start may take while a
        person approves access (``auth`` with the authorization code flow)."""
        return self.auth.authorization_timeout_s if self.auth and self.auth.interactive else 0.0

    def http_headers(self) -> dict[str, str]:
        """Headers for every request, including the bearer token if any.

        Raises ``ConfigError`` when ``bearer_token_env`` names an unset variable."""
        headers = dict(self.headers)
        token: str | None = None
        if self.bearer_token is not None:
            token = self.bearer_token.get_secret_value()
        elif self.bearer_token_env is not None:
            token = os.environ.get(self.bearer_token_env)
            if not token:
                raise ConfigError(
                    f"environment variable {self.bearer_token_env!r} (the bearer token) is not set",
                    where=f"mcp server {self.name!r}: bearer_token_env",
                )
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return headers


def _transport_of(value: Any) -> str:
    if isinstance(value, dict):
        given = value.get("transport")
        if given is not None:
            return str(given)
        return "http" if "url" in value and "command" not in value else "stdio"
    return str(getattr(value, "transport", "stdio"))


McpServerConfig = Annotated[
    Annotated[StdioServerConfig, Tag("stdio")] | Annotated[HttpServerConfig, Tag("http")],
    Discriminator(_transport_of),
]
"""One server entry: ``transport: stdio`` or ``transport: http``; without
``transport``, an entry with a ``url`` and no ``command`` is HTTP."""


def _derive_name(words: list[str]) -> str:
    """A server name from a command line: the package or script it runs."""
    skip = {"npx", "uvx", "node", "python", "python3", "-y", "--yes", "-m", "pipx", "run", "bunx"}
    candidates = [w for w in words if w not in skip and not w.startswith("-")]
    base = candidates[0] if candidates else words[0]
    base = base.rsplit("/", 1)[-1].split("@", 1)[0] or base  # @scope/pkg@1.2 -> pkg
    base = base.removeprefix("server-").removeprefix("mcp-server-").removesuffix(".py")
    name = re.sub(r"[^A-Za-z0-9-]+", "-", base).strip("-")[:32] or "mcp"
    if not name[0].isalnum():
        name = "mcp-" + name
    return name[:32]


def parse_server_spec(
    spec: str, *, name: str | None = None
) -> StdioServerConfig | HttpServerConfig:
    """A server entry from a command-line spec, ``[NAME=]URL`` or
    ``[NAME=]COMMAND ARGS``: a URL becomes a streamable HTTP server,
    anything else a stdio command line (split like a shell).  The name,
    unless given (as ``name`` or ``NAME=``), is derived from the URL's host
    or the package the command runs (``npx -y
    @modelcontextprotocol/server-everything`` -> ``everything``)."""
    spec = spec.strip()
    named = re.match(r"^([A-Za-z0-9][A-Za-z0-9_-]{0,31})=(?=\S)", spec)
    if named is not None:
        name = name or named.group(1)
        spec = spec[named.end() :]
    if not spec:
        raise ConfigError("an empty MCP server spec", where="--mcp")
    if re.match(r"^https?://", spec):
        host = re.sub(r"^https?://", "", spec).split("/", 1)[0].split(":", 1)[0]
        derived = re.sub(r"[^A-Za-z0-9-]+", "-", host).strip("-")[:24] or "http"
        if not derived[0].isalnum():
            derived = "h" + derived
        digest = hashlib.sha256(spec.encode()).hexdigest()[:6]
        return HttpServerConfig(name=name or f"{derived}-{digest}"[:32], url=spec)
    try:
        words = shlex.split(spec)
    except ValueError as exc:
        raise ConfigError(f"cannot split MCP command {spec!r}: {exc}", where="--mcp") from exc
    return StdioServerConfig(name=name or _derive_name(words), command=words[0], args=words[1:])
