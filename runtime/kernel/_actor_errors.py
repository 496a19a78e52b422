"""The actor kernel's exceptions: ``ActorError`` (a ``RuntimeFailure``) and its
subclasses, drawn in ``agentrt.runtime.kernel._errors``'s tree.  Every message names
the actor address.

This module knows addresses only as strings and must not import agents,
tools or aggregators.
"""

from __future__ import annotations

from agentrt.runtime.kernel._errors import RuntimeFailure


class ActorError(RuntimeFailure):
    """Base of every exception the actor kernel raises on purpose."""


class MailboxFull(ActorError):
    """``tell_nowait`` found the actor's bounded mailbox full."""

    def __init__(self, address: str, capacity: int) -> None:
        self.address = address
        self.capacity = capacity
        super().__init__(
            f"mailbox of {address} is full ({capacity} messages); "
            "use `await tell(...)` to wait for room"
        )


class AskTimeout(ActorError):
    """An ``ask`` got no reply before its deadline."""

    def __init__(self, address: str, message_type: str, timeout: float) -> None:
        self.address = address
        self.message_type = message_type
        self.timeout = timeout
        super().__init__(f"ask({message_type}) to {address} got no reply within {timeout:g} s")


class ActorCrashed(ActorError):
    """The actor raised while handling a message or running a start hook,
    or one of its services raised while the request was being handled.

    ``cause`` is the exception the actor raised (also chained as ``__cause__``).
    """

    def __init__(self, address: str, cause: BaseException) -> None:
        self.address = address
        self.cause = cause
        super().__init__(f"{address} crashed: {type(cause).__name__}: {cause}")
        self.__cause__ = cause


class ActorStopped(ActorError):
    """The actor is stopped (or was stopped while a request was pending)."""

    def __init__(self, address: str, reason: str = "the actor is stopped") -> None:
        self.address = address
        self.reason = reason
        super().__init__(f"{address}: {reason}")


class ActorNotFound(ActorError):
    """An address resolves to no live actor in this system."""

    def __init__(self, address: str, reason: str = "no live actor at this address") -> None:
        self.address = address
        self.reason = reason
        super().__init__(f"{address}: {reason}")


class ActorNameTaken(ActorError):
    """A supervisor already has a child with the requested name."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__(f"{address} already exists; child names are unique per supervisor")


class SupervisionEscalated(ActorError):
    """A supervisor saw more restarts than its intensity allows and gave up.

    ``cause`` is the child failure that tipped it over (also ``__cause__``).
    """

    def __init__(
        self, address: str, cause: BaseException, max_restarts: int, within: float
    ) -> None:
        self.address = address
        self.cause = cause
        self.max_restarts = max_restarts
        self.within = within
        super().__init__(
            f"supervisor {address} exceeded {max_restarts} restarts in {within:g} s; "
            f"last failure: {type(cause).__name__}: {cause}"
        )
        self.__cause__ = cause


class SystemStateError(ActorError):
    """The ActorSystem is used outside its open state."""
