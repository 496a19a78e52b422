"""``MeteredBackend``: a model backend whose every call is on a budget ledger.

Owns the wrapper that books the worst case of each ``complete``/``stream``
call on a ``BudgetLedger`` before it reaches the wrapped backend, charges
the usage the reply reports, and releases the booking when the call fails
or is cancelled.  Whoever holds only a ``MeteredBackend`` cannot spend past
the ledger's caps.  It neither opens nor closes the backend it wraps (that
one is shared, and owned elsewhere).

Runtime floor: imports protocols and the floor; never agents, tools or
aggregators.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final, Self, final

import anyio
import msgspec

from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.protocols._usage import Cost, Usage
from agentrt.runtime.budget._ledger import BudgetLedger, CallJournal, Reservation
from agentrt.runtime.kernel._errors import (
    BudgetExceeded,
    InvalidRequestError,
    UnknownModelError,
)
from agentrt.runtime.models._backend import ModelBackend, StreamDelta
from agentrt.runtime.models._prompt_estimate import (
    CharEstimator,
    TokenEstimator,
    estimate_request_tokens,
    prompt_token_bound,
)

AfterCall = Callable[[ModelRequest, ModelReply], Awaitable[None]]
"""What ``MeteredBackend`` awaits after each call is charged."""

# The caps a settled call gives room back on (its unused reservation).
_ROOM_CAPS: Final = frozenset({"max_tokens", "max_usd"})


@final
class MeteredBackend:
    """``backend`` seen through ``ledger``: a ``ModelBackend`` that reserves,
    before every call, the call's worst case on ``ledger`` and charges the
    reply's usage after it.

    The worst case is the prompt estimate of the request's messages and tool
    definitions (``estimator``, by default the agent loop's
    ``CharEstimator(3.0)``: generous) plus ``n * sampling.max_tokens``
    completion tokens (``SamplingParams.max_tokens`` is always set, 512 by
    default, and the server is asked for no more).  The call is priced as
    ``request.model``, or ``model`` when the request names none, or else the
    backend's first model (``backend.models[0]``).

    Raises, before the wrapped backend sees the request: ``BudgetExceeded``
    when the call would cross a cap of ``ledger`` or an ancestor;
    ``UnknownModelError`` when the model has no price (or the backend names
    no model); ``InvalidRequestError`` for a finished ledger.  A call that
    fails releases its reservation and costs nothing; one cancelled in
    flight is charged as reserved (``complete``: its usage is unknown) or
    what it consumed (``stream``: the tokens received are counted); a
    reply whose usage exceeds the reservation is charged in full (see
    ``runtime.budget``).

    ``after_call``, when given, is awaited with the request and the reply
    after each call is charged (the run's live budget events and the spans
    of calls made outside a rollout's steps).

    ``min_tokens`` makes the calls spend the budget instead of being
    refused at their worst case (an aggregation's judges): a call whose
    worst case does not fit a token or money cap waits while other calls
    through this wrapper are in flight (each gives back its unused
    reservation when it settles), and when none is, runs with
    ``max_tokens`` lowered to the ledger's fair share of what is left
    (``BudgetLedger.reserve(min_tokens=...)``; the wrapped backend is asked
    for no more).  Only a call that cannot get ``min_tokens`` then is
    refused (``BudgetExceeded``).  ``None`` (the default): refused at once.

    ``async with`` on it is allowed and does nothing: the wrapped backend
    is neither opened nor closed here.
    """

    __slots__ = (
        "_after",
        "_backend",
        "_estimate",
        "_in_flight",
        "_ledger",
        "_min_tokens",
        "_model",
        "_room",
        "_spent",
    )

    def __init__(
        self,
        backend: ModelBackend,
        ledger: BudgetLedger,
        *,
        model: str | None = None,
        estimator: TokenEstimator | None = None,
        after_call: AfterCall | None = None,
        min_tokens: int | None = None,
    ) -> None:
        if min_tokens is not None and min_tokens < 1:
            raise InvalidRequestError(
                f"min_tokens must be >= 1 or None, got {min_tokens} "
                f"(MeteredBackend({backend.name!r}))"
            )
        self._min_tokens = min_tokens
        self._in_flight = 0
        # Set (and replaced) whenever a call through this wrapper ends.
        self._room: anyio.Event | None = None
        self._backend = backend
        self._after = after_call
        self._ledger = ledger
        self._model = model
        self._estimate: TokenEstimator = estimator or CharEstimator()
        self._spent = Cost()

    # -- what it is ----------------------------------------------------------

    @property
    def name(self) -> str:
        """The wrapped backend's name (it is the same backend, on a ledger)."""
        return self._backend.name

    @property
    def models(self) -> list[str]:
        return self._backend.models

    @property
    def max_concurrency(self) -> int | None:
        """The wrapped backend's ``max_concurrency``, if it has one."""
        limit: int | None = getattr(self._backend, "max_concurrency", None)
        return limit

    @property
    def ledger(self) -> BudgetLedger:
        """The ledger every call is reserved on and charged to."""
        return self._ledger

    @property
    def spent(self) -> Cost:
        """What the calls made through this wrapper were charged (exact; the
        same charges are in ``ledger.spent``, so never add the two)."""
        return self._spent

    @property
    def default_model(self) -> str:
        """What a request naming no model is priced as: ``model``, else the
        backend's first model.  Raises ``UnknownModelError`` when neither
        exists."""
        if self._model is not None:
            return self._model
        models = self._backend.models
        if not models:
            raise UnknownModelError(
                f"backend {self._backend.name!r} names no model, and no default was given: "
                "cannot price a call naming none (pass MeteredBackend(..., model=...))"
            )
        return models[0]

    def model_for(self, request: ModelRequest) -> str:
        """The model name ``request`` is priced as (see the class docstring)."""
        return request.model if request.model is not None else self.default_model

    # -- calls ---------------------------------------------------------------

    async def _book(self, request: ModelRequest) -> tuple[Reservation, ModelRequest]:
        """The call's reservation, and the request to send (its
        ``max_tokens`` lowered to the reservation's); counts the call in
        flight until ``_ended``."""
        prompt = estimate_request_tokens(request.messages, request.tools, self._estimate)
        model = self.model_for(request)
        wanted = request.sampling.max_tokens
        floor = self._min_tokens
        while True:
            try:
                # While others are in flight, only the worst case (they may
                # give room back); with none, the fair share of what is left.
                reservation = self._ledger.reserve(
                    model,
                    prompt,
                    wanted,
                    n=request.n,
                    min_tokens=None if self._in_flight else floor,
                )
                break
            except BudgetExceeded as exc:
                if floor is None or not self._in_flight or exc.limit not in _ROOM_CAPS:
                    raise
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        self._in_flight += 1
        # Computed only if the call is cancelled before its model's first reply.
        reservation.prompt_bound = functools.partial(
            prompt_token_bound, request.messages, request.tools
        )
        if reservation.max_tokens < wanted:
            sampling = msgspec.structs.replace(request.sampling, max_tokens=reservation.max_tokens)
            request = msgspec.structs.replace(request, sampling=sampling)
        return reservation, request

    def _ended(self) -> None:
        """A call through this wrapper ended (its reservation is settled):
        wake the calls waiting for room."""
        self._in_flight -= 1
        room, self._room = self._room, None
        if room is not None:
            room.set()

    def _charge(self, reservation: Reservation, reply: ModelReply) -> None:
        self._spent += reservation.charge(reply.usage)

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Reserve, call the wrapped backend, charge the reply's usage.  On a
        journaled ledger the booking is durable before the call is sent and
        its outcome is recorded after (``BudgetLedger.journal``)."""
        journal = self._ledger.journal
        if journal is not None:
            return await self._complete_journaled(request, journal)
        reservation, request = await self._book(request)
        try:
            async with reservation:
                reply = await self._backend.complete(request)
                self._charge(reservation, reply)
        finally:
            self._ended()
        if self._after is not None:
            await self._after(request, reply)
        return reply

    async def _complete_journaled(self, request: ModelRequest, journal: CallJournal) -> ModelReply:
        # A call an earlier incarnation of the run made (and was charged for
        # when the run resumed) is answered from the journal; a new one is
        # on record before it is sent.  A cancellation anywhere in the block
        # charges the reservation (the call may have been served) and leaves
        # it unsettled on record: a resumed run charges it the same way.
        key = request.request_id or journal.content_key(request)
        replayed = journal.replay(key)
        if replayed is not None:
            return replayed
        reservation, request = await self._book(request)
        try:
            async with reservation:
                handle = await journal.reserved(reservation, key)
                try:
                    reply = await self._backend.complete(request)
                except Exception:
                    reservation.release()
                    await journal.settled(handle, None)
                    raise
                self._charge(reservation, reply)
        finally:
            self._ended()
        await journal.settled(handle, reply.usage, reply)
        if self._after is not None:
            await self._after(request, reply)
        return reply

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        """Reserve when iteration starts; charge when the final delta (the one
        carrying the reply) arrives, before it is yielded.  Abandoning the
        stream early (closing the iterator, e.g. with ``contextlib.aclosing``,
        or a cancellation) charges what the call consumed: its prompt and
        the tokens received (``Reservation.charge_consumed``); so does a
        failure after tokens came, and one before releases it."""
        reservation, request = await self._book(request)
        reservation.streamed = counted = 0
        journal = self._ledger.journal
        handle = ""
        if journal is not None:
            try:
                handle = await journal.reserved(reservation, request.request_id)
            except BaseException:
                reservation.release()
                self._ended()
                raise
        deltas = self._backend.stream(request)
        usage: Usage | None = None
        try:
            async for delta in deltas:
                if delta.reply is None:
                    counted += len(delta.logprobs) or 1  # one delta a token
                    reservation.streamed = counted
                elif reservation.state == "active":
                    usage = await self._settle_stream(request, reservation, delta.reply, handle)
                yield delta
        except Exception as exc:
            if usage is None:
                reservation.end(exc)  # charged what it consumed once tokens came
                if journal is not None:
                    await journal.settled(handle, None)
            raise
        except BaseException:
            # Abandoned (``GeneratorExit``) or cancelled: it was served this far.
            self._spent += reservation.charge_consumed()
            raise
        finally:
            reservation.release()  # a no-op once charged
            self._ended()
            aclose = getattr(deltas, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _settle_stream(
        self, request: ModelRequest, reservation: Reservation, reply: ModelReply, handle: str
    ) -> Usage:
        """A stream's final reply: charged, journaled, reported."""
        self._charge(reservation, reply)
        journal = self._ledger.journal
        if journal is not None:
            await journal.settled(handle, reply.usage)
        if self._after is not None:
            await self._after(request, reply)
        return reply.usage

    # -- lifetime: the wrapped backend's owner opens and closes it -----------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"MeteredBackend({self._backend.name!r}, ledger={self._ledger.name!r})"


__all__ = ["AfterCall", "MeteredBackend"]
