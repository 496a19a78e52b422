"""Tool-argument validation: the problems a model can correct, in one shape.

Owns ``ArgumentProblem`` (which argument, what was wrong), the error
``ToolOutput`` built from a list of them (``invalid_arguments``),
``SchemaValidator``, a JSON-schema validator compiled once per tool that
turns ``jsonschema`` errors into short, per-argument messages, and
``ArgumentChecker``, the tools that validate their own arguments.  Each call
is validated once: by the tool itself when it is an ``ArgumentChecker``
(function tools: pydantic), else by the registry against the schema; both
report in the same shape, so the model always sees the same kind of message.

Imports the tools base and the runtime floor only; never agents or
aggregators.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, final, runtime_checkable

import msgspec

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools._tool import ToolContent, ToolOutput

if TYPE_CHECKING:
    # jsonschema (about 4,000 objects) loads with the first schema a tool
    # registry compiles: function tools, which validate with pydantic, and
    # an application that never registers a schema'd tool do without it.
    from jsonschema import exceptions as jsonschema_exceptions
    from jsonschema.protocols import Validator

__all__ = [
    "ArgumentChecker",
    "ArgumentProblem",
    "SchemaValidator",
    "invalid_arguments",
    "short_repr",
]

#: How much of an offending value a message quotes.
_REPR_LIMIT: Final = 60

_JSON_TYPE_NAMES: Final = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


class ArgumentProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One thing wrong with a call's arguments.  ``argument`` is a dotted
    path (``"items.0.name"``); empty means the arguments as a whole."""

    argument: str
    message: str


@runtime_checkable
class ArgumentChecker(Protocol):
    """A tool that validates its arguments itself, in ``call`` (an invalid
    call comes back as ``invalid_arguments``), against the types its schema
    was generated from (a function tool: pydantic).  Its schema is then not
    checked again before the call: one validation per call, the tool's."""

    def argument_problems(self, arguments: object) -> list[ArgumentProblem]:
        """What is wrong with calling the tool with ``arguments`` (empty
        when nothing is), as ``call`` would report it."""
        ...


def short_repr(value: object) -> str:
    """``repr`` of a value, cut to a length fit for an error message."""
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _json_type(value: object) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def invalid_arguments(tool: str, problems: Sequence[ArgumentProblem]) -> ToolOutput:
    """The error output for a call whose arguments failed validation: one
    line per problem for the model, and the same as data in ``structured``
    (``{"error": "invalid_arguments", "tool": ..., "problems": [...]}``)."""
    lines = [f"Invalid arguments for tool '{tool}':"]
    lines += [f"- {p.argument or '(arguments)'}: {p.message}" for p in problems]
    lines.append("Fix the arguments and call the tool again.")
    return ToolOutput(
        content=[ToolContent(text="\n".join(lines))],
        is_error=True,
        structured={
            "error": "invalid_arguments",
            "tool": tool,
            "problems": [{"argument": p.argument, "message": p.message} for p in problems],
        },
    )


def _path(parts: Iterable[object]) -> str:
    return ".".join(str(p) for p in parts)


def _problems_of(error: jsonschema_exceptions.ValidationError) -> list[ArgumentProblem]:
    """Per-argument messages for one jsonschema error."""
    where = list(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    match error.validator:
        case "required" if isinstance(instance, Mapping):
            required = error.validator_value if isinstance(error.validator_value, list) else []
            return [
                ArgumentProblem(argument=_path([*where, name]), message="missing required argument")
                for name in required
                if name not in instance
            ]
        case "additionalProperties" if (
            isinstance(instance, Mapping) and "patternProperties" not in schema
        ):
            allowed = sorted(schema.get("properties", {}))
            hint = f"expected one of: {', '.join(allowed)}" if allowed else "takes no arguments"
            return [
                ArgumentProblem(
                    argument=_path([*where, k]), message=f"unexpected argument ({hint})"
                )
                for k in instance
                if k not in allowed
            ]
        case "type":
            wanted = error.validator_value
            wanted_text = " or ".join(wanted) if isinstance(wanted, list) else str(wanted)
            message = f"expected {wanted_text}, got {_json_type(instance)} {short_repr(instance)}"
            return [ArgumentProblem(argument=_path(where), message=message)]
        case "enum" if isinstance(error.validator_value, list):
            options = ", ".join(short_repr(v) for v in error.validator_value)
            message = f"got {short_repr(instance)}; expected one of: {options}"
            return [ArgumentProblem(argument=_path(where), message=message)]
        case _:
            return [ArgumentProblem(argument=_path(where), message=error.message)]


def _compile(schema: Mapping[str, Any]) -> Validator:
    from jsonschema.validators import Draft202012Validator, validator_for

    cls = validator_for(schema, default=Draft202012Validator)
    cls.check_schema(dict(schema))
    return cls(schema)


@functools.lru_cache(maxsize=1024)
def _compiled(schema_json: str) -> Validator:
    """Checking a schema costs milliseconds, and every run builds its agents'
    tool registries anew (a daemon under load: hundreds per second), so a
    schema is checked and compiled once per process; validators are
    immutable and shared."""
    return _compile(json.loads(schema_json))


@final
class SchemaValidator:
    """A JSON schema compiled once; ``problems(arguments)`` lists what is
    wrong with a call (empty when it is valid).  The draft follows the
    schema's ``$schema``, 2020-12 when it names none."""

    __slots__ = ("_validator",)

    def __init__(self, schema: Mapping[str, Any], *, where: str) -> None:
        from jsonschema import exceptions as jsonschema_exceptions

        try:
            key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):  # not JSON: compile it uncached
            self._validator = _compile(schema)
            return
        try:
            self._validator = _compiled(key)
        except jsonschema_exceptions.SchemaError as exc:
            path = _path(exc.absolute_path) or "(root)"
            raise ConfigError(
                f"invalid JSON schema for the arguments at {path}: {exc.message}", where=where
            ) from exc

    def problems(self, arguments: object) -> list[ArgumentProblem]:
        """Everything wrong with ``arguments``, sorted by argument path."""
        if not isinstance(arguments, Mapping):
            return [
                ArgumentProblem(
                    argument="",
                    message=f"arguments must be a JSON object, got {_json_type(arguments)}",
                )
            ]
        if not isinstance(arguments, dict):
            arguments = dict(arguments)  # jsonschema's "object" means a dict
        found: list[ArgumentProblem] = []
        for error in self._validator.iter_errors(arguments):
            for problem in _problems_of(error):
                if problem not in found:
                    found.append(problem)
        return sorted(found, key=lambda p: p.argument)
