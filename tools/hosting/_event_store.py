"""A bounded in-memory event store: lets streamable HTTP clients resume.

The SDK's streamable HTTP transport numbers every server-to-client SSE event
through an ``EventStore``; a client whose stream broke (or that the server
asked to reconnect) sends ``Last-Event-ID`` and gets the events after it
replayed.  This store keeps the last ``capacity`` events of all sessions:
older ones are forgotten, and a client that asks for one gets nothing
replayed (it has been away too long).

Event ids are random, so a client cannot ask for another session's events
by guessing.  Knows nothing of tools; imports the SDK transport types only.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import final

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage


@final
class MemoryEventStore(EventStore):
    """The last ``capacity`` SSE events, for ``Last-Event-ID`` replay."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"MemoryEventStore capacity must be positive, got {capacity}")
        self.capacity = capacity
        # Insertion order is event order: replay walks forward from a hit.
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | None]] = OrderedDict()

    @property
    def size(self) -> int:
        """Events held now.  (Not ``__len__``: the SDK tests the store for
        truth, and an empty store must still count as configured.)"""
        return len(self._events)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = secrets.token_hex(12)
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self.capacity:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        found = self._events.get(last_event_id)
        if found is None:
            return None
        stream_id = found[0]
        later: list[tuple[EventId, JSONRPCMessage]] = []
        seen = False
        for event_id, (stream, message) in self._events.items():
            if seen and stream == stream_id and message is not None:
                later.append((event_id, message))
            seen = seen or event_id == last_event_id
        # Sent after the walk: sending yields, and the store may grow meanwhile.
        for event_id, message in later:
            await send_callback(EventMessage(message, event_id))
        return stream_id
