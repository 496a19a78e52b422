"""Deferred replies (``Deferred``): a request answered by a service of the
incarnation instead of by ``receive``, so long requests overlap.

This module must not import agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, final

import anyio

from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped
from agentrt.runtime.kernel._services import ServiceScope

ReplyT = TypeVar("ReplyT")

__all__ = ["Deferred"]


@final
class Deferred(Generic[ReplyT]):
    """A reply that a service produces later.

    Made by ``ActorContext.defer``; ``receive`` returns it as it is.  What the
    service returns is the reply to the ``ask``; if it raises, the asker gets
    ``ActorCrashed`` and the actor crashes; if the asker gives up first, the
    service is cancelled; if the incarnation ends first, the asker gets
    ``ActorStopped``.  For a ``tell`` the reply is dropped.  The asker cannot
    tell a deferred reply from an immediate one."""

    __slots__ = ("_asker", "_given_up", "_outcome", "_scope", "_services")

    def __init__(self, services: ServiceScope) -> None:
        self._services = services
        # The ask's reply future, once the cell hands it over.
        self._asker: asyncio.Future[Any] | None = None
        # (value, None) or (None, error) once the service is done.
        self._outcome: tuple[Any, BaseException | None] | None = None
        self._scope: anyio.CancelScope | None = None
        # The asker gave up before the service had a scope to cancel.
        self._given_up = False

    # -- the cell's side ----------------------------------------------------------

    def attach(self, reply: asyncio.Future[Any]) -> None:
        """Send the outcome to ``reply`` (the ask being handled), now or
        when the service is done; cancel the service if the asker gives up."""
        if self._outcome is not None:
            _settle(reply, self._outcome)
            return
        self._asker = reply
        if reply.done():
            self._give_up()
        else:
            reply.add_done_callback(self._on_asker_done)

    def _on_asker_done(self, reply: asyncio.Future[Any]) -> None:
        if self._outcome is None:  # not settled by us: the asker gave up
            self._give_up()

    def _give_up(self) -> None:
        self._given_up = True
        if self._scope is not None:
            self._scope.cancel()

    # -- the service's side -------------------------------------------------------

    async def run(self, func: Callable[..., Awaitable[ReplyT]], args: tuple[Any, ...]) -> None:
        """The service: await ``func(*args)`` and deliver its outcome."""
        try:
            with anyio.CancelScope() as self._scope:
                if self._given_up:
                    self._scope.cancel()
                try:
                    value = await func(*args)
                except Exception as exc:
                    self._deliver((None, ActorCrashed(self._services.address, exc)))
                    raise  # crashes the actor, like a failing handler
                self._deliver((value, None))
        finally:
            if self._outcome is None:  # cancelled: the asker left, or the incarnation ends
                failure = self._services.failure
                self._deliver(
                    (
                        None,
                        ActorCrashed(self._services.address, failure)
                        if failure is not None
                        else ActorStopped(
                            self._services.address, "stopped while handling this request"
                        ),
                    )
                )

    def _deliver(self, outcome: tuple[Any, BaseException | None]) -> None:
        self._outcome = outcome
        if self._asker is not None:
            _settle(self._asker, outcome)


def _settle(reply: asyncio.Future[Any], outcome: tuple[Any, BaseException | None]) -> None:
    if reply.done():  # its asker gave up
        return
    value, error = outcome
    if error is None:
        reply.set_result(value)
    else:
        reply.set_exception(error)
