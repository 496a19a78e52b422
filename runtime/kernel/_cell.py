"""``ActorCell``: one worker address and the task that serves its mailbox.

The cell outlives actor instances.  Each *incarnation* is one task in the
supervisor's task group: build a fresh instance with the spec's factory, run
``on_started`` (or ``on_restarted(error)``, bounded by the system's restart
timeout), report readiness, then take messages one at a time and ``await
instance.receive(message)``.  The incarnation owns the services it starts
(``services.py``): when it ends, they are cancelled and waited for before
``on_stopping`` runs, and a service that fails ends it as a crash.  When the
incarnation ends the cell tells its supervisor how: a crash goes to
``child_failed`` with the exact exception, a stop to ``child_exited``.  It
never decides about restarts itself.

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import anyio
from anyio import TASK_STATUS_IGNORED, TaskHandle
from anyio.abc import TaskGroup, TaskStatus
from anyio.lowlevel import checkpoint

from agentrt.runtime.kernel._actor import Actor, ActorContext, attach_context
from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._deferred import Deferred
from agentrt.runtime.kernel._mailbox import CLOSED, EMPTY, Ask, Mailbox
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.kernel._services import ENDED, ServiceScope
from agentrt.runtime.observe._log import get_logger

if TYPE_CHECKING:
    from agentrt.runtime.kernel._supervisor import Supervisor
    from agentrt.runtime.kernel._system import ActorSystem

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")

#: Messages handled back to back before the actor yields to the event loop.
#: Taking from a non-empty mailbox does not suspend, so without this a busy
#: actor whose handler never awaits would hold the loop for a whole mailbox
#: (and keep a pending cancellation waiting that long).
_FAIR_SHARE: Final = 64


async def run_on_stopping(instance: Actor[MsgT, ReplyT], grace: float) -> Exception | None:
    """Run the hook (overridden: the caller checks) shielded (it must run
    even when cancelled), for at most ``grace`` seconds."""
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
        "_handle",
        "address",
        "factory",
        "incarnation",
        "mailbox",
        "parent",
        "ref",
        "services",
        "start_scope",
        "stop_answered",
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
        # The running incarnation's task (its owner is the supervisor's group);
        # ``None`` until the supervisor has it (after the start hook).
        self._handle: TaskHandle[None, None] | None = None
        self.incarnation = 0
        #: Set once the cell is being stopped for good: no more restarts.
        self.stopping = False
        #: The running incarnation stops once the message in hand is
        #: handled (``ActorContext.stop_when_answered``).
        self.stop_answered = False
        #: The running incarnation's services: ``None`` until it starts one
        #: (most actors never do, and pay nothing), closed once it has ended.
        self.services: ServiceScope | None = None
        #: Cancels the start hook while it runs (a failing service interrupts it).
        self.start_scope: anyio.CancelScope | None = None

    @property
    def system(self) -> ActorSystem:
        return self.parent.system

    @property
    def handle(self) -> TaskHandle[None, None] | None:
        return self._handle

    @handle.setter
    def handle(self, handle: TaskHandle[None, None] | None) -> None:
        self._handle = handle
        # A service that failed between the start hook and this moment could
        # not cancel the incarnation yet (nothing held its task): do it now.
        services = self.services
        if (
            handle is not None
            and services is not None
            and services.failure is not None
            and not services.closing
        ):
            handle.cancel()

    # -- services ----------------------------------------------------------------

    def service_scope(self) -> ServiceScope:
        """The running incarnation's services, created on first use."""
        services = self.services
        if services is not None and services.closing:
            raise ActorStopped(
                str(self.address),
                "no incarnation is running: start services from the actor's hooks, "
                "handlers or services",
            )
        if self.stopping:
            raise ActorStopped(str(self.address), "the actor is stopping: no new services")
        if services is None:
            services = self.services = ServiceScope(
                str(self.address), self.address.path, self.parent.running_group(), self.interrupt
            )
        return services

    def interrupt(self) -> None:
        """Cancel the running incarnation (a service of it failed)."""
        if self.start_scope is not None:
            self.start_scope.cancel()
        elif self._handle is not None:
            self._handle.cancel()
        # Else the supervisor is about to get the handle: the setter cancels it.

    def _service_failure(self) -> Exception | None:
        services = self.services
        return None if services is None else services.failure

    async def _close_services(self) -> Exception | None:
        """End the incarnation's services; the failure of one, if any."""
        services = self.services
        if services is None:
            self.services = ENDED
            return None
        await services.close()
        return services.failure

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

    async def launch(
        self, tg: TaskGroup, restart_error: Exception | None
    ) -> TaskHandle[None, None]:
        """Start the next incarnation as a task of ``tg`` and return it once
        it is ready (its start hook ran); raises what the factory or the hook
        raised.  An instance whose class overrides neither start hook
        (``on_started``, or ``on_restarted`` for a restart) is ready once
        built: its task is created without waiting for it to report."""
        instance = self._build()
        if _runs_hook(type(instance), restart_error):
            handle: TaskHandle[None, None] = await tg.start(
                self.run, restart_error, instance, name=self.address.path, return_handle=True
            )
            return handle
        return tg.create_task(
            self.run(None, instance, task_status=TASK_STATUS_IGNORED), name=self.address.path
        )

    def _build(self) -> Actor[MsgT, ReplyT]:
        """A fresh instance with its context; raises what the factory raised."""
        self.services = None  # this incarnation's own, once it starts one
        self.stop_answered = False
        try:
            instance = self.factory()
        except BaseException:
            self.services = ENDED
            raise
        # A context per instance, not kept by the cell: a cell <-> context
        # cycle would outlive the actor until a garbage collection.
        attach_context(instance, ActorContext(self))
        return instance

    async def run(  # noqa: PLR0912, PLR0915 - the message loop is written out on purpose
        self,
        restart_error: Exception | None,
        instance: Actor[MsgT, ReplyT],
        *,
        task_status: TaskStatus[None],
    ) -> None:
        """One incarnation of ``instance`` (``launch``: ``restart_error`` is
        ``None`` when no start hook runs, for a restart too).  Start-hook
        errors propagate to the starter (before readiness); everything after
        readiness is reported to the supervisor.  (An idle actor parks in
        this frame: docs/design/performance.md, "The idle actor".)
        """
        incarnation = self.incarnation
        if restart_error is not None or type(instance).on_started is not Actor.on_started:
            await self._start(instance, restart_error)
            task_status.started()
        # Let go of the starter's status and its future (the idle actor's frame).
        del task_status
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
                    if self.stop_answered:
                        self.request_stop("the actor stopped itself")
                    continue
                reply = item.reply
                if reply.done():
                    continue  # its caller gave up (deadline, cancellation): drop it
                message = item.message
                # The envelope is spent: not held while the request is handled.
                del item
                try:
                    result = await instance.receive(message)  # type: ignore[arg-type]
                except Exception as exc:
                    if not reply.done():
                        reply.set_exception(ActorCrashed(str(self.address), exc))
                    raise
                except BaseException:
                    # The handler was cancelled: by a failing service (a
                    # crash), or by a restart of a sibling, a stop, a shutdown.
                    if not reply.done():
                        reply.set_exception(self._interrupted())
                    raise
                if type(result) is Deferred:
                    result.attach(reply)  # a service of this incarnation replies
                elif not reply.done():
                    reply.set_result(result)
                if self.stop_answered:
                    self.request_stop("the actor stopped itself")
        except Exception as exc:
            error = exc
        except asyncio.CancelledError:
            # A failing service cancelled this incarnation (``interrupt``):
            # end as a crash with its error.  Any other cancellation goes on.
            error = self._service_failure()
            if error is None:
                raise
        finally:
            # Runs on crash, stop and cancellation alike (restart of a sibling,
            # a stopping parent, system shutdown).
            await self._end(instance, incarnation, error)
        if error is not None:
            self.parent.child_failed(self, incarnation, error)
        else:
            self.parent.child_exited(self)

    def _interrupted(self) -> ActorCrashed | ActorStopped:
        """What an ask gets when its handler was cancelled: by a failing
        service (a crash), or by a restart of a sibling, a stop, a shutdown."""
        failure = self._service_failure()
        if failure is not None:
            return ActorCrashed(str(self.address), failure)
        return ActorStopped(str(self.address), "stopped while handling this request")

    async def _end(
        self, instance: Actor[MsgT, ReplyT], incarnation: int, error: Exception | None
    ) -> None:
        """End an incarnation: services first (so the hook sees the actor
        quiet), then ``on_stopping``.  Their failures are reported when the
        incarnation itself did not fail, else noted on its error.  (Not in
        ``run``: docs/design/performance.md, "The idle actor".)"""
        if self.services is None:  # it started none: nothing to wait for
            self.services = ENDED
            late = None
        else:
            late = await self._close_services()  # a service that failed as it ended
        if late is error:
            late = None
        elif late is not None and error is not None:
            error.add_note(f"a service then failed too: {late!r}")
        hook_error = (
            None
            # Not overridden: no shielded scope (shutting down 10k actors).
            if type(instance).on_stopping is Actor.on_stopping
            else await run_on_stopping(instance, self.parent.stop_timeout)
        )
        if hook_error is not None:
            first = error if error is not None else late
            if first is None:
                late = hook_error
            else:
                first.add_note(f"on_stopping then failed too: {hook_error!r}")
        if late is not None and error is None:
            self.parent.child_failed(self, incarnation, late)

    async def _start(self, instance: Actor[MsgT, ReplyT], restart_error: Exception | None) -> None:
        """Run the start hook of ``instance``; raises what the hook (or a
        service it started) raised, with the incarnation's services ended."""
        try:
            if restart_error is None:
                with anyio.CancelScope() as self.start_scope:
                    await instance.on_started()
            else:
                # Bounded: the supervisor waits for this before it goes on.
                timeout = self.parent.restart_timeout
                with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                    self.start_scope = scope
                    await instance.on_restarted(restart_error)
                if scope.cancelled_caught and self._service_failure() is None:
                    raise TimeoutError(
                        f"on_restarted of {self.address} did not finish within {timeout:g} s"
                    )
            failure = self._service_failure()
            if failure is not None:
                raise failure  # a service failed while the hook ran; it was cancelled
        except BaseException:
            self.start_scope = None
            await self._close_services()
            raise
        self.start_scope = None


def _runs_hook(cls: type[Actor[Any, Any]], restart_error: Exception | None) -> bool:
    """Whether an incarnation of ``cls`` has a start hook to run: its own
    ``on_started`` (first start), or on a restart its own ``on_restarted``
    or ``on_started`` (the default ``on_restarted`` calls ``on_started``)."""
    if cls.on_started is not Actor.on_started:
        return True
    return restart_error is not None and cls.on_restarted is not Actor.on_restarted
