"""agentrt messages and tool specs in a chat request's shape, and
``EncodedParts``, which encodes each of them once.

The model client sends these; the sim-server reads the tools back with the
same ``ToolDef``.  Every Struct is ``gc=False`` (no cycles; spares the
collector per call).

Pure data: no I/O.  Imports only ``agentrt.protocols``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import msgspec

from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.wire._common import encoder

__all__ = ["EncodedParts", "FunctionDef", "ToolDef", "wire_messages"]


class _System(msgspec.Struct, gc=False, tag="system", tag_field="role", omit_defaults=True):
    content: str
    name: str | None = None


class _User(msgspec.Struct, gc=False, tag="user", tag_field="role", omit_defaults=True):
    content: str | list[TextPart | ImagePart]
    name: str | None = None


class _Assistant(msgspec.Struct, gc=False, tag="assistant", tag_field="role", omit_defaults=True):
    # ``content`` may be null only beside tool calls; reasoning is never sent
    # back (several servers reject it in requests).
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None


class _Tool(msgspec.Struct, gc=False, tag="tool", tag_field="role", omit_defaults=True):
    content: str
    tool_call_id: str
    name: str | None = None


_WireMessage = _System | _User | _Assistant | _Tool


def _assistant(m: AssistantMessage) -> _Assistant:
    if m.tool_calls:
        return _Assistant(m.content, m.tool_calls, m.name)
    return _Assistant("" if m.content is None else m.content, None, m.name)


# Dispatch on the exact type: cheaper than a match statement on a hot path
# that converts the whole (growing) conversation on every call.
_TO_WIRE: dict[type[Any], Callable[[Any], _WireMessage]] = {
    SystemMessage: lambda m: _System(m.content, m.name),
    UserMessage: lambda m: _User(m.content, m.name),
    AssistantMessage: _assistant,
    ToolMessage: lambda m: _Tool(m.content, m.tool_call_id, m.name),
}


def wire_messages(messages: list[ChatMessage]) -> list[_WireMessage]:
    """agentrt messages in the request shape: optional fields left out
    rather than sent as ``null`` or ``[]`` (OpenAI rejects an empty
    ``tool_calls`` and some servers a ``null`` name)."""
    to_wire = _TO_WIRE
    return [to_wire[type(m)](m) for m in messages]


def _no_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class FunctionDef(msgspec.Struct, gc=False, omit_defaults=True):
    """The ``function`` of a tool in a chat request, as clients send it and a
    lenient server (the sim-server) reads it; the daemon's strict reading is
    ``FunctionDefIn``."""

    name: str
    parameters: dict[str, Any] = msgspec.field(default_factory=_no_parameters)
    description: str = ""


class ToolDef(msgspec.Struct, gc=False):
    """A tool of a chat request's ``tools`` (see ``FunctionDef``)."""

    function: FunctionDef
    type: str = "function"


class EncodedParts:
    """Messages and tool specs encoded once, reused by identity.

    A conversation grows by appending, and every call re-sends it whole:
    re-encoding the same frozen messages each step is most of the request
    encoding work.  This keeps each message's (and tool spec's) JSON as
    ``msgspec.Raw``, keyed by ``id()``; an entry holds the object itself, so
    its id cannot be reused while cached.  Bounded in entries and in encoded
    bytes (the objects it keeps alive weigh about as much again): past
    either bound the oldest tenth is dropped, and a later miss re-encodes.
    Assumes what frozen Structs promise: their lists and dicts are not
    mutated in place.
    """

    __slots__ = ("_bytes", "_objects", "_raw", "max_bytes", "max_entries")

    def __init__(self, max_entries: int = 65_536, max_bytes: int = 32 << 20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        # Two flat dicts rather than one of (object, raw) pairs: no tuple per
        # entry for the cyclic garbage collector to walk.
        self._raw: dict[int, msgspec.Raw] = {}
        self._objects: dict[int, object] = {}
        self._bytes = 0

    def messages(self, messages: list[ChatMessage]) -> list[msgspec.Raw]:
        """Each message in the request shape (see :func:`wire_messages`)."""
        # A hit needs no identity check: the entry holds its object alive,
        # so no other live object can have its id.  (A Raw is never empty.)
        get = self._raw.get
        return [get(id(m)) or self._store(m, _TO_WIRE[type(m)](m)) for m in messages]

    def tools(self, tools: list[ToolSpec]) -> list[msgspec.Raw]:
        """Each tool spec in the request's ``tools`` shape."""
        get = self._raw.get
        return [
            get(id(t)) or self._store(t, ToolDef(FunctionDef(t.name, t.parameters, t.description)))
            for t in tools
        ]

    def _store(self, obj: object, value: msgspec.Struct) -> msgspec.Raw:
        raws = self._raw
        data = encoder.encode(value)
        if len(raws) >= self.max_entries or self._bytes + len(data) > self.max_bytes:
            for old in list(itertools.islice(raws, max(1, len(raws) // 10))):
                self._bytes -= len(raws.pop(old))
                del self._objects[old]
        raw = msgspec.Raw(data)
        raws[id(obj)] = raw
        self._objects[id(obj)] = obj
        self._bytes += len(data)
        return raw

    @property
    def encoded_bytes(self) -> int:
        """Bytes of JSON held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._raw)
