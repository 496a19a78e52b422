"""How to (re)build a supervision tree: child specs, strategies, intensity.

A spec is a recipe, not a running thing: a supervisor keeps the spec of each
child so that a restart builds a *fresh* instance (``factory()``) at the same
address.  This module is plain data and must not import agents, tools or
aggregators.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from agentrt.runtime.kernel._address import validate_name

if TYPE_CHECKING:
    from agentrt.runtime.kernel._actor import Actor

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")


class RestartStrategy(enum.Enum):
    """Which children a supervisor restarts when one of them fails (OTP names)."""

    #: Restart only the child that failed.
    ONE_FOR_ONE = "one_for_one"
    #: Stop every other child, then restart all of them in spec order: for
    #: children that only make sense together.
    ONE_FOR_ALL = "one_for_all"


@dataclass(frozen=True, slots=True)
class RestartIntensity:
    """At most ``max_restarts`` restarts within ``within`` seconds.

    One more failure inside the window and the supervisor gives up: it stops
    its children and fails itself, escalating to its own supervisor.  The
    default (3 in 5 s) is OTP's: a crash loop escalates within a few seconds,
    an occasional crash never does.
    """

    max_restarts: int = 3
    within: float = 5.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.within <= 0:
            raise ValueError(f"invalid restart intensity: {self!r}")


@dataclass(frozen=True, slots=True)
class ChildSpec(Generic[MsgT, ReplyT]):
    """A worker child: its ``name`` (the last address segment) and ``factory``.

    ``mailbox_capacity`` of ``None`` means the system default.
    """

    name: str
    factory: Callable[[], Actor[MsgT, ReplyT]]
    mailbox_capacity: int | None = None

    def __post_init__(self) -> None:
        validate_name(self.name)


@dataclass(frozen=True, slots=True)
class SupervisorSpec:
    """A supervisor child: its children (workers or supervisors) and policy."""

    name: str
    children: tuple[ChildSpec[Any, Any] | SupervisorSpec, ...] = ()
    strategy: RestartStrategy = RestartStrategy.ONE_FOR_ONE
    intensity: RestartIntensity = field(default_factory=RestartIntensity)
    on_exhausted: Literal["escalate", "stop_child"] = "escalate"
    """Past the intensity: ``escalate`` (OTP: the supervisor gives up and
    fails), or ``stop_child``: the intensity counts each child's restarts on
    its own, and a child past it is stopped for good (its askers get
    ``ActorStopped``) while the supervisor and its other children go on --
    for independent workers such as a run's rollouts (``ONE_FOR_ONE`` only)."""

    def __post_init__(self) -> None:
        validate_name(self.name)
        if self.on_exhausted == "stop_child" and self.strategy is not RestartStrategy.ONE_FOR_ONE:
            raise ValueError(
                f"supervisor {self.name!r}: on_exhausted='stop_child' needs ONE_FOR_ONE"
            )
        names = [child.name for child in self.children]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {self.name!r} has duplicate child names: {names}")
