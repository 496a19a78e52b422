"""agentrt's own tools hosted over MCP: the built-in calculator and a Python
function made a tool with ``@tool`` (which reports progress and asks the
client's model through its ``ToolContext``)."""

from __future__ import annotations

import mcp_types as mcp
import pytest
from mcp import Client

from agentrt.tools._function import tool
from agentrt.tools._tool import ToolContext
from agentrt.tools.builtins._calculator import Calculator
from agentrt.tools.hosting._tool_server import ToolServer
from agentrt.tools.hosting._transports import connect_in_process
from tests.tools.hosting._client_side import ClientSide


@tool
async def review(title: str, pages: int, context: ToolContext) -> dict[str, object]:
    """Review a manuscript.

    Args:
        title: The manuscript's title.
        pages: How many pages it has.
    """
    assert context.notify is not None
    assert context.peer is not None
    for page in range(1, pages + 1):
        await context.notify("progress", {"progress": page, "total": pages})
    verdict = await context.peer.sample(f"Is '{title}' good?", max_tokens=10)
    return {"title": title, "verdict": verdict}


@pytest.mark.anyio
async def test_the_calculator_and_a_function_tool_are_served_over_mcp() -> None:
    server = ToolServer("builtins", tools=[Calculator(), review])
    side = ClientSide("yes")
    async with Client(
        connect_in_process(server), mode="legacy", sampling_callback=side.sample
    ) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"calculator", "review"}
        assert listed["calculator"].input_schema["required"] == ["expression"]
        assert set(listed["review"].input_schema["properties"]) == {"title", "pages"}

        computed = await client.call_tool("calculator", {"expression": "2 * (3 + 4) ** 2"})
        refused = await client.call_tool("calculator", {"expression": "__import__('os')"})
        malformed = await client.call_tool("calculator", {"expr": "1"})
        reviewed = await client.call_tool(
            "review", {"title": "Dune", "pages": 3}, progress_callback=side.on_progress
        )

    assert computed.content == [mcp.TextContent(text="98")]
    assert not computed.is_error
    assert refused.is_error
    assert malformed.is_error
    assert isinstance(malformed.content[0], mcp.TextContent)
    assert "expression" in malformed.content[0].text
    assert not reviewed.is_error
    assert reviewed.structured_content == {"title": "Dune", "verdict": "yes"}
    assert side.steps == [1.0, 2.0, 3.0]
