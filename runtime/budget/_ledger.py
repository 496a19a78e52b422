"""The budget ledger: hard caps on what a run (and each task in it) may spend.
Owns ``BudgetLedger`` (a tree: a child's spend counts against every
ancestor), ``Reservation`` (the worst case of one in-flight model call) and
the read-only views ``BudgetSnapshot`` and ``Headroom``.

Does no I/O (changes go to an ``on_update`` callback).  Must not import
agents, tools or aggregators.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from types import TracebackType
from typing import Final, Literal, NoReturn, Protocol, final

import msgspec

from agentrt.protocols._events import BudgetUpdated
from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.protocols._run import Budget
from agentrt.protocols._usage import Cost, Usage
from agentrt.runtime.budget._pricing import (
    PICO_PER_USD,
    UNPRICED_RATES,
    PriceTable,
    TokenRates,
    pico_to_decimal,
    pico_to_usd,
    usd_to_pico,
)
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError, InvalidRequestError

Clock = Callable[[], float]
UpdateCallback = Callable[["BudgetSnapshot"], None]
ReservationState = Literal["active", "charged", "released"]

_SEP: Final = "/"
_CANCELLED: Final = asyncio.CancelledError
_MAX_PROMPT_SCALE: Final = 2.0


class Headroom(msgspec.Struct, frozen=True, kw_only=True):
    """What may still be reserved, over a ledger and all its ancestors
    (``None`` = uncapped).  ``fraction`` is the smallest share left of any
    cap on the chain, in [0, 1]: the router degrades on it."""

    tokens: int | None = None
    pico: int | None = None
    calls: int | None = None
    seconds: float | None = None
    fraction: float | None = None

    @property
    def usd(self) -> float | None:
        """Money left in USD, or ``None`` when uncapped."""
        return None if self.pico is None else pico_to_usd(self.pico)

    def shortfall(self, tokens: int, pico: int) -> str | None:
        """The first cap a call needing ``tokens`` and ``pico`` would cross
        (``"max_tokens"``, ``"max_usd"``, ...), or ``None`` if it fits."""
        if self.seconds is not None and self.seconds <= 0:
            return "max_wall_seconds"
        if self.calls is not None and self.calls < 1:
            return "max_model_calls"
        if self.tokens is not None and tokens > self.tokens:
            return "max_tokens"
        if self.pico is not None and pico > self.pico:
            return "max_usd"
        return None


UNCAPPED: Final = Headroom()
"""The headroom of a ledger with no cap on its chain and no upstream (this
object: the router tells an uncapped step by it)."""


class LedgerUpstream(Protocol):
    """Another ledger a root ledger also books every call on, and which may
    refuse it: the run's own ledger, when a rollout's ledger lives in
    another process (a Ray worker).  ``reserve`` returns a handle for
    ``charge``/``release`` (``charge(handle, None)``: charge as reserved, a
    call cancelled in flight) and raises ``BudgetExceeded`` when the call
    does not fit; ``headroom`` is the upstream's, as last known."""

    def reserve(self, model: str, prompt_tokens: int, max_tokens: int, n: int) -> int: ...
    def charge(self, handle: int, usage: Usage | None) -> None: ...
    def release(self, handle: int) -> None: ...
    def restore(self, model: str, usage: Usage) -> None: ...
    def headroom(self) -> Headroom | None: ...


class CallJournal(Protocol):
    """A durable record of a ledger tree's calls (the daemon's run store):
    ``reserved`` returns once the booking is durable, before the call is
    sent, with a handle for ``settled``; ``settled`` records how the call
    ended (``usage`` charged, or ``None``: it failed and cost nothing).  A
    call with no settlement on record was in flight when the process died,
    and is charged as reserved when the run resumes.  ``settled`` may keep
    the ``reply``; ``replay`` hands back (once) the reply an earlier
    incarnation of the run got for ``request_id`` and never committed as a
    step: the call was made and paid for, and is not made again."""

    async def reserved(self, reservation: Reservation, request_id: str | None) -> str: ...
    async def settled(
        self, handle: str, usage: Usage | None, reply: ModelReply | None = None
    ) -> None: ...
    def replay(self, request_id: str | None) -> ModelReply | None: ...
    def content_key(self, request: ModelRequest) -> str:
        """A key for a call that has no request id (a judge's, a
        summary's): the digest of what it asks and how often the same was
        asked before in this incarnation, so a resumed run meets the same
        key for the same call however its calls interleave."""
        ...


class BudgetSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A ledger's state at one instant.  ``spent`` is its own subtree's
    spend; ``left_*`` and ``fraction_left`` are effective, i.e. the tightest
    over the ledger and its ancestors (``None`` = uncapped)."""

    ledger: str
    spent: Cost
    spent_pico: int
    """Exact money spent, in pico-USD (``spent.usd`` is its float view)."""
    reserved_tokens: int
    reserved_pico: int
    """Exact worst-case money of the calls in flight, in pico-USD."""
    in_flight: int
    overruns: int
    cancelled_calls: int
    """Calls cancelled in flight (charged what they consumed when counted,
    else as reserved: ``BudgetLedger``)."""
    left_tokens: int | None
    left_usd: float | None
    left_calls: int | None
    left_seconds: float | None
    fraction_left: float | None

    def to_event(self, run_id: str, *, seq: int = 0, ts: float = 0.0) -> BudgetUpdated:
        """This snapshot as a ``BudgetUpdated`` event."""
        return BudgetUpdated(
            run_id=run_id,
            seq=seq,
            ts=ts,
            spent=self.spent,
            reserved_tokens=self.reserved_tokens,
            cancelled_calls=self.cancelled_calls,
            left_tokens=self.left_tokens,
            left_usd=self.left_usd,
        )


def _fmt(cap: str, amount: float) -> str:
    if cap == "max_usd":
        return f"${pico_to_usd(int(amount)):.6f}"
    if cap == "max_wall_seconds":
        return f"{amount:.3f} s"
    unit = "tokens" if cap == "max_tokens" else "calls"
    return f"{int(amount):,} {unit}"


@final
class Reservation:
    """The booked worst case of one model call.  Charge it with the reply's
    usage, or release it; as a (sync or async) context manager it is released
    on exit unless charged when an exception ends the block, and charged
    when a cancellation does (the call may have been served): what it
    consumed when its caller counted the streamed tokens (``streamed``),
    else as reserved."""

    __slots__ = (
        "_at",
        "_handle",
        "_ledger",
        "_rates",
        "estimate",
        "max_tokens",
        "model",
        "n",
        "pico",
        "prompt_bound",
        "prompt_tokens",
        "state",
        "streamed",
        "tokens",
    )

    def __init__(
        self,
        ledger: BudgetLedger,
        *,
        model: str,
        rates: TokenRates,
        tokens: int,
        pico: int,
        max_tokens: int,
        n: int,
        at: float,
        prompt_tokens: int = 0,
        estimate: int = 0,
    ) -> None:
        self._ledger = ledger
        self.prompt_tokens = prompt_tokens
        """The prompt tokens reserved (the calibrated estimate)."""
        self.estimate = estimate
        """The caller's own estimate, before calibration."""
        self._rates = rates
        self._at = at
        self.model = model
        self.tokens = tokens
        self.pico = pico
        self.max_tokens = max_tokens
        self.n = n
        self.state: ReservationState = "active"
        self.streamed: int | None = None
        """Completion tokens received so far, counted by a caller that
        streams the call (``None``: not counted).  A counted call cancelled
        in flight is charged its prompt and these, not its worst case."""
        self.prompt_bound: Callable[[], int] | None = None
        """The most tokens the call's prompt can be, computed when asked
        (the caller's, e.g. ``prompt_token_bound`` of its request): what a
        call cancelled in flight is charged for its prompt, when more than
        the estimate, until a reply of its model measured a prompt
        (``None``: the estimate)."""
        self._handle = 0

    @property
    def ledger_name(self) -> str:
        """The name of the ledger it is booked on."""
        return self._ledger.name

    @property
    def usd(self) -> float:
        """The reserved worst case in USD."""
        return pico_to_usd(self.pico)

    def charge(self, usage: Usage) -> Cost:
        """Replace the reservation with ``usage`` as the server reported it,
        and return what this call cost.  Usage above the reservation is
        charged in full and counted in ``overruns``; the ledger may then sit
        above its cap, and every later reservation fails."""
        return self._ledger._settle(self, usage, self._rates)

    def release(self) -> None:
        """Give the reservation back unused.  Idempotent; a no-op once charged."""
        self._ledger._release(self)

    def charge_reserved(self) -> Cost:
        """Charge the whole reservation (a call cancelled in flight, whose
        usage nobody will report); before a reply of the model measured a
        prompt, its prompt as the larger of the estimate and
        ``prompt_bound``.  A no-op returning ``Cost()`` unless active."""
        if self.state != "active":
            return Cost()
        return self._charge_unmeasured(self.n * self.max_tokens)

    def _charge_unmeasured(self, completion: int) -> Cost:
        """Charge a cancelled call ``completion`` tokens and the prompt as
        estimated, plus what the estimate may have missed: while no reply of
        its model has measured a prompt, the estimate may fall short of what
        the server counted (a text the estimator reads as fewer tokens than
        the tokenizer does), so up to ``prompt_bound`` (nothing once a reply
        measured one, or with no bound)."""
        more = 0
        if self.prompt_bound is not None and self.model not in self._ledger._prompt_ratio:
            more = max(self.prompt_bound() - self.prompt_tokens, 0)
        usage = Usage(prompt_tokens=self.prompt_tokens, completion_tokens=completion)
        return self._ledger._settle(
            self, usage, self._rates, calibrate=False, cancelled=True, more_prompt=more
        )

    def charge_consumed(self) -> Cost:
        """Charge a call cancelled in flight what it consumed: its prompt
        (the caller's estimate scaled by the reported/estimated ratio the
        tree last saw for the model; before any, the larger of the estimate
        and ``prompt_bound``) and the ``streamed`` completion tokens;
        the whole reservation when nobody counted (``charge_reserved``).
        A no-op returning ``Cost()`` unless active."""
        if self.state != "active":
            return Cost()
        if self.streamed is None:
            return self.charge_reserved()
        ratio = self._ledger._prompt_ratio.get(self.model)
        completion = min(self.streamed, self.n * self.max_tokens)
        if ratio is None:
            return self._charge_unmeasured(completion)
        # Rounded: the ratio of a prompt like this one gives it back exactly.
        usage = Usage(prompt_tokens=round(self.estimate * ratio), completion_tokens=completion)
        if usage.total_tokens > self.tokens or self._rates.cost_pico(usage) > self.pico:
            # Never more than was reserved (and admitted under the caps).
            usage = Usage(prompt_tokens=self.prompt_tokens, completion_tokens=completion)
        return self._ledger._settle(self, usage, self._rates, calibrate=False, cancelled=True)

    def end(self, exc: BaseException | None) -> Cost:
        """What leaving ``with reservation:`` does: a no-op once charged;
        else a cancellation (``exc``), or a failure after tokens were
        received (``streamed``: a deadline, a cut stream), charges what the
        call consumed (``charge_consumed``), and anything else releases it
        (a call that failed before a token came cost nothing).  Returns
        what it charged here (``Cost()`` when nothing)."""
        if self.state != "active":
            return Cost()  # charged (the usual end), or released already
        if isinstance(exc, _CANCELLED) or (exc is not None and self.streamed):
            return self.charge_consumed()
        self.release()
        return Cost()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end(exc)

    async def __aenter__(self) -> Reservation:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # No await: settling cannot be interrupted by a cancellation.
        self.end(exc)

    def __repr__(self) -> str:
        return (
            f"Reservation(model={self.model!r}, tokens={self.tokens}, usd={self.usd:.6f}, "
            f"state={self.state!r}, ledger={self._ledger.name!r})"
        )


