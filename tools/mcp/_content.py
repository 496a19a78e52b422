"""MCP content blocks -> agentrt ``ToolContent``.

Owns the translation of what an MCP server returns (text, image, audio,
embedded resources, resource links, resource contents) into the runtime's
``ToolOutput``, each block's annotations (audience, priority) kept.  Binary
data arrives base64-encoded; it is decoded here, and a block whose base64 is
broken becomes a text note rather than an exception, so one bad block cannot
hide the rest of a result.

Must not import agents or aggregators.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types as types
import msgspec

from agentrt.tools._tool import ToolContent, ToolOutput

__all__ = ["page_text", "resource_contents", "tool_output"]


def _decode(data: str, what: str) -> tuple[bytes, str | None]:
    try:
        return base64.b64decode(data, validate=True), None
    except (binascii.Error, ValueError) as exc:
        return b"", f"[{what}: the server sent invalid base64 ({exc})]"


def _resource(res: types.TextResourceContents | types.BlobResourceContents) -> ToolContent:
    mime = res.mime_type or ""
    if isinstance(res, types.TextResourceContents):
        return ToolContent(kind="resource", text=res.text, uri=str(res.uri), mime_type=mime)
    data, problem = _decode(res.blob, f"resource {res.uri}")
    if problem is not None:
        return ToolContent(kind="text", text=problem)
    return ToolContent(kind="resource", data=data, uri=str(res.uri), mime_type=mime)


def _annotated(content: ToolContent, annotations: types.Annotations | None) -> ToolContent:
    """``content`` with the block's audience and priority, when it has them."""
    if annotations is None or (annotations.audience is None and annotations.priority is None):
        return content
    return msgspec.structs.replace(
        content, audience=tuple(annotations.audience or ()), priority=annotations.priority
    )


def _block(block: types.ContentBlock) -> ToolContent:
    return _annotated(_content(block), block.annotations)


def _content(block: types.ContentBlock) -> ToolContent:
    match block:
        case types.TextContent(text=text):
            return ToolContent(kind="text", text=text)
        case (
            types.ImageContent(data=data, mime_type=mime)
            | types.AudioContent(data=data, mime_type=mime)
        ):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            raw, problem = _decode(data, kind)
            if problem is not None:
                return ToolContent(kind="text", text=problem)
            return ToolContent(kind=kind, data=raw, mime_type=mime)
        case types.EmbeddedResource(resource=res):
            return _resource(res)
        case types.ResourceLink():
            label = block.title or block.name
            about = f": {block.description}" if block.description else ""
            return ToolContent(
                kind="resource",
                text=f"[resource link {block.uri} ({label}){about}]",
                uri=str(block.uri),
                mime_type=block.mime_type or "",
            )


def tool_output(result: types.CallToolResult) -> ToolOutput:
    """A ``CallToolResult`` as a ``ToolOutput`` (``is_error`` and
    ``structuredContent`` carried over)."""
    content = [_block(b) for b in result.content]
    if not content and result.structured_content is not None:
        # A server may answer with structured content only; the model reads text.
        content = [ToolContent(kind="text", text=json.dumps(result.structured_content))]
    return ToolOutput(
        content=content, is_error=bool(result.is_error), structured=result.structured_content
    )


def resource_contents(
    contents: Iterable[types.TextResourceContents | types.BlobResourceContents],
) -> list[ToolContent]:
    """The contents of a ``resources/read`` result."""
    return [_resource(c) for c in contents]


def page_text(key: str, items: Iterable[Mapping[str, Any]], next_cursor: str | None) -> str:
    """One page of a ``*/list`` answer as JSON for the model: the ``items``
    under ``key``, each without its unset (``None``) fields, and the cursor
    of the next page."""
    shown = [{k: v for k, v in item.items() if v is not None} for item in items]
    return json.dumps({key: shown, "next_cursor": next_cursor})
