"""``McpTool``: one tool of an MCP server, as the agent loop sees it.

Owns the namespacing of tool names (``<server>__<tool>``, valid as an
OpenAI function name ``^[a-zA-Z0-9_-]{1,64}$`` and unique per server even
when the server's own names are not valid or too long) and the ``Tool``
protocol adapter that forwards a call to an ``McpToolCaller``: an open
``McpConnection``, or the handle of the actor that owns one.  A tool object
stays valid across server restarts: each call asks for the server's
current state, so a restarting server or a blocked definition answers with
a clear error output.

Must not import agents or aggregators.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, final

from agentrt.protocols._tools import ToolSpec
from agentrt.tools._tool import ToolContext, ToolOutput

__all__ = ["SEPARATOR", "McpTool", "McpToolCaller", "namespaced_names"]

#: Between the server name and the tool name.  Server names cannot contain it.
SEPARATOR: Final = "__"
_MAX_NAME: Final = 64
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def namespaced_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """Map each of a server's tool names to a unique, valid function name.

    ``echo`` on server ``everything`` -> ``everything__echo``.  Characters
    outside ``[A-Za-z0-9_-]`` become ``_``; a name that would exceed 64
    characters, or collide with an earlier one (in sorted order, so the
    mapping is stable), is shortened and given a hash suffix of the
    original name."""
    prefix = f"{server}{SEPARATOR}"
    taken: set[str] = set()
    names: dict[str, str] = {}
    for tool in sorted(set(tools)):
        candidate = prefix + _INVALID.sub("_", tool)
        if len(candidate) > _MAX_NAME or candidate in taken:
            suffix = "_" + _short_hash(tool)
            candidate = candidate[: _MAX_NAME - len(suffix)] + suffix
        while candidate in taken:  # a hash-suffix collision: astronomically rare, still handled
            suffix = "_" + _short_hash(candidate)
            candidate = candidate[: _MAX_NAME - len(suffix)] + suffix
        taken.add(candidate)
        names[tool] = candidate
    return names


class McpToolCaller(Protocol):
    """Where an ``McpTool`` sends its calls."""

    @property
    def name(self) -> str:
        """The server's name."""
        ...

    async def call_tool(
        self,
        remote_name: str,
        arguments: Mapping[str, Any],
        *,
        context: ToolContext | None = None,
        display_name: str | None = None,
    ) -> ToolOutput:
        """Call a tool by the server's own name; failures are error outputs."""
        ...


@final
class McpTool:
    """A tool offered by an MCP server, called through ``caller``."""

    def __init__(
        self,
        caller: McpToolCaller,
        *,
        remote_name: str,
        spec: ToolSpec,
        digest: str,
    ) -> None:
        self._caller = caller
        self._spec = spec
        self.remote_name = remote_name
        """The name the server knows the tool by."""
        self.digest = digest
        """sha256 of the definition this tool was built from (see ``pinning``)."""

    @property
    def spec(self) -> ToolSpec:
        """The namespaced name, the server's description and input schema."""
        return self._spec

    @property
    def server(self) -> str:
        """The name of the server that offers the tool."""
        return self._caller.name

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Call the tool on its server.  Failures (timeout, a server that is
        restarting or down, a blocked definition, an error the server
        reports) come back as an error output naming the tool and server."""
        return await self._caller.call_tool(
            self.remote_name, arguments, context=context, display_name=self._spec.name
        )

    def __repr__(self) -> str:
        return f"McpTool({self._spec.name!r}, server={self.server!r})"
