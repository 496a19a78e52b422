"""What ``agentrt run`` prints about each rollout, gathered from the run's
events: how it ended, its steps, tool calls and model calls (its sub-agents'
included).  Must not print.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from agentrt.agents._recording import EventSink
from agentrt.protocols._events import Event, RolloutFinished, RunStarted, StepRecorded, ToolCalled
from agentrt.protocols._ids import is_top_level, top_level_id


@dataclass(slots=True)
class RolloutLine:
    """One rollout as the events told it."""

    status: str = "running"
    stop_reason: str = ""
    steps: int = 0
    tool_calls: int = 0
    model_calls: int = 0


@final
class RolloutTally:
    """An event sink (forwarding to ``then``) that keeps a ``RolloutLine`` per
    rollout; a sub-agent's rollout (``<id>.<name>-<n>``) adds its model
    calls to its top-level rollout's."""

    def __init__(self, then: EventSink | None = None) -> None:
        self._then = then
        self.agent = ""
        self.rollouts: dict[str, RolloutLine] = {}

    def _line(self, rollout_id: str) -> RolloutLine:
        return self.rollouts.setdefault(top_level_id(rollout_id), RolloutLine())

    async def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(agent=agent):
                self.agent = agent
            case StepRecorded(rollout_id=rid, step=step):
                line = self._line(rid)
                line.model_calls += step.reply is not None
                if is_top_level(rid):
                    line.steps += 1
            case ToolCalled(rollout_id=rid) if is_top_level(rid):
                self._line(rid).tool_calls += 1
            case RolloutFinished(rollout_id=rid, status=status, stop_reason=reason) if is_top_level(
                rid
            ):
                line = self._line(rid)
                line.status, line.stop_reason = status, reason or ""
            case _:
                pass
        if self._then is not None:
            await self._then(event)


__all__ = ["RolloutLine", "RolloutTally"]
