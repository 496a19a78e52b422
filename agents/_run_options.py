"""A run's ``RunOptions`` as the agent loop applies them: the sampling of
each model call, the client's tools (calls the caller runs itself, which
end the rollout) and the JSON schema the final answer must match.

May import protocols and the runtime floor; never aggregators or the roof.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from agentrt.protocols._messages import ToolCall
from agentrt.protocols._model import SamplingParams
from agentrt.protocols._run import RequiredTool, RunOptions
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ConfigError

CLIENT_TOOL_STOP: Final = "client tool call"
"""The stop reason of a rollout that ended on a call to a client tool."""

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)


def sampling_for(
    temperature: float, max_tokens: int, options: RunOptions, *, where: str
) -> SamplingParams:
    """The sampling of every model call: the agent's, overridden by ``options``."""
    try:
        return SamplingParams(
            temperature=temperature if options.temperature is None else options.temperature,
            top_p=1.0 if options.top_p is None else options.top_p,
            max_tokens=max_tokens if options.max_tokens is None else options.max_tokens,
            stop=list(options.stop or []),
            seed=options.seed,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad sampling option: {exc}", where=f"{where}.options") from None


_NO_NAMES: frozenset[str] = frozenset()


def client_tool_names(
    options: RunOptions, own: Sequence[ToolSpec], *, where: str
) -> frozenset[str]:
    """The names of the client's tools; one named like an agent's tool (or
    twice) is a ``ConfigError``: a call to it could not be routed."""
    if not options.client_tools:
        return _NO_NAMES
    names: set[str] = set()
    mine = {t.name for t in own}
    for index, tool in enumerate(options.client_tools):
        if tool.name in mine or tool.name in names:
            whose = "one of the agent's own tools" if tool.name in mine else "another client tool"
            raise ConfigError(
                f"client tool {tool.name!r} has the name of {whose}; rename it",
                where=f"{where}.options.client_tools[{index}].name",
            )
        names.add(tool.name)
    return frozenset(names)


def offered_client_tools(options: RunOptions, *, where: str) -> list[ToolSpec]:
    """The client's tools its ``tool_choice`` lets the model call: none for
    ``none``, the named one for a ``RequiredTool``, else all of them; a
    choice that leaves none to call (``required`` without tools, a name no
    client tool has) is a ``ConfigError``."""
    choice = options.tool_choice
    if choice == "none":
        return []
    if isinstance(choice, RequiredTool):
        named = [t for t in options.client_tools if t.name == choice.name]
        if not named:
            known = ", ".join(repr(t.name) for t in options.client_tools) or "none"
            raise ConfigError(
                f"tool_choice names {choice.name!r}, which is not a client tool "
                f"(client tools: {known})",
                where=f"{where}.options.tool_choice.name",
            )
        return named
    if choice == "required" and not options.client_tools:
        raise ConfigError(
            "tool_choice 'required' needs client tools (it governs the client's tools)",
            where=f"{where}.options.tool_choice",
        )
    return list(options.client_tools)


def check_run_options(options: RunOptions, own: Sequence[ToolSpec] | None, *, where: str) -> None:
    """A ``ConfigError`` naming the field, before a run starts, for options
    its agent cannot take: a client tool named like one of the agent's
    tools (``own``; ``None``: the entry node is a pipeline, which takes no
    options), a ``tool_choice`` that leaves no client tool to call, or a
    response schema that is not a JSON schema."""
    if own is None:
        if options != RunOptions():
            raise ConfigError(
                "the entry node is a pipeline: run options (sampling, client tools, a "
                "response schema) apply to an agent",
                where=f"{where}.options",
            )
        return
    client_tool_names(options, own, where=where)
    offered_client_tools(options, where=where)
    if options.response_schema is not None:
        check_schema(options.response_schema, where=f"{where}.options.response_schema")


def schema_instructions(schema: dict[str, Any]) -> str:
    """What the system prompt adds so the model knows the answer's shape."""
    return (
        "Give your final answer as JSON only (no prose, no code fence), a value "
        "matching this JSON schema:\n" + json.dumps(schema, sort_keys=True)
    )


def check_schema(schema: dict[str, Any], *, where: str) -> None:
    """A ``ConfigError`` naming ``where`` when ``schema`` is not a JSON schema."""
    import jsonschema  # only a run with a response schema needs it

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"not a valid JSON schema: {exc.message}", where=where) from None


def structured_answer(schema: dict[str, Any], text: str) -> tuple[str, str | None]:
    """The answer's JSON text (a surrounding code fence removed) and why it
    does not match ``schema`` (``None``: it does)."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced is not None:
        body = fenced.group("body").strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return body, f"the answer is not JSON: {exc}"
    import jsonschema  # as in check_schema

    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(value)
    )
    if error is None:
        return body, None
    at = "/".join(str(p) for p in error.absolute_path)
    return (
        body,
        f"the answer does not match the schema{f' at /{at}' if at else ''}: {error.message}",
    )


def schema_feedback(problem: str) -> str:
    """The message that sends a non-matching answer back to the model."""
    return f"{problem}. Reply again with only the JSON answer, matching the schema."


def client_calls_answer(calls: Sequence[ToolCall]) -> str:
    """A rollout's answer when it ended on client tool calls: the calls as JSON."""
    return msgspec.json.encode(
        [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in calls]
    ).decode()


__all__ = [
    "CLIENT_TOOL_STOP",
    "check_run_options",
    "check_schema",
    "client_calls_answer",
    "client_tool_names",
    "offered_client_tools",
    "sampling_for",
    "schema_feedback",
    "schema_instructions",
    "structured_answer",
]
