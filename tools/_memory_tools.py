"""The memory tools: how a rollout reads and writes the shared memory bank.

Owns ``memory_search(query)`` (the best keys with their ids),
``memory_get(id)`` (an item's full value) and ``memory_store(key, value)``
(a candidate for the bank, subject to its admission policy; unverified,
since it is the model's own claim), all over one run's ``MemoryView``.
``memory_tools(view)`` returns the three.

Imports protocols, the runtime floor and the tools base; never agents or
aggregators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.memory._admission import Candidate
from agentrt.runtime.memory._view import MemoryView
from agentrt.tools._tool import Tool, ToolContext, ToolOutput


def _schema(**props: tuple[str, str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": t, "description": d} for k, (t, d) in props.items()},
        "required": list(props),
        "additionalProperties": False,
    }


def _text_arg(arguments: Mapping[str, Any], name: str, tool: str) -> str | ToolOutput:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        return ToolOutput.of_text(
            f"{tool}: argument {name!r} must be a non-empty string, got {value!r}", is_error=True
        )
    return value


@final
class MemorySearchTool:
    """``memory_search(query)``: keys of the shared memory matching ``query``."""

    def __init__(self, view: MemoryView) -> None:
        self.view = view
        self._spec = ToolSpec(
            name="memory_search",
            description="Search the memory shared by all rollouts of this run; returns "
            "matching keys (short summaries) with ids. Fetch a value with memory_get(id).",
            parameters=_schema(query=("string", "what to look for")),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        query = _text_arg(arguments, "query", "memory_search")
        if isinstance(query, ToolOutput):
            return query
        hits = await self.view.search(query)
        if not hits:
            return ToolOutput.of_text(f"no shared memory matches {query!r}")
        return ToolOutput.of_text(self.view.note(hits))


@final
class MemoryGetTool:
    """``memory_get(id)``: the full value of a shared memory item."""

    def __init__(self, view: MemoryView) -> None:
        self.view = view
        self._spec = ToolSpec(
            name="memory_get",
            description="Fetch the full value of a shared memory item by its id.",
            parameters=_schema(id=("integer", "the item's id, as listed with its key")),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        item_id = arguments.get("id")
        if isinstance(item_id, bool) or not isinstance(item_id, int):
            return ToolOutput.of_text(
                f"memory_get: argument 'id' must be an integer, got {item_id!r}", is_error=True
            )
        item = await self.view.get(item_id)
        if item is None:
            return ToolOutput.of_text(
                f"memory_get: no shared memory item {item_id} (unknown, expired or evicted)",
                is_error=True,
            )
        return ToolOutput.of_text(item.value)


@final
class MemoryStoreTool:
    """``memory_store(key, value)``: offer an item to the shared memory."""

    def __init__(self, view: MemoryView) -> None:
        self.view = view
        self._spec = ToolSpec(
            name="memory_store",
            description="Offer a finding to the memory shared by all rollouts: a short key "
            "(one-line summary) and the full value. Near-duplicates are refused.",
            parameters=_schema(
                key=("string", "a one-line summary other rollouts will see"),
                value=("string", "the full content"),
            ),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        key = _text_arg(arguments, "key", "memory_store")
        if isinstance(key, ToolOutput):
            return key
        value = _text_arg(arguments, "value", "memory_store")
        if isinstance(value, ToolOutput):
            return value
        decision, item_id = await self.view.offer(
            Candidate(key=key, value=value, rollout_id=context.rollout_id, verified=False)
        )
        if item_id is None:
            return ToolOutput.of_text(f"not stored: {decision.reason}")
        return ToolOutput.of_text(f"stored as item {item_id} (score {decision.score:.2f})")


def memory_tools(view: MemoryView) -> list[Tool]:
    """The three memory tools over ``view``."""
    return [MemorySearchTool(view), MemoryGetTool(view), MemoryStoreTool(view)]


__all__ = ["MemoryGetTool", "MemorySearchTool", "MemoryStoreTool", "memory_tools"]
