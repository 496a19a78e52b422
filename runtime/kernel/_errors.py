"""The exception tree of agentrt: catch the branch you can act on.

::

    AgentrtError                      base of everything agentrt raises
    ├── UserError                     the caller's mistake: fix the input
    │   ├── ConfigError               a malformed or inconsistent configuration
    │   ├── UnknownModelError         a model name no backend serves
    │   └── InvalidRequestError       a request that fails validation
    ├── RuntimeFailure                the world failed: retry, degrade, report
    │   ├── BackendError              a model backend failed
    │   │   ├── BackendUnavailable    refused connection, 5xx, open circuit
    │   │   ├── BackendTimeout        no answer within the deadline
    │   │   ├── RateLimited           429 after retries (has retry_after)
    │   │   └── MalformedReply        the server sent something unparseable
    │   ├── ToolError                 a tool or tool server failed
    │   │   └── ToolCrashed           a tool raised an unexpected exception (a bug):
    │   │                             its rollout crashes and is restarted
    │   └── ActorError                the actor kernel (runtime.actors.errors)
    │       ├── MailboxFull           tell_nowait found the mailbox full
    │       ├── AskTimeout            no reply within the ask deadline
    │       ├── ActorCrashed          a handler raised; carries the cause
    │       ├── ActorStopped          the actor stopped mid-request
    │       ├── ActorNotFound         no live actor at an address
    │       ├── ActorNameTaken        a sibling already has that name
    │       ├── SupervisionEscalated  restart intensity exceeded at the root
    │       └── SystemStateError      the actor system is not open
    └── ControlSignal                 not failures: flow control
        └── BudgetExceeded            a hard cap would be crossed

A cancelled run is not an error here: it ends by anyio cancellation (the
caller's cancel scope), as any task does.

Every message says what failed and where (which model, endpoint, file, key
or actor), so that a log line alone is enough to act on.
"""

from __future__ import annotations


class AgentrtError(Exception):
    """Base of every exception agentrt raises on purpose."""


class UserError(AgentrtError):
    """The input is wrong; retrying the same input will fail the same way."""


class ConfigError(UserError):
    """A configuration is malformed or inconsistent.

    ``where`` names the file and key (and line when known)."""

    def __init__(self, message: str, *, where: str = "") -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class UnknownModelError(UserError):
    """No configured backend serves the requested model name."""


class InvalidRequestError(UserError):
    """A request failed validation."""


class RuntimeFailure(AgentrtError):
    """Something outside the caller's input failed."""


class BackendError(RuntimeFailure):
    """A model backend failed to produce a reply."""

    def __init__(self, message: str, *, backend: str = "", endpoint: str = "") -> None:
        self.backend = backend
        self.endpoint = endpoint
        where = " ".join(p for p in (backend, endpoint) if p)
        super().__init__(f"[{where}] {message}" if where else message)


class BackendUnavailable(BackendError):
    """The backend refused, failed with 5xx, or its circuit is open."""


class BackendTimeout(BackendError):
    """The backend did not answer within the deadline."""


class RateLimited(BackendError):
    """The backend kept answering 429; ``retry_after`` is its last hint."""

    def __init__(
        self,
        message: str,
        *,
        backend: str = "",
        endpoint: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(message, backend=backend, endpoint=endpoint)


class MalformedReply(BackendError):
    """The backend's reply could not be parsed."""


class ToolError(RuntimeFailure):
    """A tool or tool server failed."""


class ToolCrashed(ToolError):
    """A tool raised an unexpected exception (a bug in the tool, not an
    error it reports): the rollout's actor crashes, and its supervisor
    restarts it from its committed steps."""


class ControlSignal(AgentrtError):
    """Flow control, not a failure: a budget cap reached."""


class BudgetExceeded(ControlSignal):
    """Reserving the worst case of the next call would cross a hard cap."""

    def __init__(self, message: str, *, limit: str = "") -> None:
        self.limit = limit
        super().__init__(message)
