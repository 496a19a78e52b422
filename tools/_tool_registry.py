"""The tool registry: the set of tools one agent may call, by name.

Owns ``ToolRegistry``: registration (a name taken twice is a clear error),
lookup, the specs offered to the model in a stable order (sorted by name, so
the tool block of every prompt is byte-identical across steps and rollouts
and servers can reuse their prefix cache), and ``call``, which validates the
arguments once (against the tool's JSON schema, unless the tool validates
them itself) and turns every failure the model can act on (an unknown tool,
bad arguments, a ``ToolError``, a timeout, a bug in a tool) into an error
``ToolOutput`` instead of an exception.

Imports protocols, the runtime floor and the tools base; never agents or
aggregators.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast, final

import anyio

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ConfigError, InvalidRequestError, ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import Tool, ToolContent, ToolContext, ToolOutput
from agentrt.tools._validation import (
    ArgumentChecker,
    ArgumentProblem,
    SchemaValidator,
    invalid_arguments,
)

__all__ = [
    "TOOL_NAME_PATTERN",
    "RegisteredTool",
    "ToolNameCollision",
    "ToolRegistry",
    "UnknownToolError",
]

#: What model APIs accept as a function name (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``).
TOOL_NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

_log = get_logger(__name__)


class ToolNameCollision(ConfigError):
    """Two tools were registered under the same name."""


class UnknownToolError(InvalidRequestError, LookupError):
    """No tool of that name is registered."""


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A tool as registered (``ToolRegistry.entry``), its checks made once."""

    tool: Tool
    spec: ToolSpec  # snapshot taken at registration: what the model was offered
    validator: SchemaValidator | None
    """The compiled schema its arguments are checked against before a call;
    ``None``: the tool validates its own arguments (an ``ArgumentChecker``)."""


@final
class ToolRegistry:
    """Tools by name.

    ::

        registry = ToolRegistry([Calculator(), PythonSandbox()])
        request = ModelRequest(..., tools=registry.specs())
        output = await registry.call("calculator", {"expression": "2**10"})

    ``specs()`` is sorted by name whatever the registration order.  Each
    tool's spec is read once, at registration; its schema is checked and
    compiled then, so a malformed schema fails early, naming the tool.  A
    tool that validates its own arguments (``ArgumentChecker``: function
    tools) is not validated again: its schema was generated from the types
    it validates against.
    """

    __slots__ = ("_entries", "_specs")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._entries: dict[str, RegisteredTool] = {}
        self._specs: tuple[ToolSpec, ...] | None = None
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        """Add a tool.  Raises ``ToolNameCollision`` when the name is taken
        and ``ConfigError`` for an invalid name or argument schema."""
        spec = tool.spec
        where = f"tool '{spec.name}'"
        if not TOOL_NAME_PATTERN.fullmatch(spec.name):
            raise ConfigError(
                "a tool name must be 1-64 characters of letters, digits, '_' or '-' "
                "(what model APIs accept)",
                where=where,
            )
        if spec.name in self._entries:
            taken_by = type(self._entries[spec.name].tool).__name__
            raise ToolNameCollision(
                f"the name is already registered (by a {taken_by}); give one of them another name",
                where=where,
            )
        if spec.parameters.get("type", "object") != "object":
            raise ConfigError("the argument schema must describe a JSON object", where=where)
        validator = (
            None
            if isinstance(tool, ArgumentChecker)
            else SchemaValidator(spec.parameters, where=where)
        )
        self._entries[spec.name] = RegisteredTool(tool=tool, spec=spec, validator=validator)
        self._specs = None

    def unregister(self, name: str) -> Tool:
        """Remove a tool and return it; ``UnknownToolError`` if absent."""
        entry = self._entries.pop(name, None)
        if entry is None:
            raise self._unknown(name)
        self._specs = None
        return entry.tool

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``UnknownToolError`` if absent."""
        entry = self._entries.get(name)
        if entry is None:
            raise self._unknown(name)
        return entry.tool

    def find(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def specs(self) -> list[ToolSpec]:
        """The specs to offer a model, sorted by name (stable prompt prefix)."""
        if self._specs is None:
            self._specs = tuple(self._entries[n].spec for n in sorted(self._entries))
        return list(self._specs)

    def validate(self, name: str, arguments: object) -> list[ArgumentProblem]:
        """What is wrong with calling ``name`` with ``arguments`` (empty when
        nothing is); ``UnknownToolError`` if there is no such tool."""
        entry = self._entries.get(name)
        if entry is None:
            raise self._unknown(name)
        if entry.validator is None:
            return cast(ArgumentChecker, entry.tool).argument_problems(arguments)
        return entry.validator.problems(arguments)

    def entry(self, name: str) -> RegisteredTool | None:
        """The tool called ``name`` with its validator, or ``None``: a call
        checks ``validator.problems`` first, unless the tool validates its
        own arguments (``validator`` is ``None``; its ``call`` reports them:
        each call is validated once)."""
        return self._entries.get(name)

    async def call(
        self, name: str, arguments: Mapping[str, Any], context: ToolContext | None = None
    ) -> ToolOutput:
        """Validate and run one call.  Never raises for the model's mistakes
        or a tool's failure: those come back as an error ``ToolOutput``.
        ``context.timeout_s`` bounds the call.  Cancellation propagates."""
        context = context or ToolContext()
        entry = self._entries.get(name)
        if entry is None:
            return _error(str(self._unknown(name)), "unknown_tool", name)
        problems = [] if entry.validator is None else entry.validator.problems(arguments)
        if problems:
            _log.info("tool.invalid_arguments", tool=name, problems=len(problems))
            return invalid_arguments(name, problems)
        deadline = context.timeout_s if context.timeout_s is not None else float("inf")
        try:
            with anyio.move_on_after(deadline) as scope:
                output = await entry.tool.call(arguments, context)
        except ToolError as exc:
            return _error(str(exc), "tool_error", name)
        except Exception as exc:  # a bug in the tool: report it, keep the agent running
            _log.exception("tool.crashed", tool=name)
            return _error(
                f"tool '{name}' failed: {type(exc).__name__}: {exc}", "tool_crashed", name
            )
        if scope.cancelled_caught:
            return _error(
                f"tool '{name}' did not finish within {context.timeout_s:g} s and was cancelled",
                "timeout",
                name,
            )
        return output

    def _unknown(self, name: str) -> UnknownToolError:
        available = ", ".join(self.names()) or "(none)"
        return UnknownToolError(f"unknown tool '{name}'; available tools: {available}")


def _error(message: str, kind: str, tool: str) -> ToolOutput:
    return ToolOutput(
        content=[ToolContent(text=message)],
        is_error=True,
        structured={"error": kind, "tool": tool},
    )
