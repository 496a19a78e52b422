"""An incremental decoder for server-sent events (``text/event-stream``).

Owns the byte-level framing of SSE only: lines ending in LF, CRLF or CR,
``data:`` fields joined by newlines, a blank line ending an event, comment
lines (``:``) and other fields (``event:``, ``id:``, ``retry:``) ignored.
Model servers put one JSON document in each event's data; decoding that is
the backend's job.  Pure and synchronous: no I/O, no project imports.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Feed it the body's chunks as they arrive; get back each complete
    event's data.  Events whose data is empty are dropped."""

    __slots__ = ("_data", "_partial")

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event completed by ``chunk``."""
        if self._partial:
            chunk = self._partial + chunk
        if b"\r" in chunk:
            # Rare in practice (servers send LF); normalise CRLF and bare CR.
            # A CR at the very end may be the first half of a CRLF: keep it.
            tail = b"\r" if chunk.endswith(b"\r") else b""
            if tail:
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        lines = chunk.split(b"\n")
        self._partial = lines.pop()
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    event = data[0] if len(data) == 1 else b"\n".join(data)
                    if event:
                        events.append(event)
                    data.clear()
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            # Comments (":") and the fields event:/id:/retry: carry nothing
            # a chat-completions client needs.
        return events

    def close(self) -> list[bytes]:
        """Call at the end of the body: the data of an event whose closing
        blank line never came (lenient; a torn last line is dropped)."""
        events: list[bytes] = []
        if self._data:
            event = b"\n".join(self._data)
            if event:
                events.append(event)
            self._data.clear()
        self._partial = b""
        return events
