"""``ActorRef``: how callers talk to an actor (tell, tell_nowait, ask).

A ref is an :class:`ActorAddress` plus a local route, the address's mailbox.
Call sites only use ``tell``/``ask`` and the address, so a ref that routes to
another process (a Ray placement) can later stand in without changing them.
Refs stay valid across restarts (the mailbox belongs to the address); once the
actor is stopped for good they raise ``ActorStopped``.

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Final, Generic, TypeVar, cast

from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._mailbox import Ask, Mailbox
from agentrt.runtime.kernel._timers import AskDeadlines

#: Long enough for an actor that calls a model once, short enough that a lost
#: request surfaces as an error in a log instead of a hang.  Pass ``timeout``
#: for anything slower (a whole rollout, a tool server).
DEFAULT_ASK_TIMEOUT: Final = 30.0

MsgT_contra = TypeVar("MsgT_contra", contravariant=True)
ReplyT_co = TypeVar("ReplyT_co", covariant=True)


class ActorRef(Generic[MsgT_contra, ReplyT_co]):
    """A handle to the actor at ``address``: cheap to copy, hashable by address."""

    __slots__ = ("_deadlines", "_mailbox", "address")

    def __init__(self, address: ActorAddress, mailbox: Mailbox, deadlines: AskDeadlines) -> None:
        self.address = address
        self._mailbox = mailbox
        self._deadlines = deadlines

    async def tell(self, message: MsgT_contra) -> None:
        """Deliver ``message`` (fire and forget).

        Returns as soon as the message is in the mailbox; while the mailbox is
        full it waits for room (backpressure), so mailboxes never grow past
        their capacity.  Raises ``ActorStopped`` if the actor is gone.
        """
        mailbox = self._mailbox
        if not mailbox.offer(message):
            await mailbox.put(message)

    def tell_nowait(self, message: MsgT_contra) -> None:
        """Deliver ``message`` now, or raise ``MailboxFull``."""
        self._mailbox.put_nowait(message)

    def ask(
        self,
        message: MsgT_contra,
        *,
        timeout: float | None = DEFAULT_ASK_TIMEOUT,
    ) -> Awaitable[ReplyT_co]:
        """Send ``message``; await the result for what ``receive`` returns for it.

        The message is sent by this call (``ActorStopped`` here if the actor
        is gone), the reply awaited by awaiting what it returns.  The deadline
        covers waiting for mailbox room and for the reply; past it,
        ``AskTimeout`` names this address, the message type and the timeout.
        ``timeout=None``: no deadline of the ask's own (no timer), for a
        caller whose cancel scope bounds the wait already.  If the handler
        raises, the await raises ``ActorCrashed`` (with the handler's
        exception as ``cause``); if the actor stops first, ``ActorStopped``.
        A request whose caller gave up before the actor got to it is
        dropped, not handled.

        (The deadline is a parameter rather than the caller's cancel scope
        because it belongs to the request: ``AskTimeout`` reports it.)
        """
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        envelope = Ask(message, reply)
        if self._mailbox.offer_ask(envelope) and timeout is None:
            # In the mailbox and no deadline: nothing to undo after the wait,
            # so the reply future is the awaitable (no coroutine).  A caller
            # that gives up cancels it; the actor drops it then.
            return reply
        return self._reply(envelope, loop, timeout)

    async def _reply(
        self,
        envelope: Ask,
        loop: asyncio.AbstractEventLoop,
        timeout: float | None,  # noqa: ASYNC109
    ) -> ReplyT_co:
        """Wait for the reply of an ask with a deadline or parked for room."""
        reply = envelope.reply
        pending = (
            None
            if timeout is None
            else self._deadlines.watch(loop, reply, timeout, self.address, envelope.message)
        )
        try:
            return cast(ReplyT_co, await reply)
        finally:
            if pending is not None:
                self._deadlines.unwatch(pending, reply)
            if not reply.done() or reply.cancelled() or reply.exception() is not None:
                self._mailbox.withdraw_ask(envelope)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorRef) and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __repr__(self) -> str:
        return f"<ActorRef {self.address}>"
