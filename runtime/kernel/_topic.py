"""Topics: publish one message to every subscribed actor.

A :class:`Topic` is a named set of subscriber refs.  ``publish`` delivers to
each subscriber's mailbox with ``tell``, in subscription order, so a full
subscriber mailbox slows the publisher down (backpressure reaches the source)
instead of buffering without bound.  A subscriber that has been stopped for
good is dropped from the topic on the next publish.  Topics are local
objects; subscribers are refs, so they can later be remote without changing
call sites.  This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from agentrt.runtime.kernel._actor_errors import ActorStopped
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.observe._log import get_logger

MsgT = TypeVar("MsgT")


class Topic(Generic[MsgT]):
    """A named fan-out point for messages of type ``MsgT``."""

    __slots__ = ("_subscribers", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._subscribers: dict[ActorAddress, ActorRef[MsgT, Any]] = {}

    def subscribe(self, ref: ActorRef[MsgT, Any]) -> None:
        """Add ``ref`` (idempotent: one delivery per address)."""
        self._subscribers.setdefault(ref.address, ref)

    def unsubscribe(self, ref: ActorRef[MsgT, Any]) -> None:
        """Remove ``ref`` if subscribed."""
        self._subscribers.pop(ref.address, None)

    @property
    def subscribers(self) -> tuple[ActorRef[MsgT, Any], ...]:
        return tuple(self._subscribers.values())

    async def publish(self, message: MsgT) -> int:
        """Tell ``message`` to every subscriber; returns how many got it."""
        delivered = 0
        for ref in list(self._subscribers.values()):
            try:
                await ref.tell(message)
            except ActorStopped:
                self._subscribers.pop(ref.address, None)
                get_logger(__name__).info(
                    "dropped a stopped subscriber", topic=self.name, actor=str(ref.address)
                )
            else:
                delivered += 1
        return delivered

    def __len__(self) -> int:
        return len(self._subscribers)

    def __repr__(self) -> str:
        return f"<Topic {self.name!r} subscribers={len(self._subscribers)}>"
