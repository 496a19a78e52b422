"""A server's resources as an agent sees them: the tools that list and read
them (``<server>__resources_list``, ``__resources_templates_list``,
``__resources_read``), URI templates expanded from arguments, and the text a
read becomes (text clipped at the policy's size, binary contents named by
reference, never inlined).

Pure translation: the connection sends the requests.  Must not import
agents or aggregators.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from agentrt.tools._tool import ToolContent
from agentrt.tools.mcp._content import page_text

if TYPE_CHECKING:  # spec validation expands templates without loading the SDK
    import mcp_types as types

__all__ = [
    "LIST",
    "READ",
    "RESOURCE_TOOLS",
    "TEMPLATES",
    "expand_template",
    "listing_text",
    "read_text",
    "templates_text",
]

#: The remote names of the resource tools: MCP method names, which no
#: server's tool can have (a tool name has no ``/`` in the spec).
LIST: Final = "resources/list"
TEMPLATES: Final = "resources/templates/list"
READ: Final = "resources/read"

_CURSOR = {
    "type": "object",
    "properties": {
        "cursor": {
            "type": "string",
            "description": "The next_cursor of the previous page; omit for the first page.",
        }
    },
}

#: remote name -> (description, input schema).
RESOURCE_TOOLS: Final[Mapping[str, tuple[str, dict[str, Any]]]] = {
    LIST: (
        "List the resources this MCP server offers (one page: uri, name, MIME type, "
        "description; pass next_cursor back for the next page).",
        _CURSOR,
    ),
    TEMPLATES: (
        "List this MCP server's resource URI templates (RFC 6570, e.g. "
        "file:///{path}); fill one in and read it with the read tool.",
        _CURSOR,
    ),
    READ: (
        "Read one resource of this MCP server by its URI (from the list, or a template "
        "filled in). Text comes back as text; binary contents are described, not shown.",
        {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
        },
    ),
}

_VARIABLE = re.compile(r"\{([+#./;?&]?)([^{}]+)\}")
#: Characters RFC 6570 leaves as they are in a reserved (``{+var}``) expansion.
_RESERVED = ":/?#[]@!$&'()*+,;="


def expand_template(template: str, arguments: Mapping[str, str]) -> str:
    """``template`` (an RFC 6570 URI template, levels 1 and 2: ``{var}``,
    ``{+var}``, ``{#var}``) with ``arguments`` substituted, percent-encoded.
    Raises ``KeyError`` naming a variable without an argument."""

    def substitute(match: re.Match[str]) -> str:
        operator, names = match.group(1), match.group(2)
        values = []
        for name in names.split(","):
            if name not in arguments:
                raise KeyError(name)
            safe = _RESERVED if operator in ("+", "#") else ""
            values.append(urllib.parse.quote(str(arguments[name]), safe=safe))
        prefix = {"#": "#", ".": ".", "/": "/"}.get(operator, "")
        joiner = {".": ".", "/": "/"}.get(operator, ",")
        return prefix + joiner.join(values)

    return _VARIABLE.sub(substitute, template)


def listing_text(page: types.ListResourcesResult) -> str:
    """One page of ``resources/list`` as JSON for the model."""
    resources = (
        {
            "uri": str(r.uri),
            "name": r.name,
            "title": r.title,
            "mime_type": r.mime_type,
            "description": r.description,
            "size": r.size,
        }
        for r in page.resources
    )
    return page_text("resources", resources, page.next_cursor)


def templates_text(page: types.ListResourceTemplatesResult) -> str:
    """One page of ``resources/templates/list`` as JSON for the model."""
    templates = (
        {
            "uri_template": t.uri_template,
            "name": t.name,
            "title": t.title,
            "mime_type": t.mime_type,
            "description": t.description,
        }
        for t in page.resource_templates
    )
    return page_text("resource_templates", templates, page.next_cursor)


def _as_text(content: ToolContent) -> str | None:
    """The content's text: its text, or a blob of a textual MIME type that
    decodes as UTF-8; None for binary contents."""
    if not content.data:
        return content.text
    mime = content.mime_type.split(";", 1)[0].strip().lower()
    if not (mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))):
        return None
    try:
        return content.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_TEXT_TYPES: Final = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/javascript"}
)


def read_text(contents: Sequence[ToolContent], *, max_chars: int) -> str:
    """What a read shows the model: each text content, and each blob of a
    textual MIME type (``text/*``, JSON, XML, YAML) decoded, clipped past
    ``max_chars`` in all saying how much was left out; each binary one as a
    reference (URI, MIME type, size), never inlined."""
    parts: list[str] = []
    left = max_chars
    for content in contents:
        text = _as_text(content)
        if text is None:
            mime = content.mime_type or "application/octet-stream"
            parts.append(f"[binary resource {content.uri} ({mime}, {len(content.data)} bytes)]")
            continue
        full = len(text)
        if full > left:
            text = f"{text[:left]}\n[... {full - left} more characters of {content.uri} not shown]"
        left = max(0, left - full)
        parts.append(text)
    return "\n".join(parts)
