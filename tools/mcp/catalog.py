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
from typing import TYPE_CHECKING, Final, Literal

import mcp_types as types

from agentrt.protocols import ToolSpec
from agentrt.tools.mcp.errors import McpServerError
from agentrt.tools.mcp.pinning import PinDecision, PinStore, decide_pins, tool_definition_hash
from agentrt.tools.mcp.tool import McpTool, namespaced_names

if TYPE_CHECKING:
    from agentrt.tools.mcp.connection import McpConnection

__all__ = ["MAX_PAGES", "Catalog", "build_catalog", "list_all_tools"]

#: A paginated listing longer than this is a misbehaving server.
MAX_PAGES: Final = 1000


@dataclass(frozen=True)
class Catalog:
    """One listing's outcome, keyed by the server's own tool names."""

    tools: dict[str, McpTool] = field(default_factory=dict)
    blocked: dict[str, PinDecision] = field(default_factory=dict)


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
) -> Catalog:
    """Check each definition against its pin and build the offered tools."""
    digests = {n: tool_definition_hash(n, t.description, t.input_schema) for n, t in listed.items()}
    decisions = await decide_pins(
        connection.name, digests.items(), approved=approved, new_tools=new_tools, store=pins
    )
    names = namespaced_names(connection.name, listed)
    tools: dict[str, McpTool] = {}
    blocked: dict[str, PinDecision] = {}
    for remote, tool in listed.items():
        decision = decisions[remote]
        if not decision.allowed:
            blocked[remote] = decision
            continue
        spec = ToolSpec(
            name=names[remote],
            description=tool.description or tool.title or "",
            parameters=tool.input_schema,
        )
        tools[remote] = McpTool(connection, remote_name=remote, spec=spec, digest=decision.digest)
    return Catalog(tools=tools, blocked=blocked)
