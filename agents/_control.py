"""Handles on a rollout from outside it: its result and its cancellation.

Owns ``RolloutResult`` (a finished rollout's ``Trajectory`` plus the signals
it raised) and ``RolloutControl`` (cancels a running rollout from another
task of the same event loop, which is how the engine cancels a rollout
actor while its mailbox is busy with the rollout itself).

May import protocols and anyio; nothing else of agentrt.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType
from typing import final

import anyio
import msgspec

from agentrt.protocols._events import SignalRaised
from agentrt.protocols._trajectory import Trajectory, TrajectoryStatus


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


__all__ = ["RolloutControl", "RolloutResult"]
