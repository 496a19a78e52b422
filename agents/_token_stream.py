"""Token streaming out of the agent loop: ``TokenPacer`` (whether a run's
rollouts stream their model calls, and how often each sends a
``TokenDelta``) and ``TokenBuffer`` (one model call's text, coalesced into
those events).

May import protocols and anyio; nothing else of agentrt.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

from agentrt.protocols._events import TokenDelta

if TYPE_CHECKING:
    from agentrt.agents._recording import EventEmitter

#: The shortest time between two ``TokenDelta`` events of one rollout.
TOKEN_WINDOW_S: Final = 0.05
#: The most ``TokenDelta`` events a run sends per second, all rollouts together.
MAX_TOKEN_EVENTS_PER_S: Final = 200.0


@final
class TokenPacer:
    """Whether a run's rollouts stream their model calls as ``TokenDelta``
    events, and how often.  Set on the run's ``EventEmitter`` (``tokens``)
    by whoever reads tokens; without one, the loop calls ``complete`` and
    builds no token event.

    ``listening``: asked before each model call; ``False`` (nobody reads
    tokens now, say no client follows a daemon run) makes that call a plain
    ``complete``.  Each rollout sends at most one event per ``window``:
    ``window_s``, widened so that the rollouts streaming at once send no
    more than ``max_events_per_s`` together (a 1,000-rollout run does not
    flood its readers).  The first piece of a call goes out at once; later
    pieces wait for the window and go out with the next piece after it, or
    when the call ends."""

    __slots__ = ("listening", "max_events_per_s", "streaming", "window_s")

    def __init__(
        self,
        listening: Callable[[], bool] | None = None,
        *,
        window_s: float = TOKEN_WINDOW_S,
        max_events_per_s: float = MAX_TOKEN_EVENTS_PER_S,
    ) -> None:
        if not window_s >= 0 or not math.isfinite(window_s):
            raise ValueError(f"TokenPacer window_s must be a finite number >= 0, got {window_s!r}")
        if not max_events_per_s > 0:
            raise ValueError(f"TokenPacer max_events_per_s must be > 0, got {max_events_per_s!r}")
        self.listening = listening
        self.window_s = window_s
        self.max_events_per_s = max_events_per_s
        self.streaming = 0
        """Model calls streaming now, across the run."""

    def wanted(self) -> bool:
        """Whether the next model call should stream."""
        return self.listening is None or self.listening()

    def window(self) -> float:
        """Seconds between two events of one rollout, now."""
        return max(self.window_s, self.streaming / self.max_events_per_s)


@final
class TokenBuffer:
    """One streaming model call's text on its way to ``emitter`` as
    ``TokenDelta`` events, paced by ``pacer`` (an async context manager:
    the call counts as streaming inside it, and what is left is sent on a
    clean exit)."""

    __slots__ = (
        "_emitter",
        "_last",
        "_pacer",
        "_reasoning",
        "_text",
        "rollout_id",
        "run_id",
        "step",
    )

    def __init__(
        self, pacer: TokenPacer, emitter: EventEmitter, *, run_id: str, rollout_id: str, step: int
    ) -> None:
        self._pacer = pacer
        self._emitter = emitter
        self.run_id = run_id
        self.rollout_id = rollout_id
        self.step = step
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._last = -math.inf

    async def __aenter__(self) -> TokenBuffer:
        self._pacer.streaming += 1
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._pacer.streaming -= 1
        if exc_type is None:
            await self.flush()

    async def add(self, text: str, reasoning: str = "") -> None:
        """Take a piece; send what is held when the window has passed."""
        if text:
            self._text.append(text)
        if reasoning:
            self._reasoning.append(reasoning)
        if time.monotonic() - self._last >= self._pacer.window():
            await self.flush()

    def restart(self) -> None:
        """The call's stream was cut and retried: drop the text not yet sent
        (followers read the whole reply in the step's ``StepRecorded``)."""
        self._text.clear()
        self._reasoning.clear()

    async def flush(self) -> None:
        """Send what is held now, if anything."""
        if not self._text and not self._reasoning:
            return
        text, reasoning = "".join(self._text), "".join(self._reasoning)
        self._text.clear()
        self._reasoning.clear()
        self._last = time.monotonic()
        await self._emitter.emit_token(
            TokenDelta(
                run_id=self.run_id,
                rollout_id=self.rollout_id,
                step=self.step,
                text=text,
                reasoning=reasoning,
            )
        )


__all__ = ["MAX_TOKEN_EVENTS_PER_S", "TOKEN_WINDOW_S", "TokenBuffer", "TokenPacer"]