_UNCAPPED_BUDGET: Final = Budget()
"""The budget of a ledger given none (frozen: one for all of them)."""


@final
class BudgetLedger:
    """Spend and hard caps of a run, a task, or a slice of either.

    ``BudgetLedger("run-1", Budget(max_usd=2.0), prices)`` makes a root
    (no budget = uncapped, no prices = every model free);
    ``ledger.child("task-3", Budget(max_usd=0.5))`` a child whose spend also
    counts against the parent.

    ``reserve`` books each call's worst case on the ledger and its ancestors
    before the call, so however many calls run in parallel, spent +
    reserved never crosses a cap; ``Reservation.charge`` then records the
    usage the server reported, exactly (integer tokens, integer pico-USD).
    The only way spent can exceed a cap is a server reporting more than was
    reserved: it is charged in full, counted in ``overruns``, and every
    later reservation fails.  A call cancelled in flight reports nothing
    (``cancelled_calls`` counts them): when its caller streamed it and
    counted the tokens received (``Reservation.streamed``), it is charged
    its prompt and those tokens (``charge_consumed``), else its whole
    reservation.  What remains uncertain in the first case: the prompt is
    an estimate (the caller's, scaled by the reported/estimated ratio last
    seen for the model on this tree: exact for a prompt like the ones
    before it; before a reply of the model measured one, the caller's
    ``Reservation.prompt_bound`` when larger, a byte count that may be
    several times the tokens served but never short of them), and
    the completion counts stream deltas as tokens (a server that sends
    several tokens per chunk is undercounted, unless the deltas carry
    logprobs, and so is text a backend holds back, such as SGLang's native
    stream while a tool call may be starting), missing the tokens generated
    between the last delta received and the server's abort when the
    connection closed (a reply the network still held: a fast server's
    whole reply, at worst).  The
    worst-case charge is an upper bound on what a call cost (for a model's
    first calls, when the caller gave a ``prompt_bound``).  Accounting
    never awaits and one lock covers the tree, so it is atomic under anyio
    and safe from worker threads.
    ``on_update`` gets a ``BudgetSnapshot`` on every change (e.g. to emit
    ``snapshot.to_event()``).  A root given an ``upstream`` books every
    call of its tree there too, after its own caps admitted it (the
    upstream's refusal is this ledger's); charges, releases and restores
    follow, and ``headroom`` is the tighter of the two.  A root given a
    ``journal`` has its tree's calls journaled by whoever makes them
    (``MeteredBackend``), so a run resumed after a crash can charge them.
    """

    __slots__ = (
        "_cached",
        "_calls",
        "_cancelled",
        "_cap_calls",
        "_cap_pico",
        "_cap_seconds",
        "_cap_tokens",
        "_capped",
        "_chain",
        "_children",
        "_clock",
        "_completion",
        "_expected",
        "_finished",
        "_lent_calls",
        "_lent_pico",
        "_lent_tokens",
        "_lock",
        "_numbers",
        "_on_update",
        "_overruns",
        "_parent",
        "_pico",
        "_prompt",
        "_prompt_ratio",
        "_prompt_scale",
        "_rates",
        "_res_calls",
        "_res_pico",
        "_res_tokens",
        "_started",
        "_streaming",
        "_uncapped",
        "_unpriced_free",
        "_upstream",
        "_watched",
        "budget",
        "journal",
        "name",
        "prices",
    )

    def __init__(
        self,
        name: str,
        budget: Budget | None = None,
        prices: PriceTable | None = None,
        *,
        clock: Clock = time.monotonic,
        on_update: UpdateCallback | None = None,
        upstream: LedgerUpstream | None = None,
        journal: CallJournal | None = None,
        _parent: BudgetLedger | None = None,
    ) -> None:
        if budget is None:
            budget = _UNCAPPED_BUDGET
        else:
            where = f"budget {name!r}"
            if budget.max_usd is not None and prices is None:
                raise ConfigError(
                    "a max_usd cap needs model prices; pass a PriceTable", where=where
                )
            for field in ("max_tokens", "max_usd", "max_model_calls", "max_wall_seconds"):
                value = getattr(budget, field)
                if value is not None and value < 0:
                    raise ConfigError(f"{field} must be >= 0, got {value}", where=where)
        self.name: str = name if _parent is None else f"{_parent.name}{_SEP}{name}"
        self.budget = budget
        self.prices = prices if prices is not None else PriceTable.free()
        self._clock = clock
        self._on_update = on_update
        self._parent = _parent
        self._lock: threading.Lock = _parent._lock if _parent is not None else threading.Lock()
        self._upstream: LedgerUpstream | None = (
            _parent._upstream if _parent is not None else upstream
        )
        self.journal: CallJournal | None = _parent.journal if _parent is not None else journal
        """Where the tree's calls are journaled before they are made (a
        root's ``journal``; a child shares its root's), or ``None``."""
        self._chain: tuple[BudgetLedger, ...] = (self, *(_parent._chain if _parent else ()))
        self._children: dict[str, BudgetLedger] = {}
        self._expected = 0
        # Per-model rates, resolved once per tree (the price table is frozen).
        self._rates: dict[str, TokenRates] = _parent._rates if _parent is not None else {}
        # Per model: the largest reported/estimated prompt ratio seen (tree-wide).
        self._prompt_scale: dict[str, float] = _parent._prompt_scale if _parent is not None else {}
        # Per model: the reported/estimated prompt ratio last seen (tree-wide),
        # for the prompt of a call cancelled before its usage came.
        self._prompt_ratio: dict[str, float] = _parent._prompt_ratio if _parent is not None else {}
        # The tree's last call number (``call_number``), shared by the tree.
        self._numbers: list[int] = _parent._numbers if _parent is not None else [0]
        # ``stream_calls``, shared by the tree.
        self._streaming: list[bool] = _parent._streaming if _parent is not None else [False]
        self._cap_tokens = budget.max_tokens
        self._cap_pico = None if budget.max_usd is None else usd_to_pico(budget.max_usd)
        self._cap_calls = budget.max_model_calls
        self._cap_seconds = budget.max_wall_seconds
        self._capped = budget is not _UNCAPPED_BUDGET and (
            self._cap_tokens is not None
            or self._cap_pico is not None
            or self._cap_calls is not None
            or self._cap_seconds is not None
        )
        # The chain's ledgers with an ``on_update`` (set once, at creation).
        # What the chain above holds is the parent's own (its chain's rest).
        self._watched: tuple[BudgetLedger, ...] = (
            ((self,) if on_update is not None else ()) + _parent._watched
            if _parent is not None
            else ((self,) if on_update is not None else ())
        )
        # No cap on the chain and no upstream (caps never change): the
        # headroom is ``UNCAPPED``, read per step without the lock.
        self._uncapped: bool = (
            self._upstream is None and not self._capped and (_parent is None or _parent._uncapped)
        )
        # An unpriced model is free here (no USD cap on the chain; caps never change).
        self._unpriced_free: bool = (
            self.prices.unpriced_free_uncapped
            and self._cap_pico is None
            and (_parent is None or _parent._unpriced_free)
        )
        self._started = clock()
        self._finished: float | None = None
        # Spent (own subtree), reserved (in flight in own subtree), overruns.
        self._prompt = self._completion = self._cached = self._pico = self._calls = 0
        self._res_tokens = self._res_pico = self._res_calls = 0
        # The part of the reserved that slices carved here hold unspent.
        self._lent_tokens = self._lent_pico = self._lent_calls = 0
        self._overruns = 0
        self._cancelled = 0

    # -- tree ---------------------------------------------------------------

    def child(
        self, name: str, budget: Budget | None = None, *, on_update: UpdateCallback | None = None
    ) -> BudgetLedger:
        """A child ledger (per task, sub-agent, ...) with its own caps; its
        spend counts against this ledger and every ancestor too."""
        if not name or _SEP in name:
            raise InvalidRequestError(
                f"child ledger names must be non-empty and free of {_SEP!r}, got {name!r} "
                f"(under {self.name!r})"
            )
        with self._lock:
            if name in self._children:
                raise InvalidRequestError(f"ledger {self.name!r} already has a child {name!r}")
            ledger = BudgetLedger(
                name, budget, self.prices, clock=self._clock, on_update=on_update, _parent=self
            )
            self._children[name] = ledger
        return ledger

    def expect_children(self, count: int) -> None:
        """Say that ``count`` children (the run's rollouts) are about to be
        made: until they are, the fair share of a call that does not fit
        (``reserve(min_tokens=...)``) counts them among those who share."""
        with self._lock:
            self._expected = count

    def call_number(self) -> int:
        """A number no other call under this ledger's tree was given (1, 2,
        ...): a sub-agent call's child ledger and rollout id carry it, so a
        ledger reused across runs never sees a child name twice."""
        with self._lock:
            self._numbers[0] += 1
            return self._numbers[0]

    def skip_call_numbers(self, past: int) -> None:
        """Make every later ``call_number`` of the tree exceed ``past``: a
        rollout resumed from its committed steps must not name a sub-agent
        call like one its earlier incarnation recorded."""
        with self._lock:
            self._numbers[0] = max(self._numbers[0], past)

    @property
    def stream_calls(self) -> bool:
        """Whether the tree's calls may be cancelled in flight by someone
        else (a run that stops rollouts early): then whoever makes a call
        streams it and counts the tokens received (``Reservation.streamed``),
        so a cancelled call is charged what it consumed.  Shared by the tree;
        ``False`` unless set."""
        return self._streaming[0]

    @stream_calls.setter
    def stream_calls(self, value: bool) -> None:
        self._streaming[0] = value

    @property
    def parent(self) -> BudgetLedger | None:
        return self._parent

    @property
    def children(self) -> tuple[BudgetLedger, ...]:
        return tuple(self._children.values())

    # -- reserving and charging --------------------------------------------

    def reserve(
        self,
        model: str,
        prompt_tokens: int,
        max_tokens: int,
        *,
        n: int = 1,
        min_tokens: int | None = None,
    ) -> Reservation:
        """Book the worst case of one call to ``model`` (``n`` samples of up
        to ``max_tokens`` each on a prompt of about ``prompt_tokens``):
        the prompt estimate plus ``n * max_tokens``, priced with no cache
        hit.  The estimate is scaled by the largest reported/estimated
        prompt ratio the tree has seen for ``model``, so one underestimate
        is not repeated.

        With ``min_tokens``, a call whose worst case does not fit a token
        or money cap is not refused but booked with fewer completion tokens
        (``Reservation.max_tokens``: ask the server for no more): the fair
        share of what is left, i.e. the headroom split among the capped
        ledger's open children with no call in flight (the rollouts about to
        ask, and those ``expect_children`` announced and not yet made), and
        at least ``min_tokens`` per sample while that fits at all.
        Only a call that cannot get ``min_tokens`` per sample is refused.

        Raises ``BudgetExceeded`` if it would cross a cap of this ledger or
        an ancestor, ``UnknownModelError`` if ``model`` has no price, and
        ``InvalidRequestError`` on negative sizes or a finished ledger."""
        if prompt_tokens < 0 or max_tokens < 0 or n < 1 or (min_tokens or 0) < 0:
            raise InvalidRequestError(
                f"cannot reserve prompt_tokens={prompt_tokens}, max_tokens={max_tokens}, "
                f"n={n}, min_tokens={min_tokens} on ledger {self.name!r}: sizes must be "
                ">= 0 and n >= 1"
            )
        # ``_rates_for`` and ``worst_case_pico``, inlined for the usual hit
        # (this runs once a model call).
        rates = self._rates.get(model)
        if rates is None or (rates is UNPRICED_RATES and not self._unpriced_free):
            rates = self._rates_for(model)
        estimate = prompt_tokens
        prompt_tokens = math.ceil(prompt_tokens * self._prompt_scale.get(model, 1.0))
        completion = n * max_tokens
        tokens = prompt_tokens + completion
        pico = prompt_tokens * rates.prompt + completion * rates.completion
        now = self._clock()
        with self._lock:
            if min_tokens is not None and not self._uncapped:
                fitted = self._fit(rates, prompt_tokens, max_tokens, n, min(min_tokens, max_tokens))
                if fitted < max_tokens:
                    max_tokens = fitted
                    completion = n * max_tokens
                    tokens = prompt_tokens + completion
                    pico = prompt_tokens * rates.prompt + completion * rates.completion
            for node in self._chain:
                if node._capped or node._finished is not None:  # else nothing to check
                    node._admit(tokens, pico, now)
            for node in self._chain:
                node._res_tokens += tokens
                node._res_pico += pico
                node._res_calls += 1
        reservation = Reservation(
            self,
            model=model,
            rates=rates,
            tokens=tokens,
            pico=pico,
            max_tokens=max_tokens,
            n=n,
            at=now,
            prompt_tokens=prompt_tokens,
            estimate=estimate,
        )
        if self._upstream is not None:
            # Outside the lock: the upstream may wait for its answer.
            try:
                reservation._handle = self._upstream.reserve(model, estimate, max_tokens, n)
            except BaseException:
                self._release(reservation, notify=False, upstream=False)
                raise
        if self._watched:
            try:
                self._notify()
            except BaseException:
                # The caller never receives the reservation: give it back.
                self._release(reservation, notify=False)
                raise
        return reservation

    def _fit(self, rates: TokenRates, prompt: int, max_tokens: int, n: int, floor: int) -> int:
        """The completion tokens per sample a call may book (lock held): its
        ``max_tokens`` where the worst case fits each sharer's part of a
        cap, else its fair share of the tightest token or money cap on the
        chain, at least ``floor`` (``_admit`` then refuses the call if even
        that does not fit).  The sharers of a cap are the capped ledger's
        open children with no call in flight, the ones announced and not
        yet made, and the caller's."""
        per = max_tokens
        below: BudgetLedger | None = None  # the chain's node under ``node``
        for node in self._chain:
            sharers = 0
            for cap, left, need_prompt, unit in (
                (
                    node._cap_tokens,
                    (node._cap_tokens or 0) - node._tokens_spent() - node._res_tokens,
                    prompt,
                    1,
                ),
                (
                    node._cap_pico,
                    (node._cap_pico or 0) - node._pico - node._res_pico,
                    prompt * rates.prompt,
                    rates.completion,
                ),
            ):
                if cap is None or unit <= 0:
                    continue
                need = need_prompt + n * per * unit
                children = node._children
                unseen = max(node._expected - len(children), 0)  # announced, not made yet
                if need * (1 + len(children) + unseen) <= left:
                    continue  # fits however many share it (no count needed)
                if not sharers:
                    sharers = 1 + unseen
                    sharers += sum(
                        1
                        for child in children.values()
                        if child is not below and child._finished is None and not child._res_calls
                    )
                if need * sharers <= left:
                    continue
                share = (left // sharers - need_prompt) // (n * unit)
                most = (left - need_prompt) // (n * unit)
                per = min(per, max(share, min(floor, most)), most)
            below = node
        if self._upstream is not None:
            far = self._upstream.headroom()
            if far is not None and far.tokens is not None and prompt + n * per > far.tokens:
                per = (far.tokens - prompt) // n
        return max(per, floor)

    def _admit(self, tokens: int, pico: int, now: float, calls: int = 1) -> None:
        """Raise unless ``calls`` calls needing ``tokens``/``pico`` fit (lock held)."""
        if self._finished is not None:
            raise InvalidRequestError(f"ledger {self.name!r} is finished; no call can be reserved")
        cap_s, cap_calls, cap_tokens, cap_pico = (
            self._cap_seconds,
            self._cap_calls,
            self._cap_tokens,
            self._cap_pico,
        )
        if cap_s is not None and now - self._started >= cap_s:
            self._refuse("max_wall_seconds", cap_s, now - self._started, 0.0)
        if cap_calls is not None and self._calls + self._res_calls + calls > cap_calls:
            self._refuse("max_model_calls", cap_calls, self._calls + self._res_calls, calls)
        if cap_tokens is not None:
            used = self._prompt + self._completion + self._res_tokens
            if used + tokens > cap_tokens:
                self._refuse("max_tokens", cap_tokens, used, tokens)
        if cap_pico is not None and self._pico + self._res_pico + pico > cap_pico:
            self._refuse("max_usd", cap_pico, self._pico + self._res_pico, pico)

    def _refuse(self, cap: str, limit: float, used: float, need: float) -> NoReturn:
        left = max(limit - used, 0)
        raise BudgetExceeded(
            f"budget {self.name!r}: the {cap} cap ({_fmt(cap, limit)}) would be "
            f"crossed: this call needs up to {_fmt(cap, need)}, "
            f"{_fmt(cap, left)} left ({self._res_calls} calls in flight)",
            limit=cap,
        )

    def _settle(
        self,
        reservation: Reservation,
        usage: Usage,
        rates: TokenRates,
        *,
        calibrate: bool = True,
        cancelled: bool = False,
        more_prompt: int = 0,
    ) -> Cost:
        if min(usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) < 0:
            raise InvalidRequestError(
                f"cannot charge negative usage {usage!r} for model {reservation.model!r} "
                f"on ledger {self.name!r}"
            )
        pico = rates.cost_pico(usage)
        tokens = usage.prompt_tokens + usage.completion_tokens
        overrun = tokens > reservation.tokens or pico > reservation.pico
        now = self._clock()
        with self._lock:
            if reservation.state != "active":
                raise InvalidRequestError(
                    f"reservation for model {reservation.model!r} on ledger {self.name!r} "
                    f"is already {reservation.state}; charge each reservation once"
                )
            reservation.state = "charged"
            if more_prompt > 0:
                # As many as the caps leave (a cancelled call's prompt may be
                # longer than its estimate; reported, it crosses no cap).
                usage, pico, tokens = self._with_more_prompt(
                    reservation, usage, rates, pico, more_prompt
                )
                overrun = tokens > reservation.tokens or pico > reservation.pico
            if calibrate and reservation.estimate > 0:
                # A little over what was seen (the next prompt is longer),
                # and at most _MAX_PROMPT_SCALE: a tokenizer or a template
                # explains a factor like 1.5, not a server's odd count.
                ratio = usage.prompt_tokens / reservation.estimate
                self._prompt_ratio[reservation.model] = ratio
                scale = min(ratio * 1.05, _MAX_PROMPT_SCALE)
                if ratio > 1 and scale > self._prompt_scale.get(reservation.model, 1.0):
                    self._prompt_scale[reservation.model] = scale
            for node in self._chain:
                node._res_tokens -= reservation.tokens
                node._res_pico -= reservation.pico
                node._res_calls -= 1
                node._prompt += usage.prompt_tokens
                node._completion += usage.completion_tokens
                node._cached += usage.cached_prompt_tokens
                node._pico += pico
                node._calls += 1
                node._overruns += overrun
                node._cancelled += cancelled
        if self._upstream is not None:
            # ``None``: charged as reserved (the upstream books the same).
            whole = cancelled and reservation.streamed is None
            self._upstream.charge(reservation._handle, None if whole else usage)
        if self._watched:
            self._notify()
        return Cost(
            usd=pico / PICO_PER_USD,  # pico_to_usd, inlined
            usage=usage,
            model_calls=1,
            wall_seconds=now - reservation._at,
        )

    def _with_more_prompt(
        self, reservation: Reservation, usage: Usage, rates: TokenRates, pico: int, more: int
    ) -> tuple[Usage, int, int]:
        """``usage`` with up to ``more`` prompt tokens added, as many as
        every cap on the chain leaves once ``reservation`` gives its room
        back (lock held); with its money and tokens."""
        tokens = usage.prompt_tokens + usage.completion_tokens
        for node in self._chain:
            if node._cap_tokens is not None:
                room = node._cap_tokens - node._tokens_spent() - node._res_tokens
                more = min(more, max(room + reservation.tokens - tokens, 0))
            if node._cap_pico is not None and rates.prompt > 0:
                room = node._cap_pico - node._pico - node._res_pico + reservation.pico - pico
                more = min(more, max(room // rates.prompt, 0))
        if more <= 0:
            return usage, pico, tokens
        usage = msgspec.structs.replace(usage, prompt_tokens=usage.prompt_tokens + more)
        return usage, rates.cost_pico(usage), tokens + more

    def _rates_for(self, model: str) -> TokenRates:
        rates = self._rates.get(model)
        # An unpriced model's free rates are cached tree-wide, but only
        # ledgers whose chain has no USD cap take them: a capped one looks
        # again (and refuses it).
        if rates is None or (rates is UNPRICED_RATES and not self._unpriced_free):
            if self._unpriced_free and self.prices.price(model) is None:
                rates = self._rates[model] = UNPRICED_RATES
                return rates
            rates = self._rates[model] = self.prices.rates(model)
        return rates

    def cost_of(self, model: str, usage: Usage) -> Cost:
        """What one call to ``model`` with ``usage`` costs as this ledger
        prices it (an unpriced model on an uncapped tree is free), charged
        nowhere: a call the ledger holds already, counted by its caller."""
        pico = self._rates_for(model).cost_pico(usage)
        return Cost(usd=pico_to_usd(pico), usage=usage, model_calls=1)

    def price_pico(self, model: str, usage: Usage) -> int:
        """What one call to ``model`` with ``usage`` costs in pico-USD, as
        ``cost_of`` prices it (exact)."""
        return self._rates_for(model).cost_pico(usage)

    def restore(self, model: str, usage: Usage) -> Cost:
        """Count a call a previous incarnation of this run already made and
        paid for (a run resumed after a crash): it is charged to this ledger
        and its ancestors as spent, without a reservation and without
        checking caps (the money is gone either way).  Returns its cost."""
        if min(usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) < 0:
            raise InvalidRequestError(
                f"cannot restore negative usage {usage!r} for model {model!r} "
                f"on ledger {self.name!r}"
            )
        pico = self._rates_for(model).cost_pico(usage)
        with self._lock:
            for node in self._chain:
                node._prompt += usage.prompt_tokens
                node._completion += usage.completion_tokens
                node._cached += usage.cached_prompt_tokens
                node._pico += pico
                node._calls += 1
        if self._upstream is not None:
            self._upstream.restore(model, usage)
        self._notify()
        return Cost(usd=pico_to_usd(pico), usage=usage, model_calls=1)

    def carve(self, tokens: int | None, pico: int | None, calls: int | None) -> BudgetSlice:
        """Reserve a slice of this ledger's budget as one, for calls booked
        elsewhere (a rollout worker's): ``tokens``, ``pico`` (USD in
        pico-USD) and ``calls`` (``None``: not bounded, nothing reserved
        for it).  Raises ``BudgetExceeded`` as ``reserve`` does when it
        does not fit."""
        slice_ = BudgetSlice(self)
        slice_.grow(tokens, pico, calls)
        return slice_

    def _release(
        self, reservation: Reservation, *, notify: bool = True, upstream: bool = True
    ) -> None:
        with self._lock:
            if reservation.state != "active":
                return
            reservation.state = "released"
            for node in self._chain:
                node._res_tokens -= reservation.tokens
                node._res_pico -= reservation.pico
                node._res_calls -= 1
        if upstream and self._upstream is not None:
            self._upstream.release(reservation._handle)
        if notify and self._watched:
            self._notify()

    def finish(self) -> None:
        """Stop the wall clock; later reservations fail.  Idempotent."""
        with self._lock:
            if self._finished is None:
                self._finished = self._clock()
        self._notify()

    # -- reading ------------------------------------------------------------

    def _tokens_spent(self) -> int:
        return self._prompt + self._completion

    def _elapsed(self, now: float) -> float:
        end = self._finished if self._finished is not None else now
        return end - self._started

    def _own_left(
        self, now: float, lent: bool = False
    ) -> tuple[int | None, int | None, int | None, float | None]:
        def left(cap: int | None, used: int) -> int | None:
            return None if cap is None else max(cap - used, 0)

        seconds = (
            None if self._cap_seconds is None else max(self._cap_seconds - self._elapsed(now), 0.0)
        )
        res_tokens, res_pico, res_calls = self._res_tokens, self._res_pico, self._res_calls
        if lent:
            res_tokens -= self._lent_tokens
            res_pico -= self._lent_pico
            res_calls -= self._lent_calls
        return (
            left(self._cap_tokens, self._tokens_spent() + res_tokens),
            left(self._cap_pico, self._pico + res_pico),
            left(self._cap_calls, self._calls + res_calls),
            seconds,
        )

    def _own_fraction(
        self, left: tuple[int | None, int | None, int | None, float | None]
    ) -> float | None:
        caps = (self._cap_tokens, self._cap_pico, self._cap_calls, self._cap_seconds)
        fractions = [
            (lim / cap if cap > 0 else 0.0)
            for cap, lim in zip(caps, left, strict=True)
            if cap is not None and lim is not None
        ]
        return min(fractions) if fractions else None

    def _headroom_locked(self, now: float, lent: bool = False) -> Headroom:
        if self._uncapped:
            return UNCAPPED
        best: list[float | None] = [None, None, None, None, None]
        for node in self._chain:
            left = node._own_left(now, lent)
            for i, value in enumerate((*left, node._own_fraction(left))):
                current = best[i]
                if value is not None and (current is None or value < current):
                    best[i] = value
        far = self._upstream.headroom() if self._upstream is not None else None
        if far is not None:
            for i, value in enumerate((far.tokens, far.pico, far.calls, far.seconds, far.fraction)):
                current = best[i]
                if value is not None and (current is None or value < current):
                    best[i] = value
        tokens, pico, calls, seconds, fraction = best
        return Headroom(
            tokens=None if tokens is None else int(tokens),
            pico=None if pico is None else int(pico),
            calls=None if calls is None else int(calls),
            seconds=seconds,
            fraction=fraction,
        )

    def headroom(self, *, lent: bool = False) -> Headroom:
        """What may still be reserved here, over this ledger and its
        ancestors.  ``lent``: what slices carved from them (``carve``) hold
        unspent counted as left too, since their holders' calls may still
        spend it (a run whose rollouts book on slices has spent its budget
        only when this has nothing left)."""
        if self._uncapped:
            return UNCAPPED
        now = self._clock()
        with self._lock:
            return self._headroom_locked(now, lent)

    @property
    def spent_usd(self) -> Decimal:
        """Exact money spent by this subtree, in USD."""
        with self._lock:
            return pico_to_decimal(self._pico)

    @property
    def spent(self) -> Cost:
        """What this ledger's subtree has been charged so far."""
        return self.snapshot().spent

    def snapshot(self) -> BudgetSnapshot:
        """This ledger's state, consistent at one instant."""
        now = self._clock()
        with self._lock:
            room = self._headroom_locked(now)
            return BudgetSnapshot(
                ledger=self.name,
                spent=Cost(
                    usd=pico_to_usd(self._pico),
                    usage=Usage(
                        prompt_tokens=self._prompt,
                        completion_tokens=self._completion,
                        cached_prompt_tokens=self._cached,
                    ),
                    model_calls=self._calls,
                    wall_seconds=self._elapsed(now),
                ),
                spent_pico=self._pico,
                reserved_tokens=self._res_tokens,
                reserved_pico=self._res_pico,
                in_flight=self._res_calls,
                overruns=self._overruns,
                cancelled_calls=self._cancelled,
                left_tokens=room.tokens,
                left_usd=room.usd,
                left_calls=room.calls,
                left_seconds=room.seconds,
                fraction_left=room.fraction,
            )

    def _notify(self) -> None:
        # Outside the lock: a callback may read the ledger.  A callback that
        # raises propagates to the caller after the accounting is complete.
        for node in self._watched:
            assert node._on_update is not None
            node._on_update(node.snapshot())

    def __repr__(self) -> str:
        return f"BudgetLedger({self.name!r}, {self.budget!r})"


@final
class BudgetSlice:
    """A part of a ledger's budget reserved as one (``BudgetLedger.carve``)
    and spent by calls booked elsewhere: ``tokens``, ``pico`` and ``calls``
    are what is left of it (``None``: that measure is not bounded).  Its
    calls are charged with ``spend`` to a ledger at or below the one it was
    carved from; ``grow`` reserves more, ``give_back`` and ``release``
    return what was not spent.  The spent and the reserved of the chain
    stay exact: the sum of the slices and the ledger's own reservations
    never crosses a cap."""

    __slots__ = ("_ledger", "calls", "pico", "tokens")

    def __init__(self, ledger: BudgetLedger) -> None:
        self._ledger = ledger
        self.tokens: int | None = None
        self.pico: int | None = None
        self.calls: int | None = None

    @property
    def ledger(self) -> BudgetLedger:
        """The ledger it was carved from."""
        return self._ledger

    def grow(self, tokens: int | None, pico: int | None, calls: int | None) -> None:
        """Reserve ``tokens``, ``pico`` and ``calls`` more (``None``: that
        measure unbounded from now on).  Raises ``BudgetExceeded`` when
        they do not fit, and then reserves nothing."""
        if min(tokens or 0, pico or 0, calls or 0) < 0:
            raise InvalidRequestError(
                f"cannot carve tokens={tokens}, pico={pico}, calls={calls} "
                f"from ledger {self._ledger.name!r}: sizes must be >= 0"
            )
        ledger = self._ledger
        more_tokens, more_pico, more_calls = tokens or 0, pico or 0, calls or 0
        now = ledger._clock()
        with ledger._lock:
            for node in ledger._chain:
                if node._capped or node._finished is not None:
                    node._admit(more_tokens, more_pico, now, calls=more_calls)
            for node in ledger._chain:
                node._res_tokens += more_tokens
                node._res_pico += more_pico
                node._res_calls += more_calls
                node._lent_tokens += more_tokens
                node._lent_pico += more_pico
                node._lent_calls += more_calls
            self.tokens = None if tokens is None else (self.tokens or 0) + tokens
            self.pico = None if pico is None else (self.pico or 0) + pico
            self.calls = None if calls is None else (self.calls or 0) + calls
        ledger._notify()

    def spend(
        self,
        onto: BudgetLedger,
        model: str,
        usage: Usage,
        *,
        calls: int = 1,
        cancelled: bool = False,
    ) -> Cost:
        """Charge ``calls`` calls to ``model`` that together used ``usage``
        to ``onto`` (this slice's ledger or one below it), out of the slice
        (beyond what is left of it: charged in full, counted in
        ``overruns``); ``cancelled``: calls cancelled in flight.  Each
        call's cached prompt tokens must not exceed its prompt's (the
        price of the sum is then the sum of the prices)."""
        ledger = self._ledger
        if ledger not in onto._chain:
            raise InvalidRequestError(
                f"ledger {onto.name!r} is not below {ledger.name!r}: its slice cannot pay for it"
            )
        if min(usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) < 0:
            raise InvalidRequestError(f"cannot charge negative usage {usage!r} on {onto.name!r}")
        pico = onto._rates_for(model).cost_pico(usage)
        tokens = usage.prompt_tokens + usage.completion_tokens
        with ledger._lock:
            take_tokens = 0 if self.tokens is None else min(self.tokens, tokens)
            take_pico = 0 if self.pico is None else min(self.pico, pico)
            take_calls = 0 if self.calls is None else min(self.calls, calls)
            overrun = (self.tokens is not None and tokens > take_tokens) or (
                self.pico is not None and pico > take_pico
            )
            if self.tokens is not None:
                self.tokens -= take_tokens
            if self.pico is not None:
                self.pico -= take_pico
            if self.calls is not None:
                self.calls -= take_calls
            for node in ledger._chain:
                node._res_tokens -= take_tokens
                node._res_pico -= take_pico
                node._res_calls -= take_calls
                node._lent_tokens -= take_tokens
                node._lent_pico -= take_pico
                node._lent_calls -= take_calls
            for node in onto._chain:
                node._prompt += usage.prompt_tokens
                node._completion += usage.completion_tokens
                node._cached += usage.cached_prompt_tokens
                node._pico += pico
                node._calls += calls
                node._overruns += overrun
                node._cancelled += calls if cancelled else 0
        if onto._watched:
            onto._notify()
        return Cost(usd=pico_to_usd(pico), usage=usage, model_calls=calls)

    def give_back(self, tokens: int, pico: int, calls: int) -> None:
        """Return up to ``tokens``, ``pico`` and ``calls`` of what is left
        (in the bounded measures) to the ledger."""
        ledger = self._ledger
        with ledger._lock:
            back_tokens = 0 if self.tokens is None else min(self.tokens, max(tokens, 0))
            back_pico = 0 if self.pico is None else min(self.pico, max(pico, 0))
            back_calls = 0 if self.calls is None else min(self.calls, max(calls, 0))
            if self.tokens is not None:
                self.tokens -= back_tokens
            if self.pico is not None:
                self.pico -= back_pico
            if self.calls is not None:
                self.calls -= back_calls
            for node in ledger._chain:
                node._res_tokens -= back_tokens
                node._res_pico -= back_pico
                node._res_calls -= back_calls
                node._lent_tokens -= back_tokens
                node._lent_pico -= back_pico
                node._lent_calls -= back_calls
        if ledger._watched:
            ledger._notify()

    def release(self) -> None:
        """Return what is left of the slice.  Idempotent."""
        self.give_back(self.tokens or 0, self.pico or 0, self.calls or 0)

    @property
    def empty(self) -> bool:
        """It cannot pay for another call: a bounded measure has nothing
        left."""
        return any(v is not None and v <= 0 for v in (self.tokens, self.pico, self.calls))

    def __repr__(self) -> str:
        return (
            f"BudgetSlice(tokens={self.tokens}, pico={self.pico}, calls={self.calls}, "
            f"ledger={self._ledger.name!r})"
        )


__all__ = [
    "BudgetLedger",
    "BudgetSlice",
    "BudgetSnapshot",
    "CallJournal",
    "Headroom",
    "LedgerUpstream",
    "Reservation",
]
