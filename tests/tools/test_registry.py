"""The tool registry: names, stable spec order, validation before calling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from agentrt.protocols import ToolSpec
from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.tools import (
    ToolContext,
    ToolNameCollision,
    ToolOutput,
    ToolRegistry,
    UnknownToolError,
    tool,
)


class SchemaOnlyTool:
    """A tool that trusts its caller to validate (like an MCP tool): it
    records what it was called with."""

    def __init__(self, name: str, parameters: dict[str, Any], *, fail: Exception | None = None):
        self._spec = ToolSpec(name=name, description=f"{name} tool", parameters=parameters)
        self.calls: list[Mapping[str, Any]] = []
        self._fail = fail

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls.append(arguments)
        if self._fail is not None:
            raise self._fail
        return ToolOutput.of_text(f"{self._spec.name} ok")


SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "item": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
    "required": ["count"],
    "additionalProperties": False,
}


def test_specs_are_sorted_whatever_the_registration_order() -> None:
    names = ["zeta", "alpha", "mid-1", "Beta", "mid_0"]
    forward = ToolRegistry(SchemaOnlyTool(n, SCHEMA) for n in names)
    backward = ToolRegistry(SchemaOnlyTool(n, SCHEMA) for n in reversed(names))
    assert [s.name for s in forward.specs()] == sorted(names)
    assert forward.specs() == backward.specs()
    assert list(forward) == forward.names() == sorted(names)
    forward.unregister("alpha")
    assert [s.name for s in forward.specs()] == sorted(set(names) - {"alpha"})


def test_name_collisions_and_bad_names_are_clear_errors() -> None:
    registry = ToolRegistry([SchemaOnlyTool("search", SCHEMA)])
    with pytest.raises(ToolNameCollision, match="'search'"):
        registry.register(SchemaOnlyTool("search", {"type": "object"}))
    assert len(registry) == 1
    for bad in ("", "has space", "dotted.name", "x" * 65):
        with pytest.raises(ConfigError, match="tool name"):
            registry.register(SchemaOnlyTool(bad, SCHEMA))
    with pytest.raises(ConfigError, match="invalid JSON schema"):
        registry.register(SchemaOnlyTool("broken", {"type": "object", "properties": 3}))
    with pytest.raises(UnknownToolError, match="available tools: search"):
        registry.get("nope")


@pytest.mark.anyio
async def test_arguments_are_validated_before_the_tool_runs() -> None:
    target = SchemaOnlyTool("store", SCHEMA)
    registry = ToolRegistry([target])
    out = await registry.call("store", {"count": "3", "item": {}, "extra": True})
    assert out.is_error
    assert target.calls == []
    assert out.structured["error"] == "invalid_arguments"
    problems = {p["argument"]: p["message"] for p in out.structured["problems"]}
    assert set(problems) == {"count", "item.name", "extra"}
    assert problems["count"].startswith("expected integer, got string")
    assert problems["item.name"] == "missing required argument"
    assert "expected one of: count, item" in problems["extra"]
    assert registry.validate("store", {"count": 1}) == []

    ok = await registry.call("store", {"count": 1, "item": {"name": "x"}})
    assert (ok.is_error, ok.text) == (False, "store ok")
    assert target.calls == [{"count": 1, "item": {"name": "x"}}]


@pytest.mark.anyio
async def test_unknown_tools_and_failures_come_back_as_error_outputs() -> None:
    registry = ToolRegistry(
        [
            SchemaOnlyTool("refuses", {"type": "object"}, fail=ToolError("server down")),
            SchemaOnlyTool("crashes", {"type": "object"}, fail=KeyError("k")),
        ]
    )
    out = await registry.call("missing", {})
    assert out.is_error
    assert "unknown tool 'missing'" in out.text
    assert "crashes, refuses" in out.text
    out = await registry.call("refuses", {})
    assert (out.is_error, out.text) == (True, "server down")
    out = await registry.call("crashes", {})
    assert out.is_error
    assert "KeyError" in out.text


@pytest.mark.anyio
async def test_context_timeout_bounds_a_call() -> None:
    cut: list[float] = []

    @tool
    async def slow(seconds: float) -> str:
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            cut.append(seconds)  # stopped at the deadline, not slept out
            raise
        return "done"

    registry = ToolRegistry([slow])
    with anyio.fail_after(60):  # a hang guard: only the deadline ends an hour's sleep
        out = await registry.call("slow", {"seconds": 3600}, ToolContext(timeout_s=0.05))
    assert cut == [3600]
    assert out.is_error
    assert out.structured["error"] == "timeout"
    out = await registry.call("slow", {"seconds": 0}, ToolContext(timeout_s=5))
    assert (out.is_error, out.text) == (False, "done")


@pytest.mark.anyio
async def test_a_function_tool_is_validated_once_by_its_own_model() -> None:
    @tool
    async def count(n: int, label: str = "x") -> str:
        """Count."""
        return f"{label}{n}"

    registry = ToolRegistry([count])
    # Nothing is checked before the call: the function tool checks itself
    # (pydantic, against the types its schema came from).
    entry = registry.entry("count")
    assert entry is not None
    assert entry.validator is None
    problems = registry.validate("count", {"n": "many", "extra": 1})
    assert {p.argument for p in problems} == {"n", "extra"}
    out = await registry.call("count", {"n": "many"})
    assert out.is_error
    assert out.structured["error"] == "invalid_arguments"
    assert (await registry.call("count", {"n": 3})).text == "x3"

    # A tool without its own validation is checked against its schema first.
    target = SchemaOnlyTool("store", SCHEMA)
    registry.register(target)
    stored = registry.entry("store")
    assert stored is not None
    assert stored.validator is not None
    assert stored.validator.problems({"count": "3"})
    assert registry.entry("nope") is None
    assert registry.find("store") is target
    assert registry.find("nope") is None
