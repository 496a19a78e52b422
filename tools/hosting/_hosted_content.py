"""Translation between agentrt tool content and MCP content blocks.

Owns the one mapping from ``ToolContent`` kinds to MCP wire content:
``"text"`` -> ``TextContent``, ``"image"`` -> ``ImageContent``, ``"audio"`` ->
``AudioContent`` (binary data base64-encoded), ``"resource"`` ->
``EmbeddedResource`` (text or blob contents), and ``ToolOutput`` ->
``CallToolResult``.  Pure functions, no I/O.

Imports the MCP wire types and ``agentrt.tools._tool`` only; knows nothing of
servers, sessions or transports.
"""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as mcp
import msgspec

from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._tool import ToolContent, ToolOutput

#: What an MCP message or tool result may carry.
ContentBlock = (
    mcp.TextContent | mcp.ImageContent | mcp.AudioContent | mcp.ResourceLink | mcp.EmbeddedResource
)

#: The body of one resource, as ``resources/read`` and embedded resources carry it.
ResourceContents = mcp.TextResourceContents | mcp.BlobResourceContents

_BINARY_KINDS = ("image", "audio")


def resource_contents(uri: str, mime_type: str, body: str | bytes) -> ResourceContents:
    """Text bodies travel as ``text``, binary ones base64-encoded as ``blob``."""
    mime = mime_type or ("text/plain" if isinstance(body, str) else "application/octet-stream")
    if isinstance(body, str):
        return mcp.TextResourceContents(uri=uri, mime_type=mime, text=body)
    return mcp.BlobResourceContents(uri=uri, mime_type=mime, blob=_b64(body))


def content_block(item: ToolContent, *, where: str) -> ContentBlock:
    """One ``ToolContent`` as an MCP content block.

    Raises ``ToolError`` naming ``where`` (the tool or prompt) for a kind MCP
    cannot carry or binary content without a MIME type."""
    match item.kind:
        case "text":
            return mcp.TextContent(text=item.text)
        case "image" | "audio":
            if not item.mime_type:
                raise ToolError(f"{where}: {item.kind} content needs a mime_type")
            if item.kind == "image":
                return mcp.ImageContent(data=_b64(item.data), mime_type=item.mime_type)
            return mcp.AudioContent(data=_b64(item.data), mime_type=item.mime_type)
        case "resource":
            if not item.uri:
                raise ToolError(f"{where}: resource content needs a uri")
            # Text wins when both are set: a resource with text is a text resource.
            body: str | bytes = item.text if item.text or not item.data else item.data
            return mcp.EmbeddedResource(resource=resource_contents(item.uri, item.mime_type, body))
        case other:
            raise ToolError(
                f"{where}: content kind {other!r} has no MCP form "
                f"(expected text, {', '.join(_BINARY_KINDS)} or resource)"
            )


def call_result(output: ToolOutput, *, tool: str) -> mcp.CallToolResult:
    """A ``ToolOutput`` as the ``tools/call`` result the client receives."""
    blocks = [content_block(item, where=f"tool {tool!r}") for item in output.content]
    return mcp.CallToolResult(
        content=blocks,
        is_error=output.is_error,
        structured_content=_structured(output.structured),
    )


def error_result(message: str) -> mcp.CallToolResult:
    """A failed call as MCP says to report it: a result with ``isError``, so
    the model on the client side reads the message instead of the call
    blowing up as a protocol error."""
    return mcp.CallToolResult(content=[mcp.TextContent(text=message)], is_error=True)


def _structured(value: Any) -> dict[str, Any] | None:
    # MCP's structuredContent is a JSON object; other values are wrapped the
    # way the SDK wraps a function's non-object return.
    if value is None:
        return None
    plain = msgspec.to_builtins(value)
    return plain if isinstance(plain, dict) else {"result": plain}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
