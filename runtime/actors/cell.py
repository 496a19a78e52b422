"""``ActorCell``: one worker address and the task that serves its mailbox.

The cell outlives actor instances.  Each *incarnation* is one task in the
supervisor's task group: build a fresh instance with the spec's factory, run
``on_started`` (or ``on_restarted(error)``), report readiness, then take
messages one at a time and ``await instance.receive(message)``.  When the
incarnation ends the cell tells its supervisor how: a crash goes to
``child_failed`` with the exact exception, a stop to ``child_exited``.  It
never decides about restarts itself.

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Generic, TypeVar

import anyio
from anyio import TaskHandle
from anyio.abc import TaskStatus
from anyio.lowlevel import checkpoint

from agentrt.runtime.actors.actor import Actor, ActorContext, attach_context
from agentrt.runtime.actors.address import ActorAddress
from agentrt.runtime.actors.errors import ActorCrashed, ActorStopped
from agentrt.runtime.actors.mailbox import CLOSED, EMPTY, Ask, Mailbox
from agentrt.runtime.actors.ref import ActorRef
from agentrt.runtime.log import get_logger

if TYPE_CHECKING:
    from agentrt.runtime.actors.supervisor import Supervisor
    from agentrt.runtime.actors.system import ActorSystem

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")

#: Messages handled back to back before the actor yields to the event loop.
#: Taking from a non-empty mailbox does not suspend, so without this a busy
#: actor whose handler never awaits would hold the loop for a whole mailbox
#: (and keep a pending cancellation waiting that long).
_FAIR_SHARE: Final = 64


async def run_on_stopping(instance: Actor[MsgT, ReplyT], grace: float) -> Exception | None:
    """Run the hook shielded (it must run even when cancelled), for at most
    ``grace`` seconds."""
    if type(instance).on_stopping is Actor.on_stopping:
        return None  # not overridden: skip the shielded scope (shutting down 10k actors)
    with anyio.move_on_after(grace, shield=True) as scope:
        try:
            await instance.on_stopping()
        except Exception as exc:
            return exc
    if scope.cancelled_caught:
        return TimeoutError(f"on_stopping did not finish within {grace:g} s")
    return None


class ActorCell(Generic[MsgT, ReplyT]):
    """A worker address: spec, mailbox, ref, and the current incarnation."""

    __slots__ = (
        "address",
        "context",
        "factory",
        "handle",
        "incarnation",
        "mailbox",
        "parent",
        "ref",
        "stopping",
    )

    def __init__(
        self,
        address: ActorAddress,
        factory: Callable[[], Actor[MsgT, ReplyT]],
        mailbox: Mailbox,
        parent: Supervisor,
    ) -> None:
        self.address = address
        self.factory = factory
        self.mailbox = mailbox
        self.parent = parent
        self.ref: ActorRef[MsgT, ReplyT] = ActorRef(address, mailbox, parent.deadlines)
        self.context: ActorContext[MsgT, ReplyT] = ActorContext(self)
        #: The running incarnation's task (its owner is the supervisor's group).
        self.handle: TaskHandle[None, None] | None = None
        self.incarnation = 0
        #: Set once the cell is being stopped for good: no more restarts.
        self.stopping = False

    @property
    def system(self) -> ActorSystem:
        return self.parent.system

    def child_at(self, path: str) -> None:
        """Workers have no children."""
        return None

    def request_stop(self, reason: str) -> None:
        """Close the mailbox: the actor ends after the message in hand."""
        self.stopping = True
        dropped = self.mailbox.close(reason)
        if dropped:
            get_logger(__name__).info(
                "dropped queued messages", actor=str(self.address), count=dropped
            )

    def close(self, reason: str) -> None:
        """Let go for good: refuse messages and fail pending requests."""
        self.request_stop(reason)

    async def run(  # noqa: PLR0912, PLR0915 - the message loop is inlined on purpose
        self, restart_error: Exception | None, *, task_status: TaskStatus[None]
    ) -> None:
        """One incarnation.  Start-hook errors propagate to the starter (before
        readiness); everything after readiness is reported to the supervisor.

        The message loop is inlined here rather than in a helper coroutine:
        an idle actor parks inside it, and each extra frame on that stack is
        ~300 bytes per idle actor.
        """
        incarnation = self.incarnation
        instance = await self._start(restart_error)
        task_status.started()
        mailbox = self.mailbox
        error: Exception | None = None
        streak = 0
        try:
            while True:
                if streak >= _FAIR_SHARE:
                    streak = 0
                    await checkpoint()
                item = mailbox.take_nowait()
                if item is EMPTY:
                    streak = 0
                    receiver = mailbox.park_receiver()
                    try:
                        item = await receiver
                    except asyncio.CancelledError:
                        mailbox.receiver_cancelled(receiver)
                        raise
                else:
                    streak += 1
                if item is CLOSED:
                    break
                # Mailboxes are untyped inside (messages, asks, markers); the
                # ref's signature is what guarantees a message is an MsgT.
                if type(item) is not Ask:
                    await instance.receive(item)  # type: ignore[arg-type]  # mailboxes hold MsgT
                    continue
                reply = item.reply
                if reply.done():
                    continue  # its caller gave up (deadline, cancellation): drop it
                try:
                    result = await instance.receive(item.message)  # type: ignore[arg-type]
                except Exception as exc:
                    if not reply.done():
                        reply.set_exception(ActorCrashed(str(self.address), exc))
                    raise
                else:
                    if not reply.done():
                        reply.set_result(result)
                finally:
                    # Only reached with the reply unset when the handler was
                    # cancelled (restart of a sibling, stop, shutdown).
                    if not reply.done():
                        reply.set_exception(
                            ActorStopped(str(self.address), "stopped while handling this request")
                        )
        except Exception as exc:
            error = exc
        finally:
            # Runs on crash, stop and cancellation alike (restart of a sibling,
            # a stopping parent, system shutdown).
            hook_error = await run_on_stopping(instance, self.parent.stop_timeout)
            if hook_error is not None:
                if error is None:
                    self.parent.child_failed(self, incarnation, hook_error)
                else:
                    error.add_note(f"on_stopping then failed too: {hook_error!r}")
        if error is not None:
            self.parent.child_failed(self, incarnation, error)
        else:
            self.parent.child_exited(self)

    async def _start(self, restart_error: Exception | None) -> Actor[MsgT, ReplyT]:
        instance = self.factory()
        attach_context(instance, self.context)
        if restart_error is None:
            await instance.on_started()
        else:
            await instance.on_restarted(restart_error)
        return instance
