"""``SupervisorRef``: the public handle to a supervisor.

Spawn workers or nested supervisors under it, and look at its children and
the failures it handled (with the exact exceptions).  This module must not
import agents, tools or aggregators.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentrt.runtime.kernel._actor_spec import ChildSpec, SupervisorSpec
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.runtime.kernel._cell import ActorCell
from agentrt.runtime.kernel._supervisor import ChildFailure, Supervisor

if TYPE_CHECKING:
    from agentrt.runtime.kernel._actor import Actor
    from agentrt.runtime.kernel._ref import ActorRef

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")


class SupervisorRef:
    """A handle to a supervisor: spawn under it, inspect its children and failures."""

    __slots__ = ("_supervisor",)

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    @property
    def address(self) -> ActorAddress:
        return self._supervisor.address

    @property
    def children(self) -> tuple[ActorAddress, ...]:
        return tuple(child.address for child in self._supervisor.children)

    @property
    def failures(self) -> tuple[ChildFailure, ...]:
        """The recent child failures, with the exact exceptions, oldest first."""
        return tuple(self._supervisor.failures)

    def child(self, name: str) -> ActorRef[Any, Any]:
        """The ref of the worker child called ``name``."""
        return self._supervisor.system.ref(self.address.child(name))

    async def spawn(
        self,
        factory: Callable[[], Actor[MsgT, ReplyT]],
        *,
        name: str,
        mailbox_capacity: int | None = None,
    ) -> ActorRef[MsgT, ReplyT]:
        """Start a worker under this supervisor; returns once ``on_started`` ran."""
        spec = ChildSpec(name, factory, mailbox_capacity)
        cell = await self._supervisor.start_child(spec)
        assert isinstance(cell, ActorCell)
        ref: ActorRef[MsgT, ReplyT] = cell.ref
        return ref

    async def spawn_supervisor(self, spec: SupervisorSpec) -> SupervisorRef:
        """Start a nested supervisor (and its children) under this one."""
        child = await self._supervisor.start_child(spec)
        assert isinstance(child, Supervisor)
        return SupervisorRef(child)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SupervisorRef) and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __repr__(self) -> str:
        return f"<SupervisorRef {self.address}>"
