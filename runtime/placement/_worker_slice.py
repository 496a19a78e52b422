"""A rollout worker's side of budget slices: ``RunSlice``, the part of a
run's budget the driver leased to this worker (its rollouts reserve and
charge there with no round trip; what they spent goes back in one
``SliceReport`` per exchange), and ``DriverLedger``, a rollout ledger's
upstream that books its calls on the run's slice.  Must not know how
items travel, nor the driver's ledgers.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Final, Protocol, final

import msgspec

from agentrt.protocols._usage import Usage
from agentrt.runtime.budget._ledger import Headroom
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.kernel._errors import BudgetExceeded, InvalidRequestError, RuntimeFailure
from agentrt.runtime.placement._worker_wire import (
    Outbound,
    RestoreOut,
    SliceAsk,
    SliceGranted,
    SliceReport,
    Spent,
)

#: The calls a slice asks for (the driver grants fewer near the run's cap).
SLICE_CALLS: Final = 32
#: A slice's call's prompt, over the prompt of the call that asked (a
#: rollout's prompt grows with its steps).
SLICE_PROMPT_ROOM: Final = 2.0
#: How long a call waits for the driver's answer.
DRIVER_TIMEOUT_S: Final = 120.0


class SliceChannel(Protocol):
    """The worker's outbox, as a slice uses it."""

    def next_id(self) -> int: ...
    def post(self, item: Outbound) -> None: ...
    def touch(self, slice_: RunSlice) -> None: ...
    def expect_granted(self, rid: int) -> Future[SliceGranted]: ...


@dataclass(frozen=True, slots=True)
class _Held:
    """A call in flight on the slice: its model, worst case (prompt and
    completion tokens, money) as taken from the slice."""

    model: str
    prompt: int
    completion: int
    pico: int


def _gone(usage: Usage) -> Usage:
    """``usage`` with its cached prompt tokens at most its prompt's (as
    the ledger prices it; a sum of such is priced as the sum)."""
    cached = min(max(usage.cached_prompt_tokens, 0), usage.prompt_tokens)
    if cached == usage.cached_prompt_tokens:
        return usage
    return msgspec.structs.replace(usage, cached_prompt_tokens=cached)


