"""An agent as a supervised actor.

Owns ``AgentActor`` (an ``Actor`` whose ``receive`` runs one rollout per
``RunRollout`` message and replies with its ``RolloutResult``),
``AgentHandle`` (what the spawner holds: ``run``, ``cancel``, the ref) and
``spawn_agent``.

Failures: everything the loop treats as data (tool errors, backend
failures, budget, signals) comes back in the result; an unexpected
exception out of the loop (a bug) crashes the actor, so its supervisor
records it and restarts or escalates, and the asker gets ``ActorCrashed``.

Cancellation is prompt: the actor's mailbox is busy while a rollout runs,
so cancel requests do not go through it; ``AgentHandle.cancel`` cancels
the running rollout's cancel scope directly (``RolloutControl``, same event
loop), which stops its model call and every running tool call at once.
``AgentHandle.run`` does the same when its caller is cancelled or its
deadline passes, so an abandoned rollout never keeps running.  Stopping the
actor (``system.stop``) or the system cancels it too.

May import the runtime floor and the rest of ``agentrt.agents``; never
aggregators or the roof.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import final

import msgspec

from agentrt.agents.agent import Agent
from agentrt.agents.control import RolloutControl, RolloutResult
from agentrt.protocols import ChatMessage
from agentrt.runtime.actors import Actor, ActorRef, ActorSystem, SupervisorRef


class RunRollout(msgspec.Struct, frozen=True, kw_only=True, tag="run_rollout"):
    """Run one rollout of ``task``; the reply is its ``RolloutResult``."""

    task: str
    rollout_id: str
    run_id: str | None = None
    parent_rollout_id: str | None = None
    seed: list[ChatMessage] = []


AgentMessage = RunRollout
"""What an ``AgentActor`` accepts."""


@final
class AgentActor(Actor[AgentMessage, RolloutResult]):
    """Runs rollouts of one agent, one at a time."""

    def __init__(self, agent: Agent, control: RolloutControl) -> None:
        self._agent = agent
        self._control = control

    async def receive(self, message: AgentMessage) -> RolloutResult:
        match message:
            case RunRollout():
                return await self._agent.run(
                    message.task,
                    run_id=message.run_id,
                    rollout_id=message.rollout_id,
                    parent_rollout_id=message.parent_rollout_id,
                    seed=message.seed,
                    control=self._control,
                )


@final
class AgentHandle:
    """The spawner's handle on an agent actor."""

    def __init__(self, ref: ActorRef[AgentMessage, RolloutResult], control: RolloutControl):
        self.ref = ref
        self.control = control

    async def run(
        self,
        task: str,
        *,
        timeout: float,  # noqa: ASYNC109 - the deadline belongs to the ask (AskTimeout)
        run_id: str | None = None,
        rollout_id: str | None = None,
        parent_rollout_id: str | None = None,
        seed: Sequence[ChatMessage] = (),
    ) -> RolloutResult:
        """Ask the actor for one rollout; waits at most ``timeout`` seconds.
        If this call is cancelled or times out, the rollout is cancelled."""
        rollout_id = rollout_id or f"rollout-{uuid.uuid4().hex[:12]}"
        message = RunRollout(
            task=task,
            rollout_id=rollout_id,
            run_id=run_id,
            parent_rollout_id=parent_rollout_id,
            seed=list(seed),
        )
        try:
            return await self.ref.ask(message, timeout=timeout)
        except BaseException:
            self.control.cancel(rollout_id)
            raise

    def cancel(self, rollout_id: str | None = None) -> None:
        """Cancel the running rollout (or the one named, when it runs)."""
        self.control.cancel(rollout_id)


async def spawn_agent(
    system: ActorSystem,
    agent: Agent,
    *,
    name: str | None = None,
    parent: SupervisorRef | None = None,
    mailbox_capacity: int | None = None,
) -> AgentHandle:
    """Spawn ``agent`` as an actor (named after it by default) under
    ``parent`` (default: the system's ``/user`` supervisor)."""
    control = RolloutControl()
    ref: ActorRef[AgentMessage, RolloutResult] = await system.spawn(
        lambda: AgentActor(agent, control),
        name=name or agent.name,
        parent=parent,
        mailbox_capacity=mailbox_capacity,
    )
    return AgentHandle(ref, control)


__all__ = ["AgentActor", "AgentHandle", "AgentMessage", "RunRollout", "spawn_agent"]
