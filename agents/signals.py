"""Behaviour signals of one trajectory, computed without model calls:
``SignalTracker`` and ``Fired`` (thresholds in ``agents.config.SignalConfig``).

Pure computation over protocol types; no I/O.  Must not import tools'
implementations, aggregators or the roof.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import deque
from collections.abc import Sequence
from typing import final

import msgspec

from agentrt.agents.config import SignalConfig, SignalName
from agentrt.protocols import AssistantMessage, ModelReply, ToolCall, ToolResult
from agentrt.runtime.budget import Headroom
from agentrt.runtime.routing import Signals, mean_logprob, same_action


class Fired(msgspec.Struct, frozen=True, kw_only=True):
    """A signal that became active at ``step``."""

    signal: SignalName
    step: int
    detail: str
    value: float | None = None


def _canonical(call: ToolCall) -> str:
    try:
        arguments = json.dumps(json.loads(call.function.arguments), sort_keys=True)
    except ValueError:
        arguments = call.function.arguments.strip()
    return f"{call.function.name}({arguments})"


def _digest(text: str) -> bytes:
    # Whitespace differences do not make a result new information.
    return hashlib.blake2b(" ".join(text.split()).encode(), digest_size=16).digest()


_NO_RESULT = b""


def _exchange_key(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> tuple[tuple[str, bytes], ...]:
    """The step's calls, each with the digest of its result, in a canonical
    order.  ``results`` are in call order (the loop's contract); a call
    without a result (none was recorded) pairs with an empty digest."""
    pairs = []
    for i, call in enumerate(calls):
        outcome = results[i] if i < len(results) else None
        digest = _NO_RESULT
        if outcome is not None:
            digest = (b"E" if outcome.is_error else b"R") + _digest(outcome.content)
        pairs.append((_canonical(call), digest))
    return tuple(sorted(pairs))


@final
class SignalTracker:
    """Signals of one rollout: ``loop``, ``stagnation``,
    ``tool_failure_rate``, ``exhaustion`` and ``give_up`` (see
    ``SignalConfig`` for when each fires).  A signal fires (``Fired``,
    emitted as a ``SignalRaised`` event by the loop) when it becomes
    active; ``active`` holds those active now."""

    def __init__(self, config: SignalConfig, *, max_steps: int) -> None:
        self._config = config
        self._max_steps = max_steps
        self._give_up = [re.compile(p, re.IGNORECASE) for p in config.give_up_patterns]
        self._exchanges: deque[tuple[tuple[str, bytes], ...]] = deque(maxlen=config.loop_window)
        self._seen_results: set[bytes] = set()
        self._stale_steps = 0
        self._calls = 0
        self._failures = 0
        self._previous_calls: list[ToolCall] = []
        self._next = Signals()
        self.active: set[SignalName] = set()
        self.fired: list[Fired] = []

    # -- reading -------------------------------------------------------------

    def routing_signals(self) -> Signals:
        """What the router should read for the next step: a failed tool call
        or a failure rate over the threshold sets ``last_tool_failed``; a
        repeated action, a loop or stagnation sets ``repeated_action``; the
        reply's mean token log-probability (when returned) ``mean_logprob``."""
        return self._next

    @property
    def failure_rate(self) -> float:
        """Share of tool calls so far that failed (0 before any call)."""
        return self._failures / self._calls if self._calls else 0.0

    # -- feeding -------------------------------------------------------------

    def observe(
        self,
        step: int,
        message: AssistantMessage,
        results: Sequence[ToolResult],
        reply: ModelReply | None = None,
    ) -> list[Fired]:
        """Take in a finished step; return the signals it fired."""
        now: dict[SignalName, tuple[str, float | None]] = {}
        calls = message.tool_calls
        if calls:
            self._observe_loop(calls, results, now)
            self._observe_stagnation(results, now)
        self._observe_failures(results, now)
        self._observe_steps(step, now)
        if message.content:
            match = next((m for p in self._give_up if (m := p.search(message.content))), None)
            if match is not None:
                now["give_up"] = (f"the model wrote {match.group(0)!r}", None)
        # Exhaustion stays active once reached; the others reflect this step.
        kept: set[SignalName] = {s for s in self.active if s == "exhaustion"}
        fired = self._update(step, now, kept)
        logprob = None
        if reply is not None and reply.choices:
            logprob = mean_logprob(reply.choices[0].logprobs)
        self._next = Signals(
            last_tool_failed=any(r.is_error for r in results) or "tool_failure_rate" in self.active,
            repeated_action=same_action(self._previous_calls, calls)
            or bool({"loop", "stagnation"} & self.active),
            mean_logprob=logprob,
        )
        self._previous_calls = list(calls)
        return fired

    def observe_budget(self, step: int, headroom: Headroom) -> list[Fired]:
        """Note the budget's headroom before ``step``; fires ``exhaustion``
        when less than ``budget_fraction_left`` is left."""
        fraction = headroom.fraction
        if fraction is None or fraction > self._config.budget_fraction_left:
            return []
        detail = f"{fraction:.0%} of the budget left"
        return self._update(step, {"exhaustion": (detail, fraction)}, set(self.active))

    def exhausted(self, step: int, detail: str) -> list[Fired]:
        """The rollout ran out (steps, tokens, budget): fires ``exhaustion``
        unless it already fired."""
        return self._update(step, {"exhaustion": (detail, None)}, set(self.active))

    # -- the signals ---------------------------------------------------------

    def _observe_loop(
        self,
        calls: Sequence[ToolCall],
        results: Sequence[ToolResult],
        now: dict[SignalName, tuple[str, float | None]],
    ) -> None:
        key = _exchange_key(calls, results)
        self._exchanges.append(key)
        repeats = sum(1 for k in self._exchanges if k == key)
        if repeats >= self._config.loop_repeats:
            shown = ", ".join(call for call, _ in key)
            if len(shown) > 120:
                shown = shown[:117] + "..."
            now["loop"] = (
                f"{shown} called {repeats} times with the same result"
                f" in the last {len(self._exchanges)} steps",
                float(repeats),
            )

    def _observe_stagnation(
        self, results: Sequence[ToolResult], now: dict[SignalName, tuple[str, float | None]]
    ) -> None:
        digests = [_digest(r.content) for r in results]
        novel = any(d not in self._seen_results for d in digests)
        self._seen_results.update(digests)
        self._stale_steps = 0 if novel else self._stale_steps + 1
        if self._stale_steps >= self._config.stagnation_steps:
            now["stagnation"] = (
                f"no new tool result in {self._stale_steps} consecutive steps",
                float(self._stale_steps),
            )

    def _observe_failures(
        self, results: Sequence[ToolResult], now: dict[SignalName, tuple[str, float | None]]
    ) -> None:
        self._calls += len(results)
        self._failures += sum(1 for r in results if r.is_error)
        rate = self.failure_rate
        if self._calls >= self._config.failure_min_calls and rate >= self._config.failure_rate:
            now["tool_failure_rate"] = (
                f"{self._failures} of {self._calls} tool calls failed ({rate:.0%})",
                rate,
            )

    def _observe_steps(self, step: int, now: dict[SignalName, tuple[str, float | None]]) -> None:
        used = step + 1
        mark = math.ceil(self._config.exhaustion_fraction * self._max_steps)
        if used >= mark:
            now["exhaustion"] = (f"{used} of {self._max_steps} steps used", used / self._max_steps)

    def _update(
        self,
        step: int,
        now: dict[SignalName, tuple[str, float | None]],
        kept: set[SignalName],
    ) -> list[Fired]:
        fired = [
            Fired(signal=name, step=step, detail=detail, value=value)
            for name, (detail, value) in now.items()
            if name not in self.active
        ]
        self.active = kept | set(now)
        self.fired.extend(fired)
        return fired


__all__ = ["Fired", "SignalTracker"]
