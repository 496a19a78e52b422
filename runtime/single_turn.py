"""What ``agentrt run`` does until the agent loop exists: N rollouts of a
single-turn answer, each rollout an actor (runtime).

A run opens the configured backend, starts an actor system named after the
run, spawns one ``RolloutActor`` per rollout under a one-for-one
``rollouts`` supervisor, asks every actor for its answer in parallel (each
ask with a deadline), and folds the replies into a ``RunResult``: one
summary per rollout, exact usage summed from what the backend reported, and
the most common answer.

Failures are data: a backend error or a missed deadline becomes that
rollout's failure mode; the run fails only when no rollout answers.  A
handler that raises something unexpected crashes its actor, which its
supervisor sees (and restarts, escalating a crash loop).

Uses the actor kernel and model backends only; must not import agents,
tools or aggregators (the agent loop will replace this module).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from functools import partial
from typing import Any, Final, final

import anyio
import msgspec

from agentrt.protocols import (
    Cost,
    ModelReply,
    ModelRequest,
    RunResult,
    SamplingParams,
    SystemMessage,
    TrajectorySummary,
    Usage,
    UserMessage,
)
from agentrt.runtime.actors import (
    Actor,
    ActorCrashed,
    ActorError,
    ActorRef,
    ActorSystem,
    AskTimeout,
    SupervisorSpec,
)
from agentrt.runtime.errors import AgentrtError
from agentrt.runtime.log import get_logger
from agentrt.runtime.models.base import ModelBackend
from agentrt.runtime.models.registry import ModelRegistry

__all__ = ["SYSTEM_PROMPT", "AnswerTask", "RolloutActor", "RolloutOutcome", "run_single_turn"]

#: The system prompt of a single-turn rollout.
SYSTEM_PROMPT: Final = "You are a helpful assistant. Answer the task concisely."


class AnswerTask(msgspec.Struct, tag=True, frozen=True):
    """Asks a rollout actor to answer its task once."""


class RolloutOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """A rollout's reply, or why there is none."""

    rollout_id: str
    reply: ModelReply | None = None
    error: str | None = None


@final
class RolloutActor(Actor[AnswerTask, RolloutOutcome]):
    """One rollout: answers its task with one model call per ``AnswerTask``."""

    def __init__(self, rollout_id: str, backend: ModelBackend, request: ModelRequest) -> None:
        self._rollout_id = rollout_id
        self._backend = backend
        self._request = request

    async def receive(self, message: AnswerTask) -> RolloutOutcome:
        match message:
            case AnswerTask():
                try:
                    reply = await self._backend.complete(self._request)
                except AgentrtError as error:
                    # An expected failure of this rollout (the backend, a bad
                    # request): report it; crashing would restart nothing useful.
                    get_logger(__name__).warning(
                        "rollout_failed", rollout=self._rollout_id, error=str(error)
                    )
                    return RolloutOutcome(rollout_id=self._rollout_id, error=str(error))
                return RolloutOutcome(rollout_id=self._rollout_id, reply=reply)


