"""A server's tool catalog: every page of ``tools/list``, pin-checked.

Owns following ``nextCursor`` until the listing ends (with guards against a
server whose cursors repeat or never end) and turning one listing into a
``Catalog``: the ``McpTool`` objects that may be offered, with their
namespaced names, and the tools withheld because their definition no longer
matches its pin.  Must not import agents or aggregators.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import mcp_types as types

from agentrt.protocols._tools import ToolSpec
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._mcp_tool import McpTool, namespaced_names
from agentrt.tools.mcp._pinning import PinDecision, PinStore, decide_pins, tool_definition_hash

if TYPE_CHECKING:
    from agentrt.tools.mcp._connection import McpConnection

__all__ = [
    "MAX_PAGES",
    "Catalog",
    "annotations_of",
    "build_catalog",
    "definition_hash",
    "is_destructive",
    "is_idempotent",
    "list_all_tools",
]

#: A paginated listing longer than this is a misbehaving server.
MAX_PAGES: Final = 1000


@dataclass(frozen=True)
class Catalog:
    """One listing's outcome, keyed by the server's own tool names:
    the tools offered, those blocked by their pin, those refused by policy
    (``destructive: refuse``, with why) and each tool's task support."""

    tools: dict[str, McpTool] = field(default_factory=dict)
    blocked: dict[str, PinDecision] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    task_support: dict[str, str] = field(default_factory=dict)


def annotations_of(tool: types.Tool) -> dict[str, Any]:
    """A tool's annotations as the wire spells them (``readOnlyHint``...)."""
    if tool.annotations is None:
        return {}
    dumped: dict[str, Any] = tool.annotations.model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    return dumped


def is_destructive(annotations: Mapping[str, Any]) -> bool:
    """The spec's reading: a tool may be destructive unless it says it is
    read-only or not destructive (``destructiveHint`` defaults to true)."""
    return not annotations.get("readOnlyHint", False) and bool(
        annotations.get("destructiveHint", True)
    )


def is_idempotent(annotations: Mapping[str, Any]) -> bool:
    """Calling it twice does no more than once (read-only or idempotent)."""
    return bool(annotations.get("readOnlyHint", False) or annotations.get("idempotentHint", False))


def definition_hash(name: str, tool: types.Tool) -> str:
    """The pin hash of everything about ``tool`` a model or a policy reads."""
    return tool_definition_hash(
        name,
        tool.description,
        tool.input_schema,
        title=tool.title,
        output_schema=tool.output_schema,
        annotations=annotations_of(tool),
    )


async def list_all_tools(
    server: str, fetch: Callable[[str | None], Awaitable[types.ListToolsResult]]
) -> dict[str, types.Tool]:
    """Every tool, following ``nextCursor``; the first of duplicate names wins."""
    listed: dict[str, types.Tool] = {}
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        for tool in page.tools:
            listed.setdefault(tool.name, tool)
        cursor = page.next_cursor
        if cursor is None:
            return listed
        if cursor in seen:
            raise McpServerError(server, f"tools/list repeated the cursor {cursor!r}")
        seen.add(cursor)
    raise McpServerError(server, f"tools/list did not end after {MAX_PAGES} pages")


async def build_catalog(
    connection: McpConnection,
    listed: Mapping[str, types.Tool],
    *,
    approved: Mapping[str, str],
    new_tools: Literal["trust", "block"],
    pins: PinStore,
    destructive: Literal["allow", "approve", "refuse"] = "allow",
) -> Catalog:
    """Check each definition against its pin and build the offered tools
    (a destructive one left out under ``destructive: refuse``)."""
    digests = {n: definition_hash(n, t) for n, t in listed.items()}
    decisions = await decide_pins(
        connection.name, digests.items(), approved=approved, new_tools=new_tools, store=pins
    )
    names = namespaced_names(connection.name, listed)
    catalog = Catalog()
    for remote, tool in listed.items():
        decision = decisions[remote]
        annotations = annotations_of(tool)
        if tool.execution is not None and tool.execution.task_support is not None:
            catalog.task_support[remote] = tool.execution.task_support
        if not decision.allowed:
            catalog.blocked[remote] = decision
            continue
        if destructive == "refuse" and is_destructive(annotations):
            catalog.refused[remote] = (
                f"MCP tool {remote!r} on server {connection.name!r} is refused: it may be "
                "destructive (its annotations say so, or do not say otherwise) and the "
                "server's configuration says destructive: refuse"
            )
            continue
        spec = ToolSpec(
            name=names[remote],
            description=tool.description or tool.title or "",
            parameters=tool.input_schema,
            annotations=annotations,
        )
        catalog.tools[remote] = McpTool(
            connection, remote_name=remote, spec=spec, digest=decision.digest
        )
    return catalog
