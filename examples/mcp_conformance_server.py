"""The MCP conformance suite's reference server, built with agentrt's hosting layer.

Implements every tool, resource, resource template and prompt that the
server scenarios of ``@modelcontextprotocol/conformance`` (0.1.13) call, as
plain agentrt ``Tool`` objects and ``agentrt.tools.hosting`` definitions::

    python examples/mcp_conformance_server.py --port 8000   # http://127.0.0.1:8000/mcp
    python examples/mcp_conformance_server.py --stdio       # one client on stdin/stdout

``.ci/mcp-conformance.sh`` starts it and runs every server scenario against it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import struct
import wave
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentrt import ToolError, configure_logging
from agentrt.protocols import ToolSpec
from agentrt.tools import (
    ClientPeer,
    HttpServeConfig,
    McpCallPeer,
    Prompt,
    PromptArgument,
    PromptMessage,
    ResourceTemplate,
    StaticResource,
    Tool,
    ToolContent,
    ToolContext,
    ToolOutput,
    ToolServer,
    serve_stdio,
    serve_streamable_http,
)

ToolBody = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ExampleTool:
    """An async function with a spec: the smallest thing satisfying ``Tool``."""

    spec: ToolSpec
    body: ToolBody = field(repr=False)

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return await self.body(arguments, context)


# -- media ---------------------------------------------------------------------


def red_pixel_png() -> bytes:
    """A 1x1 red PNG, built from its chunks."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then R G B
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def short_silence_wav() -> bytes:
    """Ten milliseconds of 8 kHz mono silence as WAV."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 80)
    return buffer.getvalue()


PNG = red_pixel_png()
WAV = short_silence_wav()


def image() -> ToolContent:
    return ToolContent(kind="image", data=PNG, mime_type="image/png")


def text(value: str) -> ToolContent:
    return ToolContent(text=value)


def peer_of(context: ToolContext, tool: str) -> ClientPeer:
    if context.peer is None:
        raise ToolError(f"{tool} must be called through MCP: it asks the client back")
    return context.peer


# -- tools -----------------------------------------------------------------------


async def simple_text(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput.of_text("This is a simple text response for testing.")


async def image_content(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput(content=[image()])


async def audio_content(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput(content=[ToolContent(kind="audio", data=WAV, mime_type="audio/wav")])


async def embedded_resource(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    resource = ToolContent(
        kind="resource",
        uri="test://embedded-resource",
        mime_type="text/plain",
        text="This is an embedded resource content.",
    )
    return ToolOutput(content=[resource])


async def multiple_content_types(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    resource = ToolContent(
        kind="resource",
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}),
    )
    return ToolOutput(content=[text("Multiple content types test:"), image(), resource])


async def tool_with_logging(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    steps = ("Tool execution started", "Tool processing data", "Tool execution completed")
    for i, step in enumerate(steps):
        if i:
            await anyio.sleep(0.05)
        if ctx.notify is not None:
            await ctx.notify("log", {"level": "info", "message": step})
    return ToolOutput.of_text("Tool with logging executed successfully")


async def tool_with_progress(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    for i, done in enumerate((0, 50, 100)):
        if i:
            await anyio.sleep(0.05)
        if ctx.notify is not None:
            await ctx.notify("progress", {"progress": done, "total": 100})
    return ToolOutput.of_text("Tool with progress executed successfully")


async def error_handling(_args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    raise ToolError("This tool intentionally returns an error for testing")


async def sampling(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    reply = await peer_of(ctx, "test_sampling").sample(str(args["prompt"]), max_tokens=100)
    return ToolOutput.of_text(f"LLM response: {reply}")


def _describe(action: str, content: Mapping[str, Any] | None) -> str:
    return f"action={action}, content={json.dumps(content or {})}"


async def elicitation(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    reply = await peer_of(ctx, "test_elicitation").elicit(str(args["message"]), schema)
    return ToolOutput.of_text(f"User response: {_describe(reply.action, reply.content)}")


async def elicitation_defaults(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Your name", "default": "John Doe"},
            "age": {"type": "integer", "description": "Your age", "default": 30},
            "score": {"type": "number", "description": "Your score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "Account status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verified?", "default": True},
        },
    }
    reply = await peer_of(ctx, "test_elicitation_sep1034_defaults").elicit(
        "Please review and update the form fields with defaults", schema
    )
    return ToolOutput.of_text(f"Elicitation completed: {_describe(reply.action, reply.content)}")


def _titled(values: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in values]


async def elicitation_enums(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {
                "type": "string",
                "oneOf": _titled(
                    [("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third")]
                ),
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": _titled(
                        [("value1", "First Choice"), ("value2", "Second"), ("value3", "Third")]
                    )
                },
            },
        },
    }
    reply = await peer_of(ctx, "test_elicitation_sep1330_enums").elicit(
        "Please pick from the enum fields", schema
    )
    return ToolOutput.of_text(f"Elicitation completed: {_describe(reply.action, reply.content)}")


async def json_schema_2020_12(args: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
    return ToolOutput.of_text(f"Received: {json.dumps(dict(args), sort_keys=True)}")


async def reconnection(_args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    # Close this call's SSE stream mid-call (SEP-1699): the client reconnects
    # with Last-Event-ID and the result below reaches it by replay.
    closed = isinstance(ctx.peer, McpCallPeer) and await ctx.peer.request_reconnect()
    await anyio.sleep(0.2)
    return ToolOutput.of_text(f"Reconnection test completed (stream closed mid-call: {closed})")


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def _string_args(*names: str, description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description} for name in names},
        "required": list(names),
    }


def tools() -> list[Tool]:
    def tool(
        name: str, description: str, body: ToolBody, params: dict[str, Any] | None = None
    ) -> Tool:
        return ExampleTool(
            ToolSpec(name=name, description=description, parameters=params or NO_ARGUMENTS), body
        )

    return [
        tool("test_simple_text", "Returns simple text content", simple_text),
        tool("test_image_content", "Returns a 1x1 PNG image", image_content),
        tool("test_audio_content", "Returns a short WAV clip", audio_content),
        tool("test_embedded_resource", "Returns an embedded text resource", embedded_resource),
        tool(
            "test_multiple_content_types",
            "Returns text, image and resource",
            multiple_content_types,
        ),
        tool("test_tool_with_logging", "Sends three log messages while running", tool_with_logging),
        tool("test_tool_with_progress", "Reports progress 0, 50, 100 of 100", tool_with_progress),
        tool("test_error_handling", "Always fails", error_handling),
        tool(
            "test_sampling",
            "Asks the client's model to answer a prompt",
            sampling,
            _string_args("prompt", description="The prompt to send to the LLM"),
        ),
        tool(
            "test_elicitation",
            "Asks the client's user for a username and email",
            elicitation,
            _string_args("message", description="The message to show the user"),
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicits a form whose fields have defaults (SEP-1034)",
            elicitation_defaults,
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Elicits a form with every enum variant (SEP-1330)",
            elicitation_enums,
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json_schema_2020_12,
            JSON_SCHEMA_2020_12,
        ),
        tool("test_reconnection", "Closes its SSE stream mid-call, then answers", reconnection),
    ]


# -- resources and prompts ---------------------------------------------------------


async def template_data(variables: Mapping[str, str]) -> str:
    item = variables["id"]
    return json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})


def resources() -> list[StaticResource]:
    return [
        StaticResource(
            uri="test://static-text",
            name="static-text",
            description="A static text resource",
            text="This is the content of the static text resource.",
        ),
        StaticResource(
            uri="test://static-binary",
            name="static-binary",
            description="A static binary resource (1x1 PNG)",
            mime_type="image/png",
            data=PNG,
        ),
        StaticResource(
            uri="test://watched-resource",
            name="watched-resource",
            description="A resource clients may subscribe to",
            text="Watched resource content.",
        ),
    ]


async def simple_prompt(_args: Mapping[str, str]) -> list[PromptMessage]:
    return [PromptMessage(content=text("This is a simple prompt for testing."))]


async def prompt_with_arguments(args: Mapping[str, str]) -> list[PromptMessage]:
    line = f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"
    return [PromptMessage(content=text(line))]


async def prompt_with_embedded_resource(args: Mapping[str, str]) -> list[PromptMessage]:
    resource = ToolContent(
        kind="resource",
        uri=args["resourceUri"],
        mime_type="text/plain",
        text="Embedded resource content for testing.",
    )
    return [
        PromptMessage(content=resource),
        PromptMessage(content=text("Please process the embedded resource above.")),
    ]


async def prompt_with_image(_args: Mapping[str, str]) -> list[PromptMessage]:
    return [
        PromptMessage(content=image()),
        PromptMessage(content=text("Please analyze the image above.")),
    ]


def prompts() -> list[Prompt]:
    return [
        Prompt(
            name="test_simple_prompt",
            description="A prompt without arguments",
            render=simple_prompt,
        ),
        Prompt(
            name="test_prompt_with_arguments",
            description="A prompt with two required arguments",
            render=prompt_with_arguments,
            arguments=[
                PromptArgument(
                    name="arg1",
                    description="First test argument",
                    required=True,
                    choices=("paris", "park", "party", "test", "testing"),
                ),
                PromptArgument(name="arg2", description="Second test argument", required=True),
            ],
        ),
        Prompt(
            name="test_prompt_with_embedded_resource",
            description="A prompt embedding a resource",
            render=prompt_with_embedded_resource,
            arguments=[
                PromptArgument(
                    name="resourceUri", description="URI of the resource to embed", required=True
                )
            ],
        ),
        Prompt(
            name="test_prompt_with_image",
            description="A prompt with an image",
            render=prompt_with_image,
        ),
    ]


def build_server() -> ToolServer:
    """The conformance server: every tool, resource and prompt above."""
    return ToolServer(
        "agentrt-conformance",
        tools=tools(),
        resources=resources(),
        resource_templates=[
            ResourceTemplate(
                uri_template="test://template/{id}/data",
                name="template-data",
                description="JSON data for any id",
                mime_type="application/json",
                read=template_data,
                choices={"id": ("123", "456")},
            )
        ],
        prompts=prompts(),
        instructions="Conformance test server for agentrt's MCP hosting layer.",
    )


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (HTTP)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (HTTP; 0 picks one)")
    parser.add_argument("--stdio", action="store_true", help="serve one client on stdin/stdout")
    args = parser.parse_args(argv)
    configure_logging("WARNING" if args.stdio else "INFO")
    server = build_server()
    if args.stdio:
        await serve_stdio(server)
    else:
        await serve_streamable_http(server, HttpServeConfig(host=args.host, port=args.port))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has already shut down
        anyio.run(main)
