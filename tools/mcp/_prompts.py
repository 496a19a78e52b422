"""A server's prompts as an agent sees them: the tools that list and get
them (``<server>__prompts_list``, ``<server>__prompts_get``) and a prompt's
messages as (role, text) pairs: text as it is, embedded text resources
inlined, images, audio and links named.

Pure translation: the connection sends the requests.  Must not import
agents or aggregators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from agentrt.tools.mcp._content import page_text

if TYPE_CHECKING:
    import mcp_types as types

__all__ = ["GET", "LIST", "PROMPT_TOOLS", "prompt_messages", "prompts_text"]

LIST: Final = "prompts/list"
GET: Final = "prompts/get"

#: remote name -> (description, input schema).
PROMPT_TOOLS: Final[Mapping[str, tuple[str, dict[str, Any]]]] = {
    LIST: (
        "List the prompts (message templates) this MCP server offers (one page: name, "
        "description, arguments; pass next_cursor back for the next page).",
        {
            "type": "object",
            "properties": {
                "cursor": {
                    "type": "string",
                    "description": "The next_cursor of the previous page; omit for the first.",
                }
            },
        },
    ),
    GET: (
        "Get one of this MCP server's prompts, filled in with its arguments: its messages.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The prompt's name."},
                "arguments": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "The prompt's arguments by name.",
                },
            },
            "required": ["name"],
        },
    ),
}


def prompts_text(page: types.ListPromptsResult) -> str:
    """One page of ``prompts/list`` as JSON for the model."""
    prompts = (
        {
            "name": p.name,
            "title": p.title,
            "description": p.description,
            "arguments": [
                {"name": a.name, "description": a.description, "required": bool(a.required)}
                for a in p.arguments or ()
            ]
            or None,
        }
        for p in page.prompts
    )
    return page_text("prompts", prompts, page.next_cursor)


def _text(block: types.ContentBlock) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind == "resource":
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None)
        uri = getattr(resource, "uri", "")
        return str(text) if text is not None else f"[binary resource {uri}]"
    if kind == "resource_link":
        return f"[resource link {getattr(block, 'uri', '')}]"
    return f"[{kind} {getattr(block, 'mime_type', '') or ''}]".replace(" ]", "]")


def prompt_messages(result: types.GetPromptResult) -> list[tuple[str, str]]:
    """A ``prompts/get`` result's messages as (role, text) pairs."""
    return [(str(m.role), _text(m.content)) for m in result.messages]
