"""The actor kernel: supervised actors with bounded mailboxes, on anyio (asyncio
backend, uvloop when installed).  ``Actor`` and ``ActorRef``, the
``ActorSystem``, OTP-style supervision, services and deferred replies, the one
restart-with-backoff policy (``Backoff``/``RestartBackoff``), ``Topic``.

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
