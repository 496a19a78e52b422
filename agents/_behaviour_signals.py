"""Behaviour signals of one trajectory, computed without model calls:
``SignalTracker`` and ``Fired`` (thresholds in ``agents.config.SignalConfig``).

Pure computation over protocol types; no I/O.  Must not import tools'
implementations, aggregators or the roof.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import deque
from collections.abc import Sequence
from hashlib import blake2b
from typing import final

import msgspec

from agentrt.agents._agent_config import SignalConfig, SignalName
from agentrt.protocols._messages import AssistantMessage, ToolCall
from agentrt.protocols._model import ModelReply
from agentrt.protocols._tools import ToolResult
from agentrt.runtime.budget._ledger import Headroom
from agentrt.runtime.routing._step_signals import NO_SIGNALS, Signals, mean_logprob


class Fired(msgspec.Struct, frozen=True, kw_only=True):
    """A signal that became active at ``step``."""

    signal: SignalName
    step: int
    detail: str
    value: float | None = None


def _canonical_arguments(raw: str) -> str:
    """A call's arguments as canonical JSON (sorted keys, no spacing), so key
    order and spacing do not hide a repeat; malformed JSON as its raw text."""
    try:
        return msgspec.json.encode(msgspec.json.decode(raw), order="sorted").decode()
    except msgspec.DecodeError:
        pass
    try:  # what msgspec refuses (NaN, integers past 64 bits)
        return json.dumps(json.loads(raw), sort_keys=True)
    except ValueError:
        return raw.strip()


def _shown(call: ToolCall) -> str:
    """A call as a signal's detail shows it: ``name({"key": "value"})``."""
    try:
        arguments = json.dumps(json.loads(call.function.arguments), sort_keys=True)
    except ValueError:
        arguments = call.function.arguments.strip()
    return f"{call.function.name}({arguments})"


@functools.lru_cache(maxsize=64)
def _give_up_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    """The patterns compiled (case-insensitive), once per list: not per rollout."""
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


_NO_RESULT = b""
_STAYS_ACTIVE: frozenset[SignalName] = frozenset({"exhaustion"})

_Action = tuple[str, str]
"""A call as (tool, canonical arguments): what repeats compare."""
_Exchange = tuple[tuple[_Action, bytes], ...]
"""A step's calls, each with its result's digest, in a canonical order."""


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
        self._give_up = _give_up_patterns(tuple(config.give_up_patterns))
        self._exchanges: deque[_Exchange] = deque(maxlen=config.loop_window)
        self._seen_results: set[bytes] = set()
        self._stale_steps = 0
        self._calls = 0
        self._failures = 0
        self._previous_actions: list[_Action] = []
        self._exhaustion_mark = math.ceil(config.exhaustion_fraction * max_steps)
        self._next = NO_SIGNALS
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
        # Each call's action and each result's digest, computed once a step.
        actions = [(c.function.name, _canonical_arguments(c.function.arguments)) for c in calls]
        failures = 0
        for r in results:
            failures += r.is_error
        if calls:
            # Whitespace differences do not make a result new information.
            digests = [
                (b"E" if r.is_error else b"R")
                + blake2b(" ".join(r.content.split()).encode(), digest_size=16).digest()
                for r in results
            ]
            self._observe_loop(calls, actions, digests, now)
            self._observe_stagnation(digests, now)
        self._observe_failures(len(results), failures, now)
        self._observe_steps(step, now)
        if message.content:
            for pattern in self._give_up:
                if (match := pattern.search(message.content)) is not None:
                    now["give_up"] = (f"the model wrote {match.group(0)!r}", None)
                    break
        # Exhaustion stays active once reached; the others reflect this step.
        active = self.active
        fired = self._update(step, now, active & _STAYS_ACTIVE) if now or active else []
        logprob = None
        if reply is not None and reply.choices and reply.choices[0].logprobs:
            logprob = mean_logprob(reply.choices[0].logprobs)
        failed = failures > 0 or "tool_failure_rate" in self.active
        # The same non-empty multiset of (tool, arguments) as the last step.
        actions.sort()
        repeated = bool(actions) and actions == self._previous_actions
        repeated = repeated or "loop" in self.active or "stagnation" in self.active
        self._next = (
            Signals(last_tool_failed=failed, repeated_action=repeated, mean_logprob=logprob)
            if failed or repeated or logprob is not None
            else NO_SIGNALS
        )
        self._previous_actions = actions
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
        actions: Sequence[_Action],
        digests: Sequence[bytes],
        now: dict[SignalName, tuple[str, float | None]],
    ) -> None:
        # ``actions`` and ``digests`` are in call order (results are: the
        # loop's contract); a call without a result (none was recorded)
        # pairs with an empty digest.
        missing = len(actions) - len(digests)
        padded = digests if missing <= 0 else [*digests, *[_NO_RESULT] * missing]
        key = tuple(sorted(zip(actions, padded, strict=False)))  # extra results: ignored
        self._exchanges.append(key)
        repeats = self._exchanges.count(key)
        if repeats >= self._config.loop_repeats:
            if "loop" in self.active:  # fired already: the detail goes nowhere
                now["loop"] = ("", float(repeats))
                return
            shown = ", ".join(sorted(_shown(call) for call in calls))
            if len(shown) > 120:
                shown = shown[:117] + "..."
            now["loop"] = (
                f"{shown} called {repeats} times with the same result"
                f" in the last {len(self._exchanges)} steps",
                float(repeats),
            )

    def _observe_stagnation(
        self, digests: Sequence[bytes], now: dict[SignalName, tuple[str, float | None]]
    ) -> None:
        novel = not self._seen_results.issuperset(digests)
        self._seen_results.update(digests)
        self._stale_steps = 0 if novel else self._stale_steps + 1
        if self._stale_steps >= self._config.stagnation_steps:
            now["stagnation"] = (
                f"no new tool result in {self._stale_steps} consecutive steps",
                float(self._stale_steps),
            )

    def _observe_failures(
        self, calls: int, failures: int, now: dict[SignalName, tuple[str, float | None]]
    ) -> None:
        self._calls += calls
        self._failures += failures
        rate = self._failures / self._calls if self._calls else 0.0  # ``failure_rate``
        if self._calls >= self._config.failure_min_calls and rate >= self._config.failure_rate:
            now["tool_failure_rate"] = (
                f"{self._failures} of {self._calls} tool calls failed ({rate:.0%})",
                rate,
            )

    def _observe_steps(self, step: int, now: dict[SignalName, tuple[str, float | None]]) -> None:
        used = step + 1
        if used >= self._exhaustion_mark:
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
