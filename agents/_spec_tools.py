"""Spec models shared by every unit: the base model and the tool bindings.

Owns ``SpecModel`` (the base of every spec model: frozen, and an unknown key
is an ``unknown_key`` error naming the key and the closest allowed one),
``NAME_PATTERN`` (agent, pipeline and tool names), and the entries of an
agent's ``tools``: ``BuiltinTool`` (``calculator``, ``python``,
``read_file``, ``list_directory``), ``PythonTool`` (``"pkg.mod:fn"``) and
``McpTools`` (a server by name, or inline), told apart by ``ToolBinding``'s
discriminator, with the string shorthands; and ``McpServers``, a file's
``mcp_servers`` section (each entry named by its key; ``transport``
defaults to ``http`` when a ``url`` is given, else ``stdio``).

Pure configuration.  May import the MCP configuration models; never
aggregators or the roof.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentrt.tools._approval import ApprovalPolicy
from agentrt.tools.mcp._mcp_config import McpServerConfig
from agentrt.tools.mcp._resources import expand_template

#: Agent, pipeline and stage names become tool names: what model APIs accept.
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

BuiltinName = Literal["calculator", "python", "read_file", "list_directory", "shell", "editor"]
FILE_TOOLS: tuple[BuiltinName, ...] = ("read_file", "list_directory")
#: The built-ins that run commands in the sandbox.
SANDBOXED_COMMANDS: tuple[BuiltinName, ...] = ("python", "shell")


def check_keys(cls: type[BaseModel], data: Any) -> None:
    """An unknown key is an error naming it, with the closest allowed key."""
    if not isinstance(data, Mapping):
        return
    allowed = list(cls.model_fields)
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            raise PydanticCustomError(
                "unknown_key",
                "unknown key {quoted}{hint}; allowed: {allowed}",
                {
                    "key": str(key),
                    "quoted": repr(str(key)),
                    "hint": f" (did you mean {close[0]!r}?)" if close else "",
                    "allowed": ", ".join(allowed),
                },
            )


class SpecModel(BaseModel):
    """Base of the spec models: frozen, and an unknown key is an error
    naming it with the closest allowed key (``unknown_key``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        data = cls._shorthand(data)
        check_keys(cls, data)
        return data

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """A short form (a plain string) as the mapping it stands for."""
        return data


def _approval_shorthand(value: Any) -> Any:
    """``approval: true`` asks with the defaults, ``false`` not at all; a
    mapping's unknown key is an error naming the closest allowed one."""
    if value is True:
        return {}
    if value is False:
        return None
    check_keys(ApprovalPolicy, value)
    return value


Approval = Annotated[ApprovalPolicy | None, BeforeValidator(_approval_shorthand)]
"""A binding's ``approval``: ``true``, or ``{timeout_s: ..., message: ...}``
(as ``[approvals.TOOL]``)."""


class BuiltinTool(SpecModel):
    """A built-in tool: ``calculator``, ``python`` (sandboxed), ``shell``
    and ``editor`` (sandboxed, in the rollout's workspace), ``read_file`` or
    ``list_directory`` (confined to ``root``).  A plain string is short
    for ``{builtin: NAME}``."""

    builtin: BuiltinName
    """Which built-in."""
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    """Offer it under another name."""
    root: str | None = None
    """For the file tools: the directory they are confined to, relative to
    the spec file's directory (default: that directory)."""
    network: bool = False
    """For ``python`` and ``shell``: let sandboxed commands use the network
    (default: none)."""
    read_only_paths: tuple[str, ...] = ()
    """For ``python`` and ``shell``: more host directories (absolute paths)
    sandboxed commands see read-only at the same path: a virtualenv, a
    toolchain."""
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    """For ``python`` and ``shell``: the limit of one command (default: the
    agent's ``limits.tool_timeout_s``)."""
    approval: Approval = None
    """Every call waits for the approval of the person behind the run:
    ``true``, or ``{timeout_s: 600, message: ...}`` (as ``[approvals.TOOL]``);
    a denied or unanswered call does not run, and the model reads why."""

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"builtin": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _root_for_file_tools(self) -> Self:
        if self.root is not None and self.builtin not in FILE_TOOLS:
            raise ValueError(f"`root` applies to {' and '.join(FILE_TOOLS)} only")
        for key in ("network", "read_only_paths", "timeout_s"):
            if getattr(self, key) and self.builtin not in SANDBOXED_COMMANDS:
                raise ValueError(f"`{key}` applies to python and shell only")
        for path in self.read_only_paths:
            if not path.startswith("/"):
                raise ValueError(f"read_only_paths: {path!r} is not an absolute path")
        return self


class PythonTool(SpecModel):
    """A Python function (or ``Tool`` object) bound by import path,
    ``"pkg.mod:fn"``; a plain string containing ``:`` is short for
    ``{python: TARGET}``.  A module not importable from ``sys.path`` is
    looked for next to the spec file."""

    python: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    """``module.path:attribute`` (the attribute may be dotted)."""
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    """The tool's name (default: the function's name)."""
    description: str | None = None
    """The tool's description (default: the docstring's first paragraph)."""
    approval: Approval = None
    """Every call waits for the approval of the person behind the run:
    ``true``, or ``{timeout_s: 600, message: ...}`` (as ``[approvals.TOOL]``);
    a denied or unanswered call does not run, and the model reads why."""

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"python": data} if isinstance(data, str) else data


