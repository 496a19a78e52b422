"""``agentrt.actors``: the actor kernel agentrt runs on, for applications that
build actors of their own.

Actors with bounded mailboxes, ``tell``/``ask`` through ``ActorRef``s,
supervision trees (``SupervisorSpec``, ``ChildSpec``, restart strategies and
intensities), topics, and ``run`` (start an event loop, uvloop where
installed).  The engine's rollouts are actors of this kernel.
"""

from agentrt.runtime.kernel._actor import Actor, ActorContext
from agentrt.runtime.kernel._actor_errors import (
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
from agentrt.runtime.kernel._actor_spec import (
    ChildSpec,
    RestartIntensity,
    RestartStrategy,
    SupervisorSpec,
)
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._backoff import Backoff, RestartBackoff
from agentrt.runtime.kernel._deferred import Deferred
from agentrt.runtime.kernel._event_loop import run, uvloop_available
from agentrt.runtime.kernel._mailbox import DEFAULT_MAILBOX_CAPACITY
from agentrt.runtime.kernel._ref import DEFAULT_ASK_TIMEOUT, ActorRef
from agentrt.runtime.kernel._supervisor import ChildFailure
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import (
    DEFAULT_RESTART_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    ActorSystem,
    SystemState,
)
from agentrt.runtime.kernel._topic import Topic

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
