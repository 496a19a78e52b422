"""A rollout as an actor: the message that runs one and the actor that runs it.

Owns ``RunRollout`` (a tagged msgspec message: the task, the ids, the seed
and the committed steps to go on from) and ``RolloutActor`` (runs its
rollout's entry node, an ``Agent`` or a ``Hierarchy``, charged to the
rollout's ledger; says ``RolloutRestarted`` when its supervisor restarts it).
Must not know how rollouts are scheduled or aggregated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, final

import msgspec

from agentrt.agents._agent import Agent
from agentrt.agents._control import RolloutContext, RolloutControl, RolloutResult
from agentrt.agents._hierarchy import Hierarchy
from agentrt.protocols._events import RolloutFinished, RolloutRestarted
from agentrt.protocols._messages import ChatMessage
from agentrt.protocols._run import RunOptions
from agentrt.protocols._trajectory import Step
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._actor import Actor


class RunRollout(msgspec.Struct, frozen=True, kw_only=True, tag="run_rollout"):
    """Run the rollout ``rollout_id`` of ``task`` to its end; the reply is its
    ``RolloutResult``.  ``resume``: the rollout's committed steps, to go on
    from (``charged``: the ledger holds their calls already); ``options``:
    the run's ``RunOptions``; ``calls_after``: the highest sub-agent call
    number an earlier incarnation recorded under it (later calls get higher
    ones, so no call id is used twice); ``done``: the rollouts below it an
    earlier incarnation finished (``RolloutContext.done``)."""

    task: str
    run_id: str
    rollout_id: str
    seed: tuple[ChatMessage, ...] = ()
    resume: list[Step] | None = None
    restored: bool = False
    charged: bool = False
    options: RunOptions = RunOptions()
    calls_after: int = 0
    done: dict[str, RolloutFinished] = {}


RolloutMessage = RunRollout

EntryNode = Agent | Hierarchy
"""What a run's rollouts run: an agent, or a hierarchy (its entry node)."""
Announce = Callable[[RolloutRestarted], Awaitable[object]]


@final
class RolloutActor(Actor[RolloutMessage, RolloutResult]):
    """Runs one rollout of ``runner``; a fresh instance after each crash.
    ``committed``: the rollout's committed steps (a list that grows)."""

    __slots__ = (
        "_announce",
        "_committed",
        "_control",
        "_ledger",
        "_rollout_id",
        "_run_id",
        "_runner",
    )

    def __init__(
        self,
        runner: EntryNode,
        ledger: BudgetLedger,
        control: RolloutControl,
        *,
        run_id: str,
        rollout_id: str,
        committed: Sequence[Step],
        announce: Announce,
    ) -> None:
        self._runner = runner
        self._ledger = ledger
        self._control = control
        self._run_id = run_id
        self._rollout_id = rollout_id
        self._committed = committed
        self._announce = announce

    async def on_restarted(self, error: Exception) -> None:
        await self._announce(
            RolloutRestarted(
                run_id=self._run_id,
                rollout_id=self._rollout_id,
                incarnation=self.context.incarnation,
                error=f"{type(error).__name__}: {error}",
                resumed_steps=len(self._committed),
            )
        )

    def receive(self, message: RolloutMessage) -> Coroutine[Any, Any, RolloutResult]:
        """The rollout's own coroutine, which the actor awaits
        (docs/design/performance.md, "The engine")."""
        match message:
            case RunRollout():
                # Asked once: it ends with its answer, so nobody has to
                # stop it (a crash, before that, is restarted as ever).
                self.context.stop_when_answered()
                if message.calls_after:
                    self._ledger.skip_call_numbers(message.calls_after)
                resume = message.resume
                ctx = RolloutContext(
                    run_id=message.run_id,
                    rollout_id=message.rollout_id,
                    ledger=self._ledger,
                    control=self._control,
                    seed=message.seed,
                    resume=tuple(resume) if resume is not None else None,
                    restored=message.restored,
                    charged=message.charged,
                    options=message.options,
                    done=message.done,
                )
                return self._runner.run(message.task, ctx)


__all__ = ["EntryNode", "RolloutActor", "RolloutMessage", "RunRollout"]
