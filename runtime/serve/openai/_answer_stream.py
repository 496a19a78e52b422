"""What an OpenAI-style stream (chat completions, responses) says while a
run goes: ``AnswerStream`` turns the run's events into ``StreamText``
(content and reasoning deltas).

Part of the daemon; pure: knows the event types, not HTTP nor the wire
shapes of either OpenAI API.
"""

from __future__ import annotations

from typing import final

import msgspec

from agentrt.protocols._events import (
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutStarted,
    StepRecorded,
    TokenDelta,
    VoteCast,
)
from agentrt.protocols._ids import is_top_level, short_rollout_id


class StreamText(msgspec.Struct, frozen=True, kw_only=True):
    """One delta: ``content`` (the answer) and ``reasoning`` (progress, a
    thinking model's reasoning: clients show it apart from the answer)."""

    content: str = ""
    reasoning: str = ""


@final
class AnswerStream:
    """The text a streaming client gets for run ``run_id`` of ``rollouts``
    rollouts.  With one rollout, its model's text is the answer as it is
    generated: ``feed`` gives it as ``content`` the moment its token events
    arrive, its reasoning and tool calls as ``reasoning``.  With several,
    the answer is chosen at the end: each rollout's end, errors and the
    aggregation's rounds come as ``reasoning`` lines.  ``rest`` is the part
    of the final answer not yet sent as content (all of it, with several
    rollouts; what the last step did not stream, with one: say the answer
    came through a finish tool).

    Use: ``text = stream.feed(event)`` for each event of the run followed
    with tokens (``RunService.follow(..., tokens=True)``), send ``text``
    when it is not ``None``; at the end send ``stream.rest(answer)``."""

    __slots__ = ("_content_sent", "_last_step", "_step_text", "rollouts", "run_id")

    def __init__(self, run_id: str, rollouts: int) -> None:
        self.run_id = run_id
        self.rollouts = rollouts
        self._content_sent = False
        self._step_text: list[str] = []
        """Content sent for the answering rollout's current step."""
        self._last_step = -1

    def _label(self, rollout_id: str) -> str:
        return short_rollout_id(self.run_id, rollout_id)

    def _answering(self, rollout_id: str) -> bool:
        return self.rollouts == 1 and is_top_level(rollout_id)

    def feed(self, event: Event) -> StreamText | None:
        """What to send for ``event`` (``None``: nothing)."""
        if type(event) is TokenDelta:
            return self._token(event)
        line = self._milestone(event)
        return StreamText(reasoning=line) if line is not None else None

    def _token(self, event: TokenDelta) -> StreamText | None:
        if not self._answering(event.rollout_id):
            return None
        if event.step != self._last_step:
            self._last_step, self._step_text = event.step, []
        if event.text:
            self._step_text.append(event.text)
            self._content_sent = True
        return StreamText(content=event.text, reasoning=event.reasoning)

    def _milestone(self, event: Event) -> str | None:
        """A line of progress for ``event``, if it is one."""
        line: str | None = None
        match event:
            case StepRecorded(rollout_id=rid, step=step) if self._answering(rid):
                calls = step.reply.message.tool_calls if step.reply and step.reply.choices else []
                if calls:
                    names = ", ".join(c.function.name for c in calls)
                    line = f"\n[step {step.index}: calling {names}]\n"
            case RolloutStarted(rollout_id=rid) if self.rollouts > 1 and is_top_level(rid):
                line = f"rollout {self._label(rid)} started\n"
            case RolloutFinished(rollout_id=rid, status=status, answer=answer, stop_reason=why):
                if self.rollouts > 1 and is_top_level(rid):
                    said = f"answer: {answer}" if answer is not None else (why or status)
                    line = f"rollout {self._label(rid)} {status}: {said}\n"
            case ErrorRaised(where=where, message=message):
                line = f"error ({where}): {message}\n"
            case VoteCast(aggregator=aggregator, round=round_, winner=winner):
                who = self._label(winner) if winner is not None else "none"
                line = f"{aggregator} round {round_}: winner {who}\n"
            case _:
                pass
        return line

    def rest(self, answer: str | None) -> str:
        """The content still to send for the final ``answer``."""
        if not answer:
            return ""
        streamed = "".join(self._step_text)
        if streamed and answer.startswith(streamed):
            return answer[len(streamed) :]
        return f"\n\n{answer}" if self._content_sent else answer


__all__ = ["AnswerStream", "StreamText"]
