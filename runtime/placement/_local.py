"""``LocalPlacement``: every rollout an actor in this process's actor
system, under its run's supervisor (what a Ray worker also does with the
rollouts it is sent).  Must not know how rollouts are scheduled or aggregated.
"""

from __future__ import annotations

from contextlib import suppress
from typing import final

import anyio
import msgspec

from agentrt.agents._control import RolloutControl, RolloutResult
from agentrt.runtime.engine._rollout_actor import RolloutActor
from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorError, ActorStopped
from agentrt.runtime.placement._placement import PlacedRun, RolloutGaveUp, RolloutJob


@final
class _Incarnations:
    """A rollout actor's factory: a fresh ``RolloutActor`` per incarnation."""

    __slots__ = ("_control", "_job", "_run")

    def __init__(self, run: PlacedRun, job: RolloutJob, control: RolloutControl) -> None:
        self._run = run
        self._job = job
        self._control = control

    def __call__(self) -> RolloutActor:
        run, job = self._run, self._job
        return RolloutActor(
            run.runner,
            job.ledger,
            self._control,
            run_id=run.run_id,
            rollout_id=job.message.rollout_id,
            committed=job.committed,
            announce=run.emit,
        )


@final
class LocalPlacement:
    """Rollouts as actors of this process (``[placement] kind = "local"``)."""

    @property
    def kind(self) -> str:
        return "local"

    def check_agent(self, agent: object) -> None:
        """Any agent runs here."""

    async def run_rollout(self, run: PlacedRun, job: RolloutJob) -> RolloutResult:
        """Spawn the rollout's actor and ask it for the rollout; after a
        crash, ask its next incarnation to go on from the committed steps
        (a pipeline, which cannot be taken up mid-way, starts over).  The
        actor stops itself once it answered; else (a failure, a
        cancellation) it is stopped here before this returns."""
        control = RolloutControl()
        rollout_id = job.message.rollout_id
        ref = await run.supervisor.spawn(_Incarnations(run, job, control), name=job.name)
        message = job.message
        last: BaseException | None = None
        answered = False
        try:
            while True:
                try:
                    # No deadline of the ask's own: the run's cancel scope
                    # (its wall-clock cap) bounds the rollout.
                    result = await ref.ask(message, timeout=None)
                    answered = True
                    return result
                except ActorCrashed as crash:
                    last = crash.cause
                    steps = job.committed
                    go_on = list(steps) if run.resumable and steps else None
                    message = msgspec.structs.replace(
                        message,
                        resume=go_on,
                        restored=go_on is not None,
                        charged=go_on is not None,
                    )
                except ActorStopped as stopped:
                    if last is None:
                        raise
                    raise RolloutGaveUp(
                        f"rollout {rollout_id} crashed {run.restarts + 1} "
                        f"times and was not restarted again; the last error: {last!r}"
                    ) from stopped
        except BaseException:
            control.cancel(rollout_id)
            raise
        finally:
            if not answered:
                with anyio.CancelScope(shield=True):
                    with suppress(ActorError):
                        await run.system.stop(ref)
