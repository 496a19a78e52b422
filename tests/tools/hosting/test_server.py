"""ToolServer end to end in-process: the official SDK client over memory streams."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as mcp
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput
from agentrt.tools.hosting._hosted_catalog import (
    ListedResource,
    Prompt,
    PromptArgument,
    PromptMessage,
    ResourceTemplate,
    StaticResource,
)
from agentrt.tools.hosting._hosting_config import ToolServerConfig
from agentrt.tools.hosting._tool_server import ToolServer
from agentrt.tools.hosting._transports import connect_in_process
from tests.tools.hosting._client_side import ClientSide

PNG = b"\x89PNG\r\n\x1a\nnot-really-a-png"
WAV = b"RIFF\x00\x00\x00\x00WAVEfmt "
LEVELS = ("debug", "info", "warning", "error")


async def echo(args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput.of_text(f"echo: {args['text']}")


async def media(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput(
        content=[
            ToolContent(kind="image", data=PNG, mime_type="image/png"),
            ToolContent(kind="audio", data=WAV, mime_type="audio/wav"),
            ToolContent(kind="resource", uri="mem://doc", mime_type="text/markdown", text="# doc"),
            ToolContent(kind="resource", uri="mem://blob", data=b"\x00\x01"),
        ],
        structured={"count": 4},
    )


async def refuse(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    raise ToolError("the widget is out of stock")


async def crash(args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput.of_text(str(1 / int(args.get("divisor", 0))))


async def bad_log(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.notify is not None
    await ctx.notify("log", {"level": "loud", "message": "?"})
    return ToolOutput.of_text("unreachable")


async def stall(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    await anyio.sleep(30)
    return ToolOutput.of_text("never")


async def chatty(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.notify is not None
    for level in LEVELS:
        await ctx.notify("log", {"level": level, "message": f"at {level}"})
    return ToolOutput.of_text("logged")


async def counting(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.notify is not None
    for done in (1, 2, 3):
        await ctx.notify("progress", {"progress": done, "total": 3, "message": f"step {done}"})
    return ToolOutput.of_text("counted")


async def ask_model(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.peer is not None
    answer = await ctx.peer.sample(str(args["question"]), max_tokens=50)
    return ToolOutput.of_text(f"model says: {answer}")


async def ask_user(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    assert ctx.peer is not None
    schema = {"type": "object", "properties": {"color": {"type": "string"}}}
    reply = await ctx.peer.elicit("favourite colour?", schema)
    return ToolOutput.of_text(f"{reply.action}: {reply.content}")


async def item_json(variables: Mapping[str, str]) -> str:
    return f'{{"item": "{variables["id"]}"}}'


async def items_in_stock() -> list[ListedResource]:
    return [ListedResource(uri="mem://items/apple", name="apple", description="In stock")]


async def greet(args: Mapping[str, str]) -> list[PromptMessage]:
    return [
        PromptMessage(content=ToolContent(text=f"Hello {args['name']}")),
        PromptMessage(
            role="assistant", content=ToolContent(kind="image", data=PNG, mime_type="image/png")
        ),
    ]


@pytest.fixture
def server(make_tool: Any) -> ToolServer:
    text_param = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    return ToolServer(
        "test-host",
        tools=[
            make_tool("echo", echo, text_param),
            make_tool("media", media),
            make_tool("refuse", refuse),
            make_tool("crash", crash),
            make_tool("stall", stall),
            make_tool("bad_log", bad_log),
            make_tool("chatty", chatty),
            make_tool("counting", counting),
            make_tool("ask_model", ask_model),
            make_tool("ask_user", ask_user),
        ],
        resources=[
            StaticResource(uri="mem://readme", name="readme", text="read me"),
            StaticResource(uri="mem://logo", name="logo", mime_type="image/png", data=PNG),
        ],
        resource_templates=[
            ResourceTemplate(
                uri_template="mem://items/{id}",
                name="item",
                mime_type="application/json",
                read=item_json,
                choices={"id": ("apple", "apricot", "banana")},
                listing=items_in_stock,
            )
        ],
        prompts=[
            Prompt(
                name="greet",
                render=greet,
                arguments=[PromptArgument(name="name", required=True, choices=("Ada", "Alan"))],
            )
        ],
        config=ToolServerConfig(call_timeout_s=0.3),
    )


@pytest.mark.anyio
async def test_tools_are_listed_and_every_content_kind_arrives(server: ToolServer) -> None:
    async with Client(connect_in_process(server), mode="legacy") as client:
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == server.tool_names
        assert listed.tools[0].input_schema["required"] == ["text"]

        echoed = await client.call_tool("echo", {"text": "hi"})
        assert not echoed.is_error
        assert echoed.content == [mcp.TextContent(text="echo: hi")]

        result = await client.call_tool("media", {})
        image, audio, doc, blob = result.content
        assert isinstance(image, mcp.ImageContent)
        assert image.mime_type == "image/png"
        assert base64.b64decode(image.data) == PNG
        assert isinstance(audio, mcp.AudioContent)
        assert base64.b64decode(audio.data) == WAV
        assert isinstance(doc, mcp.EmbeddedResource)
        assert isinstance(doc.resource, mcp.TextResourceContents)
        assert (doc.resource.uri, doc.resource.text) == ("mem://doc", "# doc")
        assert isinstance(blob, mcp.EmbeddedResource)
        assert isinstance(blob.resource, mcp.BlobResourceContents)
        assert base64.b64decode(blob.resource.blob) == b"\x00\x01"
        assert result.structured_content == {"count": 4}


@pytest.mark.anyio
async def test_failures_become_error_results_and_the_server_keeps_serving(
    server: ToolServer,
) -> None:
    async with Client(connect_in_process(server), mode="legacy") as client:
        refused = await client.call_tool("refuse", {})
        assert refused.is_error
        assert refused.content == [mcp.TextContent(text="the widget is out of stock")]

        crashed = await client.call_tool("crash", {})
        assert crashed.is_error
        assert isinstance(crashed.content[0], mcp.TextContent)
        assert "'crash' failed: ZeroDivisionError" in crashed.content[0].text

        stalled = await client.call_tool("stall", {})
        assert stalled.is_error
        assert isinstance(stalled.content[0], mcp.TextContent)
        assert "'stall' timed out after 0.3 s" in stalled.content[0].text

        bad = await client.call_tool("bad_log", {})
        assert bad.is_error
        assert isinstance(bad.content[0], mcp.TextContent)
        assert "logged at level 'loud'; use one of debug, info" in bad.content[0].text

        with pytest.raises(MCPError, match="Unknown tool 'nope'") as unknown:
            await client.call_tool("nope", {})
        assert unknown.value.code == mcp.INVALID_PARAMS

        fine = await client.call_tool("crash", {"divisor": 4})
        assert not fine.is_error
        assert fine.content == [mcp.TextContent(text="0.25")]


@pytest.mark.anyio
async def test_progress_notifications_reach_the_caller(server: ToolServer) -> None:
    side = ClientSide()
    async with Client(connect_in_process(server), mode="legacy") as client:
        result = await client.call_tool("counting", {}, progress_callback=side.on_progress)
    assert not result.is_error
    assert side.progress == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


@pytest.mark.anyio
async def test_log_notifications_honour_the_requested_level(server: ToolServer) -> None:
    side = ClientSide()
    received = side.logs
    async with Client(
        connect_in_process(server), mode="legacy", logging_callback=side.on_log
    ) as client:
        await client.call_tool("chatty", {})
        before = list(received)
        received.clear()
        with pytest.warns(MCPDeprecationWarning):  # logging is gone in 2026-07-28
            await client.set_logging_level("warning")
        await client.call_tool("chatty", {})
    # Default floor is "info"; after setLevel only warning and more severe.
    assert before == [(lvl, f"at {lvl}", "chatty") for lvl in ("info", "warning", "error")]
    assert received == [(lvl, f"at {lvl}", "chatty") for lvl in ("warning", "error")]


@pytest.mark.anyio
async def test_tools_can_ask_the_client_for_sampling_and_elicitation(server: ToolServer) -> None:
    side = ClientSide("forty-two", model="fake")

    async def elicit(
        context: ClientRequestContext, params: mcp.ElicitRequestParams
    ) -> mcp.ElicitResult:
        assert isinstance(params, mcp.ElicitRequestFormParams)
        assert params.requested_schema["properties"] == {"color": {"type": "string"}}
        return mcp.ElicitResult(action="accept", content={"color": "teal"})

    async with Client(
        connect_in_process(server),
        mode="legacy",
        sampling_callback=side.sample,
        elicitation_callback=elicit,
    ) as client:
        sampled = await client.call_tool("ask_model", {"question": "meaning of life?"})
        elicited = await client.call_tool("ask_user", {})
    assert side.prompts == ["meaning of life?"]
    assert sampled.content == [mcp.TextContent(text="model says: forty-two")]
    assert elicited.content == [mcp.TextContent(text="accept: {'color': 'teal'}")]


@pytest.mark.anyio
async def test_asking_a_client_without_the_capability_is_an_error_result(
    server: ToolServer,
) -> None:
    async with Client(connect_in_process(server), mode="legacy") as client:
        result = await client.call_tool("ask_model", {"question": "?"})
    assert result.is_error
    assert isinstance(result.content[0], mcp.TextContent)
    assert "did not declare the sampling capability" in result.content[0].text


@pytest.mark.anyio
async def test_resources_static_templated_missing_and_subscribed(server: ToolServer) -> None:
    updates: list[str] = []
    updated = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, mcp.ResourceUpdatedNotification):
            updates.append(message.params.uri)
            updated.set()

    async with Client(
        connect_in_process(server), mode="legacy", message_handler=on_message
    ) as client:
        listed = await client.list_resources()
        assert [(r.uri, r.mime_type) for r in listed.resources] == [
            ("mem://readme", "text/plain"),
            ("mem://logo", "image/png"),
            ("mem://items/apple", "application/json"),  # what the template lists
        ]
        assert listed.resources[2].description == "In stock"
        templates = await client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["mem://items/{id}"]

        text = (await client.read_resource("mem://readme")).contents[0]
        assert isinstance(text, mcp.TextResourceContents)
        assert text.text == "read me"
        logo = (await client.read_resource("mem://logo")).contents[0]
        assert isinstance(logo, mcp.BlobResourceContents)
        assert base64.b64decode(logo.blob) == PNG
        item = (await client.read_resource("mem://items/pear")).contents[0]
        assert isinstance(item, mcp.TextResourceContents)
        assert (item.uri, item.mime_type, item.text) == (
            "mem://items/pear",
            "application/json",
            '{"item": "pear"}',
        )
        with pytest.raises(MCPError, match="Resource not found") as missing:
            await client.read_resource("mem://nothing")
        assert missing.value.code == -32002

        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource("mem://readme")
        assert await server.notify_resource_updated("mem://readme") == 1
        assert await server.notify_resource_updated("mem://logo") == 0
        with anyio.fail_after(5):
            await updated.wait()
        with pytest.warns(MCPDeprecationWarning):
            await client.unsubscribe_resource("mem://readme")
        assert await server.notify_resource_updated("mem://readme") == 0

        completed = await client.complete(
            mcp.ResourceTemplateReference(uri="mem://items/{id}"), {"name": "id", "value": "ap"}
        )
        assert completed.completion.values == ["apple", "apricot"]
    assert updates == ["mem://readme"]


@pytest.mark.anyio
async def test_prompts_render_with_arguments_and_complete(server: ToolServer) -> None:
    async with Client(connect_in_process(server), mode="legacy") as client:
        listed = await client.list_prompts()
        (prompt,) = listed.prompts
        assert prompt.name == "greet"
        assert [(a.name, a.required) for a in prompt.arguments or []] == [("name", True)]

        got = await client.get_prompt("greet", {"name": "Grace"})
        first, second = got.messages
        assert (first.role, first.content) == ("user", mcp.TextContent(text="Hello Grace"))
        assert second.role == "assistant"
        assert isinstance(second.content, mcp.ImageContent)

        with pytest.raises(MCPError, match="needs argument"):
            await client.get_prompt("greet", {})
        with pytest.raises(MCPError, match="Unknown prompt"):
            await client.get_prompt("farewell", {})

        completed = await client.complete(
            mcp.PromptReference(name="greet"), {"name": "name", "value": "a"}
        )
        assert completed.completion.values == ["Ada", "Alan"]
        assert completed.completion.total == 2
        assert completed.completion.has_more is False


@pytest.mark.anyio
async def test_a_2026_era_client_is_served_and_told_why_sampling_is_unavailable(
    server: ToolServer,
) -> None:
    side = ClientSide()  # a 2026-07-28 server never sends sampling requests
    async with Client(
        connect_in_process(server),
        logging_callback=side.on_log,
        log_level="warning",
        sampling_callback=side.sample,
    ) as client:
        assert client.protocol_version == "2026-07-28"
        assert (await client.call_tool("echo", {"text": "x"})).content == [
            mcp.TextContent(text="echo: x")
        ]
        await client.call_tool("chatty", {})
        await client.call_tool("counting", {}, progress_callback=side.on_progress)
        refused = await client.call_tool("ask_model", {"question": "?"})
    assert side.levels == ["warning", "error"]  # the per-request opt-in level
    assert side.steps == [1.0, 2.0, 3.0]
    assert refused.is_error
    assert isinstance(refused.content[0], mcp.TextContent)
    assert "protocol 2026-07-28 has no server-to-client requests" in refused.content[0].text


@pytest.mark.anyio
async def test_a_failing_resource_listing_hides_only_its_own_entries() -> None:
    async def broken() -> list[ListedResource]:
        raise RuntimeError("the database is gone")

    server = ToolServer(
        "listing-host",
        resources=[StaticResource(uri="mem://readme", name="readme", text="read me")],
        resource_templates=[
            ResourceTemplate(uri_template="mem://a/{id}", name="a", read=item_json, listing=broken),
            ResourceTemplate(
                uri_template="mem://items/{id}", name="item", read=item_json, listing=items_in_stock
            ),
        ],
    )
    async with Client(connect_in_process(server), mode="legacy") as client:
        listed = await client.list_resources()
    assert [r.uri for r in listed.resources] == ["mem://readme", "mem://items/apple"]
