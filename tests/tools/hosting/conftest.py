"""Fixtures for the MCP hosting tests: a tool factory, and the npx gate.

Tests that drive our server with real npm clients (inspector-cli, the
conformance suite) need Node's ``npx``.  Without it they skip, unless
``AGENTRT_REQUIRE_NPX=1`` (CI sets it): then they fail, so a missing Node
install cannot hide behind a skip.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentrt.protocols import ToolSpec
from agentrt.tools._tool import ToolContext, ToolOutput

Body = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class FakeTool:
    """A ``Tool`` made of a spec and an async function."""

    spec: ToolSpec
    body: Body = field(repr=False)

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return await self.body(arguments, context)


ToolFactory = Callable[..., FakeTool]


def _make_tool(name: str, body: Body, parameters: dict[str, Any] | None = None) -> FakeTool:
    spec = ToolSpec(
        name=name,
        description=f"test tool {name}",
        parameters=parameters or {"type": "object", "properties": {}},
    )
    return FakeTool(spec, body)


@pytest.fixture
def make_tool() -> ToolFactory:
    """``make_tool(name, async_body, parameters=None)`` -> a ``Tool``."""
    return _make_tool
