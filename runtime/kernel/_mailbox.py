"""The bounded mailbox of one actor address (``Mailbox``), and the ``ask``
envelope.  It parks an idle receiver on one loop future, an asyncio seam
(docs/design/event-loop.md; why: docs/design/performance.md, "The idle actor").

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Final

from agentrt.runtime.kernel._actor_errors import ActorStopped, MailboxFull
from agentrt.runtime.kernel._address import ActorAddress

#: Why 64: large enough that a producer and a busy actor trade messages in
#: batches (one context switch per batch, not per message), small enough that
#: a slow actor pushes back on its senders after 64 messages instead of hiding
#: a backlog (and its memory) in a queue nobody sees.
DEFAULT_MAILBOX_CAPACITY: Final = 64


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: ``take_nowait`` found nothing to take.
EMPTY: Final = _Marker("EMPTY")
#: The mailbox is closed and drained: the actor should stop.
CLOSED: Final = _Marker("CLOSED")


class Ask:
    """A request in a mailbox: the message plus the future its reply goes to.

    The asker awaits ``reply`` (with its deadline); the actor sets it once.
    Whoever finds ``reply`` already done (timed out, cancelled) leaves it alone.
    """

    __slots__ = ("message", "reply")

    def __init__(self, message: object, reply: asyncio.Future[Any]) -> None:
        self.message = message
        self.reply = reply


class Mailbox:
    """A bounded FIFO of messages (and :class:`Ask` envelopes) for one address.

    Semantics of an anyio memory object stream: one receiver, many senders,
    ``put`` parks while full, closing wakes everyone; a cancelled receiver
    never loses a message.  It belongs to the address, not to an instance:
    a restarted actor serves the messages sent while it restarted."""

    __slots__ = ("_buffer", "_closed", "_receiver", "_senders", "address", "capacity")

    def __init__(self, address: ActorAddress, capacity: int = DEFAULT_MAILBOX_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"mailbox capacity must be >= 1, got {capacity}")
        self.address = address
        self.capacity = capacity
        # Allocated on demand, dropped while the actor idles (docs/design/performance.md).
        self._buffer: deque[object] | None = None
        # The parked receiver, if the actor is idle.
        self._receiver: asyncio.Future[object] | None = None
        # Parked senders while full: (item, wake-up future); asks park with
        # ``None`` because their caller waits on the reply future instead.
        self._senders: deque[tuple[object, asyncio.Future[None] | None]] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Messages waiting (buffered and parked senders), not counting one in hand."""
        return len(self._buffer or ()) + len(self._senders or ())

    # -- sending ---------------------------------------------------------------

    def offer(self, item: object) -> bool:
        """Enqueue ``item`` if there is room; ``False`` when full.

        Not a checkpoint: like a non-blocking send, it never suspends.
        """
        if self._closed:
            raise ActorStopped(str(self.address))
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            # A cancelled receiver is not waiting any more: fall through.
            if not receiver.done():
                receiver.set_result(item)
                return True
        buffer = self._buffer
        if buffer is None:
            buffer = self._buffer = deque()
        if len(buffer) < self.capacity:
            buffer.append(item)
            return True
        return False

    def put_nowait(self, item: object) -> None:
        """Enqueue ``item`` or raise :class:`MailboxFull`."""
        if not self.offer(item):
            raise MailboxFull(str(self.address), self.capacity)

    async def put(self, item: object) -> None:
        """Enqueue ``item``, parking while the mailbox is full (backpressure)."""
        if self.offer(item):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (item, waiter)
        self._park(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            # Still queued: withdraw it.  Already taken over: it is delivered,
            # and the cancellation still propagates (as with anyio streams).
            self._unpark(entry)
            raise

    def offer_ask(self, envelope: Ask) -> bool:
        """Enqueue a request, or park it while full (``False``); its caller
        awaits the reply."""
        if self.offer(envelope):
            return True
        self._park((envelope, None))
        return False

    def withdraw_ask(self, envelope: Ask) -> None:
        """Take back a request still parked (its caller timed out or was cancelled)."""
        senders = self._senders
        if senders:
            for index, entry in enumerate(senders):
                if entry[0] is envelope:
                    del senders[index]
                    return

    def _park(self, entry: tuple[object, asyncio.Future[None] | None]) -> None:
        senders = self._senders
        if senders is None:
            senders = self._senders = deque()
        senders.append(entry)

    def _unpark(self, entry: tuple[object, asyncio.Future[None] | None]) -> None:
        # By identity: comparing messages with ``==`` could match (or choke
        # on) another sender's equal-looking message.
        senders = self._senders
        if senders:
            for index, queued in enumerate(senders):
                if queued is entry:
                    del senders[index]
                    return

    # -- receiving -------------------------------------------------------------

    def take_nowait(self) -> object:
        """The next item, else :data:`EMPTY` (or :data:`CLOSED` once closed)."""
        buffer = self._buffer
        if buffer:
            item = buffer.popleft()
            senders = self._senders
            # Room freed: hand it to the longest-parked sender still waiting.
            while senders:
                pending, waiter = senders.popleft()
                if waiter is None or not waiter.done():
                    buffer.append(pending)
                    if waiter is not None:
                        waiter.set_result(None)
                    break
            if not buffer:
                # Emptied: give the deque back (an actor busy with the one
                # message it was sent would hold it for as long).
                self._buffer = None
            return item
        return CLOSED if self._closed else EMPTY

    async def take(self) -> object:
        """The next item, parking while empty; :data:`CLOSED` once closed."""
        item = self.take_nowait()
        if item is not EMPTY:
            return item
        receiver = self.park_receiver()
        try:
            return await receiver
        except asyncio.CancelledError:
            self.receiver_cancelled(receiver)
            raise

    def park_receiver(self) -> asyncio.Future[object]:
        """After ``take_nowait`` found nothing: the future the next item (or
        :data:`CLOSED`) will be handed to, for the caller to await directly
        (docs/design/performance.md, "The idle actor")."""
        self._buffer = None  # empty: give the deque back while idle
        receiver: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._receiver = receiver
        return receiver

    def receiver_cancelled(self, receiver: asyncio.Future[object]) -> None:
        """The parked receiver was cancelled: unpark it, and if an item had
        just been handed to it, put that item back in front so it is not
        lost (this can exceed the capacity by one, once)."""
        if self._receiver is receiver:
            self._receiver = None
        elif receiver.done() and not receiver.cancelled():
            handed = receiver.result()
            if handed is not CLOSED:
                if self._buffer is None:
                    self._buffer = deque()
                self._buffer.appendleft(handed)

    # -- closing ---------------------------------------------------------------

    def close(self, reason: str) -> int:
        """Refuse new items and wake everyone; return how many queued tells were dropped.

        Pending requests get :class:`ActorStopped` (with ``reason``) instead of
        waiting for their deadline; parked senders get it too.
        """
        if self._closed:
            return 0
        self._closed = True
        dropped = 0
        pending: list[object] = list(self._buffer or ())
        self._buffer = None
        receiver, self._receiver = self._receiver, None
        if receiver is not None and not receiver.done():
            receiver.set_result(CLOSED)
        senders, self._senders = self._senders, None
        for item, waiter in senders or ():
            if waiter is None:
                pending.append(item)  # a parked request: failed below
            elif not waiter.done():
                # A parked tell is refused (its sender sees ActorStopped), not dropped.
                waiter.set_exception(ActorStopped(str(self.address), reason))
        for item in pending:
            if type(item) is Ask:
                if not item.reply.done():
                    item.reply.set_exception(ActorStopped(str(self.address), reason))
            else:
                dropped += 1
        return dropped
