"""Where an agent's events go: event sinks (``EventLog``, ``stream_sink``) and
the ``EventEmitter`` that stamps events.  A sink is an async callable the
loop awaits, so a slow consumer slows the rollout down (backpressure, by
design).

May import protocols and anyio; nothing else of agentrt.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar, final

import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from agentrt.protocols._events import Event, TokenDelta

if TYPE_CHECKING:
    from agentrt.agents._token_stream import TokenPacer

EventSink = Callable[[Event], Awaitable[None]]
"""Receives each event; awaited by the emitter (backpressure)."""

E = TypeVar("E", bound=Event)


@final
class EventEmitter:
    """Stamps events (``seq``, ``ts``) and hands them to a sink, or drops
    them when there is none.  One emitter is shared by every rollout (and
    agent of a hierarchy) of a run, so ``seq`` strictly increases across
    the run's events.  Producers ask ``wants`` before building an event
    that is theirs alone to build (one per tool call, one per step): with
    no sink, or one that takes other kinds only, nothing is built.
    ``tokens``: set by whoever reads tokens (``TokenPacer``); ``None``: the
    model calls do not stream and no ``TokenDelta`` is built."""

    __slots__ = ("_clock", "_last", "_seq", "kinds", "sink", "tokens")

    def __init__(
        self,
        sink: EventSink | None = None,
        *,
        clock: Callable[[], float] = time.time,
        first_seq: int = 1,
        kinds: Iterable[type[Event]] | None = None,
    ):
        """``first_seq``: the first number stamped (a resumed run goes on
        after the events its earlier incarnation stored); ``kinds``: the
        event types the sink takes (``None``: all of them); the others are
        stamped (their ``seq`` is used up) but not delivered."""
        self.sink = sink
        self.kinds: frozenset[type[Event]] | None = frozenset(kinds) if kinds is not None else None
        self._seq = itertools.count(first_seq)
        self._last = first_seq - 1
        self._clock = clock
        self.tokens: TokenPacer | None = None

    def wants(self, kind: type[Event]) -> bool:
        """Whether an event of type ``kind`` would reach a sink."""
        return self.sink is not None and (self.kinds is None or kind in self.kinds)

    async def emit(self, event: E) -> E:
        """Stamp ``event`` and deliver it; returns the stamped event."""
        self._last = seq = next(self._seq)
        stamped = msgspec.structs.replace(event, seq=seq, ts=self._clock())
        if self.sink is not None and (self.kinds is None or type(event) in self.kinds):
            await self.sink(stamped)
        return stamped

    async def emit_token(self, event: TokenDelta) -> None:
        """Deliver a ``TokenDelta`` stamped with the ``seq`` of the event
        before it: tokens take no number of their own (they are not stored,
        and would leave gaps in the numbers of what is)."""
        if self.sink is not None and (self.kinds is None or TokenDelta in self.kinds):
            await self.sink(msgspec.structs.replace(event, seq=self._last, ts=self._clock()))


@final
class EventLog:
    """A sink that keeps events in memory (all, or the last ``maxlen``)."""

    def __init__(self, maxlen: int | None = None) -> None:
        self._events: deque[Event] = deque(maxlen=maxlen)

    async def __call__(self, event: Event) -> None:
        self._events.append(event)

    @property
    def events(self) -> list[Event]:
        return list(self._events)

    def of_type(self, kind: type[E]) -> list[E]:
        """The events of one type, in order."""
        return [e for e in self._events if isinstance(e, kind)]

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)


def stream_sink(stream: MemoryObjectSendStream[Event]) -> EventSink:
    """A sink sending into ``stream`` (waits while it is full; create it
    bounded, e.g. ``anyio.create_memory_object_stream[Event](64)``)."""

    async def send(event: Event) -> None:
        await stream.send(event)

    return send


__all__ = ["EventEmitter", "EventLog", "EventSink", "stream_sink"]