@final
class RunSlice:
    """This worker's slice of one run's budget, shared by the run's
    rollouts here: what is left of it in tokens, pico-USD and calls
    (``None``: the run has no cap on that measure).  A call that fits is
    taken from it at once; one that does not gives back what is left and
    waits for the driver (the run's ledger then grants it its own worst
    case, and a slice more when the run's headroom holds it, or refuses
    it).  When what is left runs low, more is asked for ahead of need.
    ``report`` says what was spent since the last one, and what is in
    flight; ``end`` gives the rest back.  Thread-safe: calls reserve on
    the rollouts' loop, grants and reports happen on the transport's."""

    def __init__(self, channel: SliceChannel, key: int, prices: PriceTable) -> None:
        self.key = key
        self._channel = channel
        self._prices = prices
        self._lock = threading.Lock()
        # Nothing until the first grant: the first call asks.
        self._tokens: int | None = 0
        self._pico: int | None = 0
        self._calls: int | None = 0
        self._far: Headroom | None = None
        self._held: dict[int, _Held] = {}
        self._flying: dict[str, list[int]] = {}
        """By model: the calls in flight, their prompts and completions."""
        self._spent: dict[str, list[int]] = {}
        """By model, since the last report: calls, prompt, completion and cached tokens."""
        self._dirty = False
        self._ahead = 0
        """The id of the ask ahead of need that is out (0: none)."""
        self.waits = 0
        """Calls that waited for the driver."""

    # -- a rollout's calls (on the rollouts' loop) ---------------------------------

    def reserve(self, ledger: str, model: str, prompt_tokens: int, max_tokens: int, n: int) -> int:
        completion = n * max_tokens
        with self._lock:
            held = self._take(model, prompt_tokens, completion)
            ask = self._ask_ahead(ledger, model, prompt_tokens, max_tokens, n) if held else None
            back = (0, 0, 0) if held else self._give_back()
        if held:
            self._channel.touch(self)
            if ask is not None:
                self._channel.post(ask)
            return held
        return self._wait(ledger, model, prompt_tokens, max_tokens, n=n, back=back)

    def _wait(
        self,
        ledger: str,
        model: str,
        prompt_tokens: int,
        max_tokens: int,
        *,
        n: int,
        back: tuple[int, int, int],
    ) -> int:
        """Ask the driver for the call's own worst case and a slice more,
        waiting (this loop stops for one round trip); take the call's."""
        self.waits += 1
        rid = self._channel.next_id()
        waiting = self._channel.expect_granted(rid)
        self._channel.post(
            SliceAsk(
                id=rid,
                slice=self.key,
                ledger=ledger,
                model=model,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                n=n,
                wait=True,
                calls=SLICE_CALLS,
                room=_room(prompt_tokens),
                back=back,
            )
        )
        try:
            reply = waiting.result(timeout=DRIVER_TIMEOUT_S)
        except FutureTimeout:
            raise RuntimeFailure(
                f"the run's ledger on the driver did not answer within {DRIVER_TIMEOUT_S:g} s"
            ) from None
        if reply.refused is not None:
            if reply.kind == "invalid":
                raise InvalidRequestError(reply.refused)
            raise BudgetExceeded(reply.refused, limit=reply.limit)
        with self._lock:
            held = self._take(model, prompt_tokens, n * max_tokens)
        if not held:
            raise RuntimeFailure(f"the driver granted slice {self.key} less than the call it asked")
        self._channel.touch(self)
        return held

    def _take(self, model: str, prompt: int, completion: int) -> int:
        """Take a call's worst case from what is left (lock held): its
        handle, or 0 when it does not fit."""
        tokens = prompt + completion
        if self._tokens is not None and tokens > self._tokens:
            return 0
        if self._calls is not None and self._calls < 1:
            return 0
        pico = 0
        if self._pico is not None:
            try:
                pico = self._prices.rates(model).worst_case_pico(prompt, completion)
            except Exception:
                return 0  # the driver prices it (or says why it cannot)
            if pico > self._pico:
                return 0
            self._pico -= pico
        if self._tokens is not None:
            self._tokens -= tokens
        if self._calls is not None:
            self._calls -= 1
        handle = self._channel.next_id()
        self._held[handle] = _Held(model, prompt, completion, pico)
        self._fly(model, 1, prompt, completion)
        self._dirty = True
        return handle

    def _fly(self, model: str, calls: int, prompt: int, completion: int) -> None:
        flying = self._flying.get(model)
        if flying is None:
            flying = self._flying[model] = [0, 0, 0]
        flying[0] += calls
        flying[1] += prompt
        flying[2] += completion

    def _ask_ahead(
        self, ledger: str, model: str, prompt: int, max_tokens: int, n: int
    ) -> SliceAsk | None:
        """A slice more, asked for without waiting, when what is left would
        pay for fewer than half a slice's calls (lock held; one at a time)."""
        if self._ahead or self._far is None:
            return None  # one at a time, and not before the first grant
        room = _room(prompt)
        unit_tokens, unit_calls = room + n * max_tokens, 1
        half = SLICE_CALLS // 2
        low = (self._tokens is not None and self._tokens < half * unit_tokens) or (
            self._calls is not None and self._calls < half * unit_calls
        )
        if self._pico is not None and not low:
            try:
                unit_pico = self._prices.rates(model).worst_case_pico(room, n * max_tokens)
            except Exception:
                unit_pico = 0
            low = self._pico < half * unit_pico
        if not low:
            return None
        self._ahead = self._channel.next_id()
        return SliceAsk(
            id=self._ahead,
            slice=self.key,
            ledger=ledger,
            model=model,
            prompt_tokens=prompt,
            max_tokens=max_tokens,
            n=n,
            calls=SLICE_CALLS,
            room=room,
        )

    def _give_back(self) -> tuple[int, int, int]:
        """What is left, given back (lock held): a call that waits for the
        driver holds nothing unspent another worker's call could use."""
        back = (self._tokens or 0, self._pico or 0, self._calls or 0)
        if self._tokens is not None:
            self._tokens = 0
        if self._pico is not None:
            self._pico = 0
        if self._calls is not None:
            self._calls = 0
        return back

    def charge(self, handle: int, usage: Usage | None) -> None:
        """The call ``handle`` used ``usage`` (``None``: as reserved)."""
        with self._lock:
            held = self._held.pop(handle, None)
            if held is None:
                return
            self._fly(held.model, -1, -held.prompt, -held.completion)
            if usage is None:
                usage = Usage(prompt_tokens=held.prompt, completion_tokens=held.completion)
            usage = _gone(usage)
            if self._tokens is not None:
                self._tokens += held.prompt + held.completion - usage.total_tokens
            if self._pico is not None:
                self._pico += held.pico - self._prices.rates(held.model).cost_pico(usage)
            # The calls left stay as they are: the call took its call.
            counts = self._spent.get(held.model)
            if counts is None:
                counts = self._spent[held.model] = [0, 0, 0, 0]
            counts[0] += 1
            counts[1] += usage.prompt_tokens
            counts[2] += usage.completion_tokens
            counts[3] += usage.cached_prompt_tokens
            self._dirty = True
        self._channel.touch(self)

    def release(self, handle: int) -> None:
        """The call ``handle`` cost nothing: its worst case is left again."""
        with self._lock:
            held = self._held.pop(handle, None)
            if held is None:
                return
            self._fly(held.model, -1, -held.prompt, -held.completion)
            if self._tokens is not None:
                self._tokens += held.prompt + held.completion
            if self._pico is not None:
                self._pico += held.pico
            if self._calls is not None:
                self._calls += 1
            self._dirty = True
        self._channel.touch(self)

    def headroom(self) -> Headroom | None:
        """The run's headroom beyond the slices, as last heard, plus what is
        left of this one (``None``: nothing heard, or no cap)."""
        with self._lock:
            far = self._far
            if far is None or far == _NO_CAP:
                return None
            return msgspec.structs.replace(
                far,
                tokens=None if far.tokens is None else far.tokens + (self._tokens or 0),
                pico=None if far.pico is None else far.pico + (self._pico or 0),
                calls=None if far.calls is None else far.calls + (self._calls or 0),
            )

    # -- the transport's side --------------------------------------------------------

    def granted(self, reply: SliceGranted) -> None:
        """Add what the driver granted (or learn that it refused)."""
        with self._lock:
            if reply.headroom is not None:
                self._far = reply.headroom
            if reply.refused is None:
                self._tokens = _add(self._tokens, reply.tokens)
                self._pico = _add(self._pico, reply.pico)
                self._calls = _add(self._calls, reply.calls)
            if reply.id == self._ahead:
                self._ahead = 0

    def report(self, *, ended: bool = False) -> SliceReport | None:
        """What was spent since the last report and what is in flight
        (``None``: nothing changed); ``ended``: the last one."""
        with self._lock:
            if not self._dirty and not ended:
                return None
            spent = [
                Spent(
                    model=model,
                    calls=calls,
                    usage=Usage(
                        prompt_tokens=prompt, completion_tokens=out, cached_prompt_tokens=c
                    ),
                )
                for model, (calls, prompt, out, c) in self._spent.items()
            ]
            in_flight = [
                Spent(
                    model=model,
                    calls=calls,
                    usage=Usage(prompt_tokens=prompt, completion_tokens=out),
                )
                for model, (calls, prompt, out) in self._flying.items()
                if calls
            ]
            self._spent.clear()
            self._dirty = False
        return SliceReport(slice=self.key, spent=spent, in_flight=in_flight, ended=ended)


