"""The rollout call: what runs a rollout takes, gives back, and is cancelled by.

Owns ``Runnable`` (the one call every runnable unit answers: an agent, a
hierarchy node, a pipeline, a hierarchy: ``run(task, ctx)``),
``RolloutContext`` (the frozen rest of that call: ids, ledger, seed, the
steps to go on from, the run's options), ``RolloutResult`` (a finished
rollout's ``Trajectory`` plus the signals it raised) and ``RolloutControl``
(cancels a running rollout from another task of the same event loop, which
is how the engine cancels a rollout actor while its mailbox is busy with
the rollout itself).

May import protocols, the budget ledger and anyio; nothing else of agentrt.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Final, Protocol, final

import anyio
import msgspec

from agentrt.protocols._events import RolloutFinished, SignalRaised
from agentrt.protocols._ids import new_run_id, nth_rollout_id
from agentrt.protocols._messages import ChatMessage
from agentrt.protocols._run import RunOptions
from agentrt.protocols._trajectory import Step, Trajectory, TrajectoryStatus
from agentrt.runtime.budget._ledger import BudgetLedger

_AS_CONFIGURED: Final = RunOptions()
"""A rollout's options when it is given none (frozen: shared)."""

_NOTHING_DONE: Final[Mapping[str, RolloutFinished]] = MappingProxyType({})


class RolloutResult(msgspec.Struct, frozen=True, kw_only=True):
    """A finished rollout: its trajectory and the signals it raised."""

    trajectory: Trajectory
    signals: list[SignalRaised] = []

    @property
    def status(self) -> TrajectoryStatus:
        return self.trajectory.status

    @property
    def answer(self) -> str | None:
        return self.trajectory.answer


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutContext:
    """Who a rollout is and what it runs on: everything ``Runnable.run``
    takes besides the task.  Frozen: a callee gets a context of its own
    (``call``), never a changed one.

    ``ledger``: what the rollout is charged to (``None``: the runnable's
    own, an agent's ``ledger``, else a fresh uncapped one).  ``seed``:
    messages that follow the task (summaries of earlier rounds, memory
    hits).  ``control``: lets another task cancel the rollout.
    ``resume``: go on after these first steps (indices 0..k-1, each with a
    reply), replayed into the context, not run again (partial-rollout
    branching; see ``Agent.run``).  ``restored``: the ``resume`` steps are
    this rollout's own, committed by an earlier incarnation of the run:
    charged as spent, no ``branch_step`` recorded; with ``charged`` they
    are already on ``ledger``.  ``options``: the run's ``RunOptions``
    (sampling, the client's tools, the answer's schema), for an agent."""

    run_id: str
    rollout_id: str
    parent_rollout_id: str | None = None
    ledger: BudgetLedger | None = None
    control: RolloutControl | None = None
    seed: tuple[ChatMessage, ...] = ()
    resume: tuple[Step, ...] | None = None
    restored: bool = False
    charged: bool = False
    options: RunOptions = _AS_CONFIGURED
    done: Mapping[str, RolloutFinished] = field(default_factory=lambda: _NOTHING_DONE)

    @classmethod
    def new(
        cls,
        *,
        run_id: str | None = None,
        index: int = 0,
        ledger: BudgetLedger | None = None,
        seed: Sequence[ChatMessage] = (),
        control: RolloutControl | None = None,
        options: RunOptions | None = None,
    ) -> RolloutContext:
        """The context of rollout ``index`` (``<run>-r<index>``) of the run
        ``run_id`` (default: a fresh run id)."""
        run = run_id or new_run_id()
        return cls(
            run_id=run,
            rollout_id=nth_rollout_id(run, index),
            ledger=ledger,
            control=control,
            seed=tuple(seed),
            options=options or _AS_CONFIGURED,
        )

    def call(
        self,
        rollout_id: str,
        ledger: BudgetLedger,
        *,
        seed: Sequence[ChatMessage] = (),
        path: str | None = None,
    ) -> RolloutContext:
        """The context of a rollout this one starts (a sub-agent call, a
        pipeline stage): the same run, this rollout its parent, charged to
        ``ledger``; no control, steps or options of its own.  ``path``: its
        id's path below this rollout (``solve.1``), to pass on what
        ``done`` holds below it."""
        done = _NOTHING_DONE
        if path is not None and self.done:
            prefix = f"{path}."
            done = {k[len(prefix) :]: v for k, v in self.done.items() if k.startswith(prefix)}
        return RolloutContext(
            run_id=self.run_id,
            rollout_id=rollout_id,
            parent_rollout_id=self.rollout_id,
            ledger=ledger,
            seed=tuple(seed),
            done=done,
        )

    def replace(
        self,
        *,
        ledger: BudgetLedger | None = None,
        control: RolloutControl | None = None,
        rollout_id: str | None = None,
    ) -> RolloutContext:
        """This context with ``ledger``, ``control`` or ``rollout_id`` set
        (those given; the rest as they are)."""
        return dataclasses.replace(
            self,
            ledger=ledger if ledger is not None else self.ledger,
            control=control if control is not None else self.control,
            rollout_id=rollout_id if rollout_id is not None else self.rollout_id,
        )


class Runnable(Protocol):
    """What runs a rollout: an ``Agent``, a hierarchy node (``AgentNode``,
    ``PipelineNode``) or a ``Hierarchy``.  ``ctx`` defaults to
    ``RolloutContext.new()``: a run of its own, on a fresh uncapped ledger."""

    @property
    def name(self) -> str: ...

    async def run(self, task: str, ctx: RolloutContext | None = None) -> RolloutResult:
        """Run one rollout of ``task`` to its end."""
        ...


@final
class RolloutControl:
    """Cancels a running rollout from another task of the same event loop:
    ``cancel(rollout_id)`` cancels that rollout if it is running, or as soon
    as it starts."""

    __slots__ = ("_current", "_pending", "_scope")

    def __init__(self) -> None:
        self._current: str | None = None
        self._scope: anyio.CancelScope | None = None
        # Ids cancelled before they started (bounded: the oldest are
        # forgotten); made by the first such cancel (most controls see none).
        self._pending: deque[str] | None = None

    def cancel(self, rollout_id: str) -> None:
        if self._scope is not None and rollout_id == self._current:
            self._scope.cancel()
        else:
            if self._pending is None:
                self._pending = deque(maxlen=256)
            self._pending.append(rollout_id)

    def attach(self, rollout_id: str, scope: anyio.CancelScope) -> RolloutControl:
        """Make ``scope`` the one ``cancel`` cancels while the ``with`` block
        on the returned context runs (this control itself: no object per
        rollout)."""
        if self._scope is not None:
            raise RuntimeError(
                f"RolloutControl runs one rollout at a time; {self._current!r} is running"
            )
        self._current, self._scope = rollout_id, scope
        if self._pending and rollout_id in self._pending:
            self._pending.remove(rollout_id)
            scope.cancel()
        return self

    def __enter__(self) -> None:
        if self._scope is None:
            raise RuntimeError("enter RolloutControl through attach(rollout_id, scope)")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._current, self._scope = None, None


__all__ = ["RolloutContext", "RolloutControl", "RolloutResult", "Runnable"]
