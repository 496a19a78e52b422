"""The ``Tool`` protocol: what the agent loop calls.

A tool has a ``ToolSpec`` (name, description, JSON schema of its arguments)
and an async ``call`` taking the *already parsed* JSON arguments.  It returns
a ``ToolOutput``; failures the model can act on (bad arguments, a file that
does not exist, a tool server that is down) come back as ``ToolOutput`` with
``is_error=True`` or as ``agentrt.runtime.kernel._errors.ToolError``, which the agent
loop turns into an error message for the model, never a crash.

A ``ToolContext`` carries what a call may need from its caller: the run and
rollout ids, a deadline, and a sink for progress/log events.

This module may import protocols and the runtime floor; never agents or
aggregators.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from agentrt.protocols._tools import ToolApproval, ToolSpec


class ToolContent(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of tool output: text, or binary data (image/audio) with a
    MIME type, or an embedded resource by URI."""

    kind: str = "text"  # "text" | "image" | "audio" | "resource"
    text: str = ""
    data: bytes = b""
    mime_type: str = ""
    uri: str = ""
    audience: tuple[str, ...] = ()
    """Who the block is meant for: ``"user"``, ``"assistant"`` (MCP
    ``annotations.audience``); empty when the tool does not say."""
    priority: float | None = None
    """How much the block matters, 0 (optional) to 1 (required) (MCP
    ``annotations.priority``); None when the tool does not say."""


#: The priority of a block that states none, when others do (MCP: 0 to 1).
_UNSTATED_PRIORITY: Final = 0.5


def _shown(content: ToolContent) -> str:
    if content.kind == "text":
        return content.text
    if content.kind == "resource":
        if content.text or not content.data:
            return content.text or f"[resource {content.uri}]"
        # An embedded binary resource, named as a resource read names one.
        mime = content.mime_type or "application/octet-stream"
        return f"[binary resource {content.uri} ({mime}, {len(content.data)} bytes)]"
    return f"[{content.kind} {content.mime_type}, {len(content.data)} bytes]"


class ToolOutput(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool returned.  ``text`` is what the model sees, ``user_text``
    what is meant for the person behind the run."""

    content: list[ToolContent] = []
    is_error: bool = False
    structured: Any = None
    approval: ToolApproval | None = None
    """The approval the call waited for (set by ``ApprovalGate``), recorded
    on the call's ``ToolResult``."""

    @property
    def text(self) -> str:
        """The blocks meant for the model (no ``audience``, or one with
        ``"assistant"``), most important first when any states a
        ``priority`` (highest first; one without counts as 0.5), so a
        clipped result keeps what matters.  A result meant only for the
        person says so."""
        blocks = [c for c in self.content if not c.audience or "assistant" in c.audience]
        if not blocks and self.content:
            return "[the tool's result is meant for the user and was shown to them]"
        if any(c.priority is not None for c in blocks):
            blocks.sort(
                key=lambda c: -(c.priority if c.priority is not None else _UNSTATED_PRIORITY)
            )
        return "\n".join(_shown(c) for c in blocks)

    @property
    def user_text(self) -> str:
        """The blocks whose ``audience`` names ``"user"`` (empty if none)."""
        return "\n".join(_shown(c) for c in self.content if "user" in c.audience)

    @classmethod
    def of_text(cls, text: str, *, is_error: bool = False) -> ToolOutput:
        return cls(content=[ToolContent(text=text)], is_error=is_error)


#: Receives progress and log notifications from a running tool:
#: ``(kind, payload)`` with kind ``"progress"`` or ``"log"``.
#: ``"progress"`` payload: ``progress`` (number, required), ``total`` (number)
#: and ``message`` (str), both optional.  ``"log"`` payload: ``message`` (str)
#: or ``data`` (any JSON value), ``level`` (an RFC 5424 name: ``"debug"``,
#: ``"info"``, ... ``"emergency"``; default ``"info"``) and ``logger`` (str).
NotificationSink = Callable[[str, Mapping[str, Any]], Awaitable[None]]


class ElicitationReply(msgspec.Struct, frozen=True, kw_only=True):
    """What the user answered when a tool asked for input: ``action`` is
    ``"accept"``, ``"decline"`` or ``"cancel"``; ``content`` holds the form
    fields when accepted."""

    action: str
    content: dict[str, Any] | None = None


@runtime_checkable
class ClientPeer(Protocol):
    """The client on the other end of a call, when it can be asked things
    back (an MCP client hosting a model or a user).  Methods raise
    ``ToolError`` when the client cannot or will not answer."""

    async def sample(
        self, prompt: str, *, max_tokens: int, system_prompt: str | None = None
    ) -> str:
        """Ask the client's model to complete ``prompt``; returns its text."""
        ...

    async def elicit(self, message: str, requested_schema: Mapping[str, Any]) -> ElicitationReply:
        """Ask the client's user to fill a form described by a flat JSON schema."""
        ...


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call may know about its caller.  ``peer`` is set when the
    caller can be asked things back (a hosted MCP call); ``None`` otherwise."""

    run_id: str = ""
    rollout_id: str = ""
    call_id: str = ""
    idempotency_key: str = ""
    """Names this call across retries and crashes (``<rollout_id>/<step>/
    <call_id>``): a call made again after the run resumed carries the same
    key, so a tool with side effects can do them once (MCP servers get it
    in the request's ``_meta`` as ``io.agentrt/idempotency-key``).  Empty
    when the caller names no step."""
    timeout_s: float | None = None
    notify: NotificationSink | None = None
    peer: ClientPeer | None = None


@runtime_checkable
class Tool(Protocol):
    """Something an agent can call."""

    @property
    def spec(self) -> ToolSpec:
        """Name, description and JSON schema offered to the model."""
        ...

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Run with parsed arguments.  Raise ``ToolError`` (or return an
        error output) for failures the model should hear about."""
        ...
