"""What a hosted tool server offers besides tools: resources and prompts.

* ``StaticResource``: a fixed URI with a fixed text or binary body.
* ``ResourceTemplate``: an RFC 6570 URI template (``test://items/{id}``)
  whose body is computed from the matched variables by an async reader.
* ``Prompt``: a named message template with declared arguments, rendered by
  an async function into ``PromptMessage``s (whose content is ``ToolContent``,
  so prompts carry text, images, audio and embedded resources like tools do).

Arguments of prompts and variables of templates may list ``choices``; the
server answers ``completion/complete`` from them.

Plain definitions: no MCP session, no transport.  Imports ``agentrt.tools._tool``,
the runtime errors and the SDK's URI-template matcher only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import lru_cache
from typing import Literal

import msgspec
from mcp import InvalidUriTemplate, UriTemplate

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools._tool import ToolContent

#: Computes a templated resource's body from the URI's variables.  An
#: ``mcp.shared.exceptions.MCPError`` it raises reaches the client as is (for
#: example ``RESOURCE_NOT_FOUND`` for an unknown id); anything else becomes
#: an internal error naming the URI.
ResourceReader = Callable[[Mapping[str, str]], Awaitable[str | bytes]]


class ListedResource(msgspec.Struct, frozen=True, kw_only=True):
    """A resource a template currently names, as ``resources/list`` shows it."""

    uri: str
    name: str
    description: str = ""


#: What a template lists among the resources (the newest runs, say): called
#: on every ``resources/list``; its URIs must match the template.
ResourceLister = Callable[[], Awaitable[Sequence[ListedResource]]]


class StaticResource(msgspec.Struct, frozen=True, kw_only=True):
    """A resource with a fixed body: ``text`` for text, ``data`` for binary."""

    uri: str
    name: str
    description: str = ""
    mime_type: str = "text/plain"
    text: str | None = None
    data: bytes | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.data is None):
            raise ConfigError(
                f"resource {self.uri!r}: give exactly one of text (text body) or data (binary body)"
            )

    @property
    def body(self) -> str | bytes:
        """The text, or the binary data."""
        return self.text if self.text is not None else (self.data or b"")


class ResourceTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """Resources named by a URI template; ``read`` receives the variables."""

    uri_template: str
    name: str
    read: ResourceReader
    description: str = ""
    mime_type: str = "text/plain"
    #: Values offered by ``completion/complete`` for each variable.
    choices: Mapping[str, Sequence[str]] = msgspec.field(default_factory=dict)
    #: Resources it names that ``resources/list`` shows (none if unset).
    listing: ResourceLister | None = None

    def __post_init__(self) -> None:
        try:
            _parse(self.uri_template)
        except InvalidUriTemplate as exc:
            raise ConfigError(f"resource template {self.uri_template!r}: {exc}") from exc

    def match(self, uri: str) -> dict[str, str] | None:
        """The template's variables if ``uri`` matches, else ``None``.
        List-valued (exploded) variables are joined with commas."""
        found = _parse(self.uri_template).match(uri)
        if found is None:
            return None
        return {k: v if isinstance(v, str) else ",".join(v) for k, v in found.items()}


class PromptArgument(msgspec.Struct, frozen=True, kw_only=True):
    """One argument a prompt takes."""

    name: str
    description: str = ""
    required: bool = False
    #: Values offered by ``completion/complete``.
    choices: Sequence[str] = ()


class PromptMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a rendered prompt."""

    content: ToolContent
    role: Literal["user", "assistant"] = "user"


#: Renders a prompt from its (already checked) arguments.
PromptRenderer = Callable[[Mapping[str, str]], Awaitable[Sequence[PromptMessage]]]


class Prompt(msgspec.Struct, frozen=True, kw_only=True):
    """A named prompt template a client can list and render."""

    name: str
    render: PromptRenderer
    description: str = ""
    arguments: Sequence[PromptArgument] = ()

    def missing_arguments(self, given: Mapping[str, str]) -> list[str]:
        """Names of required arguments absent from ``given``."""
        return [a.name for a in self.arguments if a.required and a.name not in given]


@lru_cache(maxsize=256)
def _parse(template: str) -> UriTemplate:
    return UriTemplate.parse(template)


def complete(choices: Sequence[str], prefix: str, *, limit: int = 100) -> tuple[list[str], int]:
    """Choices starting with ``prefix`` (case-insensitively), at most
    ``limit`` of them (MCP's cap per response), and how many matched."""
    wanted = prefix.casefold()
    hits = [c for c in choices if c.casefold().startswith(wanted)]
    return hits[:limit], len(hits)
