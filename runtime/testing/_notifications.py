"""``RecordingSink``: a notification sink that records ``(kind, payload)``
pairs (progress, log, state) and lets a test wait for one.

Fits any sink of that shape, e.g. ``ToolContext.notify`` or an MCP
connection's ``on_notification``.  Runtime floor: imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, final

import anyio


@final
class RecordingSink:
    """Collects ``(kind, payload)`` notifications in arrival order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._changed = anyio.Event()

    async def __call__(self, kind: str, payload: Mapping[str, Any]) -> None:
        self.events.append((kind, dict(payload)))
        self._changed.set()
        self._changed = anyio.Event()

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The payloads of one kind, in arrival order."""
        return [p for k, p in self.events if k == kind]

    async def wait_for(
        self, kind: str, pred: Callable[[dict[str, Any]], bool], within: float
    ) -> dict[str, Any]:
        """The first payload of ``kind`` matching ``pred``, waiting up to
        ``within`` seconds for it (``TimeoutError`` after that)."""
        with anyio.fail_after(within):
            while True:
                changed = self._changed
                for payload in self.of(kind):
                    if pred(payload):
                        return payload
                await changed.wait()
