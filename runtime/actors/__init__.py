"""The actor kernel: supervised actors with bounded mailboxes, on anyio (asyncio
backend, uvloop when installed).

::

    async with ActorSystem() as system:
        counter = await system.spawn(Counter, name="counter")
        await counter.tell(Incr(n=2))
        assert await counter.ask(Get(), timeout=1.0) == 2

- :class:`Actor` — subclass with ``receive`` (``match`` on tagged msgspec
  structs) and optional ``on_started`` / ``on_restarted`` / ``on_stopping``.
- Services — ``context.start_service`` / ``start_soon_service``: background
  tasks owned by the running incarnation (cancelled when it ends; one that
  raises crashes the actor), so the actor keeps answering messages;
  ``receive`` may return ``context.defer(...)`` (:class:`Deferred`) to answer
  a request from a service, so long requests overlap.
- :class:`ActorRef` — ``tell`` (waits while the mailbox is full),
  ``tell_nowait`` (raises :class:`MailboxFull`), ``ask`` (deadline,
  :class:`AskTimeout`, :class:`ActorCrashed`).
- Supervision with OTP semantics: :class:`SupervisorSpec`,
  :class:`RestartStrategy`, :class:`RestartIntensity`; escalation past the
  root makes the system raise :class:`SupervisionEscalated`.
- :class:`Backoff` / :class:`RestartBackoff` — the one restart-with-backoff
  policy for services that bring back a process or connection that died.
- :class:`ActorAddress` — serializable; ``system.ref(address)`` resolves it.
- :class:`Topic` — publish/subscribe over refs.
- :func:`run` — run an entry point with uvloop when installed.

This package is the floor of the runtime: it must not import agents, tools
or aggregators.
"""

from agentrt.runtime.actors.actor import Actor, ActorContext
from agentrt.runtime.actors.address import ActorAddress
from agentrt.runtime.actors.backoff import Backoff, RestartBackoff
from agentrt.runtime.actors.deferred import Deferred
from agentrt.runtime.actors.errors import (
    ActorCrashed,
    ActorError,
    ActorNameTaken,
    ActorNotFound,
    ActorStopped,
    AskTimeout,
    MailboxFull,
    SupervisionEscalated,
    SystemStateError,
)
from agentrt.runtime.actors.loop import run, uvloop_available
from agentrt.runtime.actors.mailbox import DEFAULT_MAILBOX_CAPACITY
from agentrt.runtime.actors.ref import DEFAULT_ASK_TIMEOUT, ActorRef
from agentrt.runtime.actors.spec import (
    ChildSpec,
    RestartIntensity,
    RestartStrategy,
    SupervisorSpec,
)
from agentrt.runtime.actors.supervisor import ChildFailure
from agentrt.runtime.actors.supervisor_ref import SupervisorRef
from agentrt.runtime.actors.system import (
    DEFAULT_RESTART_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    ActorSystem,
    SystemState,
)
from agentrt.runtime.actors.topic import Topic

__all__ = [
    "DEFAULT_ASK_TIMEOUT",
    "DEFAULT_MAILBOX_CAPACITY",
    "DEFAULT_RESTART_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "Actor",
    "ActorAddress",
    "ActorContext",
    "ActorCrashed",
    "ActorError",
    "ActorNameTaken",
    "ActorNotFound",
    "ActorRef",
    "ActorStopped",
    "ActorSystem",
    "AskTimeout",
    "Backoff",
    "ChildFailure",
    "ChildSpec",
    "Deferred",
    "MailboxFull",
    "RestartBackoff",
    "RestartIntensity",
    "RestartStrategy",
    "SupervisionEscalated",
    "SupervisorRef",
    "SupervisorSpec",
    "SystemState",
    "SystemStateError",
    "Topic",
    "run",
    "uvloop_available",
]
