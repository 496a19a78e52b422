"""The hosting layer's pure parts: content mapping, definitions, the event
store, Host checks and registration errors."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import mcp_types as mcp
import pytest
from mcp.server.streamable_http import EventMessage

from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput
from agentrt.tools.hosting._event_store import MemoryEventStore
from agentrt.tools.hosting._hosted_catalog import ResourceTemplate, StaticResource, complete
from agentrt.tools.hosting._hosted_content import call_result, content_block
from agentrt.tools.hosting._hosting_config import HttpServeConfig
from agentrt.tools.hosting._tool_server import ToolServer
from agentrt.tools.hosting._transports import transport_security


def test_content_kinds_map_to_mcp_blocks_and_bad_ones_are_named() -> None:
    image = content_block(ToolContent(kind="image", data=b"\x01", mime_type="image/gif"), where="t")
    assert image == mcp.ImageContent(data=base64.b64encode(b"\x01").decode(), mime_type="image/gif")
    both = content_block(
        ToolContent(kind="resource", uri="x://y", text="words", data=b"ignored"), where="t"
    )
    assert isinstance(both, mcp.EmbeddedResource)
    assert both.resource == mcp.TextResourceContents(
        uri="x://y", mime_type="text/plain", text="words"
    )

    with pytest.raises(ToolError, match=r"tool 'v': content kind 'video' has no MCP form"):
        content_block(ToolContent(kind="video"), where="tool 'v'")
    with pytest.raises(ToolError, match="audio content needs a mime_type"):
        content_block(ToolContent(kind="audio", data=b"x"), where="t")
    with pytest.raises(ToolError, match="resource content needs a uri"):
        content_block(ToolContent(kind="resource", text="x"), where="t")


def test_structured_output_is_an_object_and_error_flag_passes_through() -> None:
    listed = call_result(ToolOutput(structured=[1, 2], is_error=True), tool="t")
    assert listed.structured_content == {"result": [1, 2]}
    assert listed.is_error
    assert call_result(ToolOutput.of_text("x"), tool="t").structured_content is None


def test_definitions_reject_what_cannot_be_served() -> None:
    with pytest.raises(ConfigError, match="exactly one of text"):
        StaticResource(uri="a://b", name="b", text="t", data=b"d")
    with pytest.raises(ConfigError, match="exactly one of text"):
        StaticResource(uri="a://b", name="b")

    async def read(_variables: Mapping[str, str]) -> str:
        return ""

    with pytest.raises(ConfigError, match=r"resource template 'a://\{oops'"):
        ResourceTemplate(uri_template="a://{oops", name="bad", read=read)
    template = ResourceTemplate(uri_template="a://items/{id}", name="item", read=read)
    assert template.match("a://items/42") == {"id": "42"}
    assert template.match("a://other/42") is None


def test_registration_rejects_duplicates_and_bad_tool_names(make_tool: Any) -> None:
    async def body(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        return ToolOutput()

    server = ToolServer("reg", tools=[make_tool("dup", body)])
    with pytest.raises(ConfigError, match="reg: tool 'dup' is already hosted"):
        server.add_tool(make_tool("dup", body))
    with pytest.raises(ConfigError, match="tool name 'has space'"):
        server.add_tool(make_tool("has space", body))
    assert server.tool_names == ["dup"]


def test_completion_filters_by_prefix_and_caps() -> None:
    assert complete(["Paris", "park", "rome"], "PA") == (["Paris", "park"], 2)
    values, total = complete([f"v{i}" for i in range(250)], "v")
    assert (len(values), total) == (100, 250)


@pytest.mark.anyio
async def test_event_store_replays_one_stream_after_an_id_and_forgets_old_events() -> None:
    store = MemoryEventStore(capacity=4)
    message = mcp.JSONRPCNotification(jsonrpc="2.0", method="notifications/progress")
    prime = await store.store_event("a", None)
    first = await store.store_event("a", message)
    await store.store_event("b", message)
    last = await store.store_event("a", message)
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    assert await store.replay_events_after(prime, send) == "a"
    assert [e.event_id for e in sent] == [first, last]
    sent.clear()
    assert await store.replay_events_after(first, send) == "a"
    assert [e.event_id for e in sent] == [last]
    assert len({prime, first, last}) == 3
    assert all(len(i) == 24 for i in (prime, first, last))

    await store.store_event("c", message)  # capacity 4: the priming event is evicted
    assert store.size == 4
    assert await store.replay_events_after(prime, send) is None
    assert await store.replay_events_after("not-an-id", send) is None


def test_host_checks_default_to_loopback_names_only_on_loopback() -> None:
    local = transport_security(HttpServeConfig())
    assert local is not None
    assert local.enable_dns_rebinding_protection
    assert {"127.0.0.1:*", "localhost:*", "[::1]:*", "localhost"} <= set(local.allowed_hosts)
    assert "http://localhost:*" in local.allowed_origins
    assert transport_security(HttpServeConfig(host="0.0.0.0")) is None
    explicit = transport_security(HttpServeConfig(host="0.0.0.0", allowed_hosts=["tools.lan:*"]))
    assert explicit is not None
    assert explicit.allowed_hosts == ["tools.lan:*"]