def _default_transport(data: Any) -> Any:
    if isinstance(data, Mapping) and "transport" not in data:
        return {**data, "transport": "http" if "url" in data else "stdio"}
    return data


InlineServer = Annotated[McpServerConfig, BeforeValidator(_default_transport)]


def _server_ref_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "server-name"
    return "inline-server" if isinstance(value, Mapping | BaseModel) else None


class McpTools(SpecModel):
    """The tools of an MCP server: ``{mcp: NAME}`` (a server of the file's
    ``mcp_servers``) or ``{mcp: {name: ..., command: ...}}`` (inline)."""

    mcp: Annotated[
        Annotated[str, Tag("server-name")] | Annotated[InlineServer, Tag("inline-server")],
        Discriminator(
            _server_ref_kind,
            custom_error_type="mcp_server",
            custom_error_message="`mcp` is a server name or a server mapping",
        ),
    ]
    """The server."""
    tools: list[str] | None = None
    """Only these of its tools (as the server names them); ``None``: all."""
    approval: Approval = None
    """Every call of each of its tools waits for the approval of the person behind the run:
    ``true``, or ``{timeout_s: 600, message: ...}`` (as ``[approvals.TOOL]``);
    a denied or unanswered call does not run, and the model reads why."""

    @property
    def server_name(self) -> str:
        return self.mcp if isinstance(self.mcp, str) else self.mcp.name


class ResourceAttachment(SpecModel):
    """A resource of an MCP server shown to the agent at every step (after
    the history): ``{mcp: NAME, uri: ...}`` or ``{mcp: NAME, template: ...,
    arguments: {...}}``.  Read when the first step needs it, and read again
    whenever the server says it changed (a subscription)."""

    mcp: str = Field(min_length=1)
    """The server (of ``mcp_servers``, or the configuration's ``[mcp]``)."""
    uri: str | None = None
    """The resource's URI."""
    template: str | None = None
    """A resource URI template of the server (RFC 6570, e.g.
    ``demo://resource/dynamic/text/{resourceId}``), filled in with ``arguments``."""
    arguments: dict[str, str] = Field(default_factory=dict)
    """The template's variables."""

    @model_validator(mode="after")
    def _one_resource(self) -> Self:
        if (self.uri is None) == (self.template is None):
            raise ValueError("give `uri` or `template` (with `arguments`), not both or neither")
        if self.uri is not None and self.arguments:
            raise ValueError("`arguments` fill a `template`; a `uri` takes none")
        if self.template is not None:
            try:
                expand_template(self.template, self.arguments)
            except KeyError as exc:
                raise ValueError(
                    f"template {self.template!r} needs an argument {exc.args[0]!r}"
                ) from None
        return self

    @property
    def resolved_uri(self) -> str:
        """The URI to read: ``uri``, or ``template`` filled in."""
        if self.template is not None:
            return expand_template(self.template, self.arguments)
        return self.uri or ""


class PromptStartSpec(SpecModel):
    """An MCP prompt a rollout starts from: ``{mcp: NAME, name: PROMPT,
    arguments: {...}, complete: [ARG, ...]}``."""

    mcp: str = Field(min_length=1)
    """The server (of ``mcp_servers``, or the configuration's ``[mcp]``)."""
    name: str = Field(min_length=1)
    """The prompt's name on the server."""
    arguments: dict[str, str] = Field(default_factory=dict)
    """The prompt's arguments."""
    complete: list[str] = Field(default_factory=list)
    """Arguments whose given value is completed by the server first (its
    first ``completion/complete`` suggestion, in this order, each with the
    arguments before it as context)."""


def _tool_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "python-tool" if ":" in value else "builtin-tool"
    if isinstance(value, Mapping):
        for key, tag in (
            ("builtin", "builtin-tool"),
            ("python", "python-tool"),
            ("mcp", "mcp-tool"),
        ):
            if key in value:
                return tag
    tags: dict[type[BaseModel], str] = {
        BuiltinTool: "builtin-tool",
        PythonTool: "python-tool",
        McpTools: "mcp-tool",
    }
    return tags.get(type(value))


ToolBinding = Annotated[
    Annotated[BuiltinTool, Tag("builtin-tool")]
    | Annotated[PythonTool, Tag("python-tool")]
    | Annotated[McpTools, Tag("mcp-tool")],
    Discriminator(
        _tool_kind,
        custom_error_type="tool_binding",
        custom_error_message=(
            "a tool is a built-in name, a Python binding 'pkg.mod:fn', or a mapping with "
            "`builtin`, `python` or `mcp`"
        ),
    ),
]
"""One entry of an agent's ``tools``."""


def _name_servers(data: Any) -> Any:
    """``mcp_servers: {NAME: {...}}``: each entry's name is its key."""
    if not isinstance(data, Mapping):
        return data
    named: dict[Any, Any] = {}
    for key, entry in data.items():
        named[key] = (
            _default_transport({"name": key, **entry}) if isinstance(entry, Mapping) else entry
        )
    return named


McpServers = Annotated[dict[str, InlineServer], BeforeValidator(_name_servers)]
"""A file's ``mcp_servers`` section."""


__all__ = [
    "FILE_TOOLS",
    "NAME_PATTERN",
    "Approval",
    "BuiltinName",
    "BuiltinTool",
    "InlineServer",
    "McpServers",
    "McpTools",
    "PromptStartSpec",
    "PythonTool",
    "ResourceAttachment",
    "SpecModel",
    "ToolBinding",
    "check_keys",
]