async def run_single_turn(
    task: str,
    *,
    registry: ModelRegistry,
    model: str | None = None,
    rollouts: int = 1,
    sampling: SamplingParams | None = None,
    timeout_s: float = 300.0,
    run_id: str | None = None,
) -> RunResult:
    """Answer ``task`` with ``rollouts`` parallel single-turn rollouts.

    Raises ``UserError`` subclasses for an unknown model or a bad
    configuration, before any rollout starts."""
    if rollouts < 1:
        raise ValueError(f"rollouts must be at least 1, got {rollouts}")
    run_id = run_id or f"run-{uuid.uuid4().hex[:12]}"
    sampling = sampling or SamplingParams()
    _, model_name = registry.resolve(model)
    backend = registry.create(model)
    started = time.perf_counter()
    outcomes: dict[str, RolloutOutcome] = {}
    rollout_ids = [f"rollout-{index}" for index in range(rollouts)]
    async with backend, ActorSystem(system_id=run_id) as system:
        supervisor = await system.spawn_supervisor(SupervisorSpec("rollouts"))
        refs: list[ActorRef[AnswerTask, RolloutOutcome]] = []
        for index, rollout_id in enumerate(rollout_ids):
            request = _request(task, model_name, sampling, index, f"{run_id}/{rollout_id}")
            factory = partial(RolloutActor, rollout_id, backend, request)
            refs.append(await supervisor.spawn(factory, name=rollout_id))

        async def ask(rollout_id: str, ref: ActorRef[AnswerTask, RolloutOutcome]) -> None:
            outcomes[rollout_id] = await _ask(rollout_id, ref, timeout_s)

        async with anyio.create_task_group() as group:
            for rollout_id, ref in zip(rollout_ids, refs, strict=True):
                group.start_soon(ask, rollout_id, ref)
        # Leaving the system stops every actor: a rollout past its deadline
        # is cancelled, and its backend call with it.
    return _result(run_id, [outcomes[r] for r in rollout_ids], time.perf_counter() - started)


async def _ask(
    rollout_id: str, ref: ActorRef[AnswerTask, RolloutOutcome], timeout_s: float
) -> RolloutOutcome:
    try:
        return await ref.ask(AnswerTask(), timeout=timeout_s)
    except AskTimeout:
        error = f"no answer within {timeout_s:g} s"
    except ActorCrashed as crash:
        error = f"crashed: {crash.cause!r}"
    except ActorError as failure:
        error = str(failure)
    get_logger(__name__).warning("rollout_failed", rollout=rollout_id, error=error)
    return RolloutOutcome(rollout_id=rollout_id, error=error)


def _request(
    task: str, model: str | None, sampling: SamplingParams, index: int, request_id: str
) -> ModelRequest:
    if sampling.seed is not None:
        # Rollouts of a seeded run differ from each other but are reproducible.
        sampling = msgspec.structs.replace(sampling, seed=sampling.seed + index)
    return ModelRequest(
        messages=[SystemMessage(content=SYSTEM_PROMPT), UserMessage(content=task)],
        model=model,
        sampling=sampling,
        request_id=request_id,
    )


def _result(run_id: str, outcomes: list[RolloutOutcome], wall_s: float) -> RunResult:
    summaries: list[TrajectorySummary] = []
    usage = Usage()
    calls = 0
    for outcome in outcomes:
        if outcome.reply is None:
            summaries.append(
                TrajectorySummary(
                    rollout_id=outcome.rollout_id, failure_modes=[outcome.error or "no reply"]
                )
            )
            continue
        reply = outcome.reply
        usage = usage + reply.usage
        calls += 1
        summaries.append(
            TrajectorySummary(
                rollout_id=outcome.rollout_id,
                answer=(reply.message.content or "").strip(),
                cost=Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s),
            )
        )
    cost = Cost(usage=usage, model_calls=calls, wall_seconds=wall_s)
    answered = [s.answer for s in summaries if s.answer]
    if not answered:
        errors = sorted({mode for s in summaries for mode in s.failure_modes})
        return RunResult(
            run_id=run_id,
            status="failed",
            cost=cost,
            summaries=summaries,
            error="; ".join(errors) or "every rollout answered with empty text",
        )
    answer, trace = _most_common(answered)
    return RunResult(
        run_id=run_id,
        status="succeeded",
        answer=answer,
        rationale=f"{trace['votes']} of {len(outcomes)} rollouts gave this answer",
        summaries=summaries,
        aggregation_trace=[trace],
        cost=cost,
    )


def _most_common(answers: list[str]) -> tuple[str, dict[str, Any]]:
    """Exact-match plurality; ties go to the answer given first."""
    counts = Counter(answers)
    best = max(counts, key=lambda a: (counts[a], -answers.index(a)))
    return best, {"aggregate": "plurality", "votes": counts[best], "distinct": len(counts)}