_NO_CAP: Final = Headroom()


def _add(left: int | None, more: int | None) -> int | None:
    return None if left is None or more is None else left + more


def _room(prompt_tokens: int) -> int:
    return max(math.ceil(prompt_tokens * SLICE_PROMPT_ROOM), prompt_tokens + 1)


@final
class DriverLedger:
    """A rollout ledger's upstream (``LedgerUpstream``): the run's ledger
    on the driver, through this worker's slice of it (``RunSlice``)."""

    def __init__(self, slice_: RunSlice, channel: SliceChannel, ledger: str) -> None:
        self._slice = slice_
        self._channel = channel
        self._ledger = ledger

    def reserve(self, model: str, prompt_tokens: int, max_tokens: int, n: int) -> int:
        return self._slice.reserve(self._ledger, model, prompt_tokens, max_tokens, n)

    def charge(self, handle: int, usage: Usage | None) -> None:
        self._slice.charge(handle, usage)

    def release(self, handle: int) -> None:
        self._slice.release(handle)

    def restore(self, model: str, usage: Usage) -> None:
        self._channel.post(RestoreOut(ledger=self._ledger, model=model, usage=usage))

    def headroom(self) -> Headroom | None:
        return self._slice.headroom()


__all__ = ["DRIVER_TIMEOUT_S", "SLICE_CALLS", "DriverLedger", "RunSlice", "SliceChannel"]
