"""What a placement's driver and its rollout workers (Ray actors, or the
local placement's worker processes) exchange: the ``WorkerSpec`` a worker
is started with, the ``PlacedRollout`` it is asked to run and the
``RolloutOutcome`` it answers, the ``Outbound`` items it sends back
(events in order, ledger operations), the driver's ``Reply`` items, and
the frames a worker process's socket carries (``ToWorker``, ``ToDriver``).
Tagged msgspec structs, encoded as MessagePack; no I/O.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, final

import msgspec

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._control import RolloutResult
from agentrt.agents._spec_loader import SpecSet
from agentrt.protocols._events import Event, StepRecorded
from agentrt.protocols._ids import top_level_id
from agentrt.protocols._messages import AssistantMessage, ChatMessage
from agentrt.protocols._model import ModelReply
from agentrt.protocols._trajectory import Step
from agentrt.protocols._usage import Usage
from agentrt.runtime.budget._ledger import Headroom
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.config._runtime_config import RuntimeConfig
from agentrt.runtime.engine._rollout_actor import RunRollout
from agentrt.runtime.memory._bank import MemoryHit, MemoryItem, NewItem, Scope
from agentrt.tools._tool import Tool


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a rollout worker builds its own ``Runtime`` from (shipped once,
    pickled): the configuration (its placement ``local``), the tools
    and agents given as objects, and the prices."""

    config: RuntimeConfig
    tools: list[Tool] = field(default_factory=list)
    agents: dict[str, SpecSet | AgentConfig] = field(default_factory=dict)
    prices: PriceTable | None = None


class WorkerReady(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    """A worker's answer to ``ready``: where it runs, or why it cannot."""

    node_id: str
    pid: int
    version: str
    error: str | None = None


class PlacedRollout(msgspec.Struct, frozen=True, kw_only=True, tag="placed"):
    """Run ``rollout`` on a worker: its actor's ``name``, the driver
    ledger it is charged to (``ledger``), the run's agent by name or as
    a configuration (JSON), the run's restart intensity, and whether it
    has a memory bank (on the driver, reached with ``BankOut``)."""

    rollout: RunRollout
    name: str
    ledger: str
    agent: str | None = None
    agent_config: str | None = None
    restarts: int = 3
    memory: bool = False
    journaled: bool = False
    """The run is journaled: the worker journals the rollout's calls
    through its events (each acknowledged once the driver committed it)."""
    replays: dict[str, ModelReply] = {}
    """Replies an earlier incarnation of the run got for this rollout's
    calls and never committed as steps, by request id."""
    events: list[str] | None = None
    """The kinds of event (their tags) the run's stream takes (``None``:
    all): the worker builds and sends no other (nobody would read them)."""


class RolloutDone(msgspec.Struct, frozen=True, kw_only=True, tag="done"):
    """A rollout's result, its trajectory without its first ``committed``
    steps: the driver has them (the rollout's ``StepRecorded`` events it
    committed), and each would be sent, and decoded, a second time."""

    result: RolloutResult
    committed: int = 0


class RolloutRaised(msgspec.Struct, frozen=True, kw_only=True, tag="raised"):
    """The rollout ended in an exception: ``budget`` (``BudgetExceeded``,
    with its ``limit``), ``gave_up`` (crashed past its restarts) or ``error``."""

    kind: Literal["budget", "gave_up", "error"]
    message: str
    limit: str = ""


RolloutOutcome = RolloutDone | RolloutRaised


# -- worker -> driver, in order ----------------------------------------------------


class EventOut(msgspec.Struct, frozen=True, kw_only=True, tag="event"):
    """An event of a placed rollout; ``ack`` > 0: the worker waits until the
    driver's sink took it (a step is committed before the next one)."""

    event: Event
    ack: int = 0


class StepOut(msgspec.Struct, frozen=True, kw_only=True, tag="step"):
    """A ``StepRecorded`` event (``ack`` as ``EventOut``'s), its step's
    prompt sent as what changed (``StepPrompts``): the first ``kept``
    messages of the prompt of the rollout's step before it on this
    channel, then (``replied``) that step's reply message, then ``added``
    (``event.step.messages`` is empty).  A step's prompt repeats the one
    before it, and that one's reply: sent whole, each step would be
    encoded and decoded again, a cost that grows with the steps."""

    event: StepRecorded
    kept: int
    added: list[ChatMessage]
    ack: int = 0
    replied: bool = False


class FlushOut(msgspec.Struct, frozen=True, kw_only=True, tag="flush"):
    """Acked once every item before it was handled (a rollout's events
    are in before its result); ``rollout``: it ended (``StepPrompts``
    forgets its prompts, and its sub-agents')."""

    ack: int
    rollout: str = ""


class SliceAsk(msgspec.Struct, frozen=True, kw_only=True, tag="slice_ask"):
    """Ask for budget for this worker's slice ``slice`` of the run whose
    rollout ``ledger`` asks (the driver carves it from the run's ledger):
    ``wait``: a call of ``model`` (``prompt_tokens``, ``n`` samples of up
    to ``max_tokens``) waits for it, and is granted its own worst case
    first (``SliceGranted.refused``: it does not fit); ``calls``: a slice of
    that many calls more, each with room for a prompt of ``room`` tokens.
    ``back``: what the worker gave back of its slice first (tokens, pico-USD,
    calls; a waiting call gives back all it held unspent)."""

    id: int
    slice: int
    ledger: str
    model: str
    prompt_tokens: int
    max_tokens: int
    n: int = 1
    wait: bool = False
    calls: int = 0
    room: int = 0
    back: tuple[int, int, int] = (0, 0, 0)


class Spent(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """``calls`` calls to ``model`` and their usage, summed (each call's
    cached prompt tokens at most its prompt's)."""

    model: str
    calls: int
    usage: Usage


class SliceReport(msgspec.Struct, frozen=True, kw_only=True, tag="slice_report"):
    """What the worker's rollouts did with slice ``slice`` since its last
    report: the calls they ``spent`` it on, by model, and the calls
    ``in_flight`` now at their worst case (charged so if the worker is
    lost); ``ended``: the run's rollouts on this worker ended, and the rest
    of the slice goes back.  Charged to the run's ledger: a batch costs the
    driver the same whatever the calls in it."""

    slice: int
    spent: list[Spent] = []
    in_flight: list[Spent] = []
    ended: bool = False


class RestoreOut(msgspec.Struct, frozen=True, kw_only=True, tag="restore"):
    ledger: str
    model: str
    usage: Usage


class BankSearch(msgspec.Struct, frozen=True, kw_only=True, tag="search"):
    match: str
    owners: list[tuple[Scope, str]]
    k: int


class BankGet(msgspec.Struct, frozen=True, kw_only=True, tag="get"):
    item_id: int
    owners: list[tuple[Scope, str]]
    count_hit: bool = True


class BankPut(msgspec.Struct, frozen=True, kw_only=True, tag="put"):
    item: NewItem


class BankPromote(msgspec.Struct, frozen=True, kw_only=True, tag="promote"):
    source: tuple[Scope, str]
    target: tuple[Scope, str]
    min_hits: int = 1
    verified_only: bool = True


BankCall = BankSearch | BankGet | BankPut | BankPromote


class BankOut(msgspec.Struct, frozen=True, kw_only=True, tag="bank"):
    """A call on the run's memory bank on the driver; answered by ``BankAnswer``."""

    id: int
    call: BankCall


Outbound = EventOut | StepOut | FlushOut | SliceAsk | SliceReport | RestoreOut | BankOut


# -- driver -> worker -----------------------------------------------------------


class Acked(msgspec.Struct, frozen=True, kw_only=True, tag="acked"):
    """The driver handled these items; ``failed``: the ones its sink refused
    (the event is not committed: the rollout fails at that step)."""

    ids: list[int]
    failed: dict[int, str] = {}


class SliceGranted(msgspec.Struct, frozen=True, kw_only=True, tag="slice_granted"):
    """The driver's answer to a ``SliceAsk``: what it added to the slice
    (``None``: the run has no cap on that measure; the slice is unbounded
    in it), or ``refused`` (a waiting call that does not fit: why; ``kind``
    ``budget`` or ``invalid``); ``headroom``: the run's after it, beyond
    the slices."""

    id: int
    slice: int
    tokens: int | None = 0
    pico: int | None = 0
    calls: int | None = 0
    refused: str | None = None
    kind: Literal["budget", "invalid"] = "budget"
    limit: str = ""
    headroom: Headroom | None = None


class BankAnswer(msgspec.Struct, frozen=True, kw_only=True, tag="bank_answer"):
    """What a ``BankOut`` call returned (the field its call returns), or
    ``error``: why it raised."""

    id: int
    hits: list[MemoryHit] = []
    item: MemoryItem | None = None
    number: int = 0
    error: str | None = None


Reply = Acked | SliceGranted | BankAnswer


# -- a worker process's socket: length-prefixed frames, each one of these ---------


class Place(msgspec.Struct, frozen=True, kw_only=True, tag="place"):
    """Run ``placed``; answered by the ``Outcome`` of the same ``id``."""

    id: int
    placed: PlacedRollout


class Cancel(msgspec.Struct, frozen=True, kw_only=True, tag="cancel"):
    """Cancel what ``Place`` ``id`` started (its ``Outcome`` still comes)."""

    id: int


class Replies(msgspec.Struct, frozen=True, kw_only=True, tag="replies"):
    replies: list[Reply]


class Close(msgspec.Struct, frozen=True, kw_only=True, tag="close"):
    """Stop the rollouts, close the worker's Runtime, and exit."""


ToWorker = Place | Cancel | Replies | Close


class Items(msgspec.Struct, frozen=True, kw_only=True, tag="items"):
    """What the worker's outbox took since the last ``Items``, in order."""

    items: list[Outbound]


class Outcome(msgspec.Struct, frozen=True, kw_only=True, tag="outcome"):
    id: int
    outcome: RolloutOutcome | None = None
    """``None``: the rollout was cancelled before it ended."""


ToDriver = WorkerReady | Items | Outcome

_EVENT_KINDS: Final[dict[str, type[Event]]] = {
    str(kind.__struct_config__.tag): kind for kind in typing.get_args(Event)
}


def event_tags(kinds: Iterable[type[Event]] | None) -> list[str] | None:
    """``kinds`` as ``PlacedRollout.events`` carries them (sorted tags)."""
    return None if kinds is None else sorted(str(k.__struct_config__.tag) for k in kinds)


def event_kinds(tags: list[str] | None) -> frozenset[type[Event]] | None:
    """The event types ``tags`` name (``PlacedRollout.events``)."""
    if tags is None:
        return None
    unknown = sorted(set(tags) - _EVENT_KINDS.keys())
    if unknown:
        raise ValueError(f"PlacedRollout.events: unknown event kinds {unknown}")
    return frozenset(_EVENT_KINDS[tag] for tag in tags)


@dataclass(slots=True, eq=False)
class _Last:
    """A rollout's last prompt on a channel, and its step's reply message
    (one per rollout, updated at each of its steps)."""

    prompt: tuple[ChatMessage, ...] = ()
    reply: AssistantMessage | None = None


@final
class StepPrompts:
    """One end of a channel's ``StepOut`` items: the last prompt of each
    rollout with steps on the channel, and that step's reply message (sent
    by the worker, rebuilt by the driver), until the rollout's
    ``FlushOut``.  Both ends see the items in the channel's order, so they
    hold the same prompts."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, _Last]] = {}
        """By top-level rollout: its last prompts and replies and its
        sub-agents', by rollout id."""

    def encode(self, event: StepRecorded, ack: int) -> StepOut:
        """``event`` as a ``StepOut``: the messages its prompt shares with
        the rollout's last one (the same objects, in order), and the last
        step's reply message after them, are not sent."""
        step = event.step
        messages = step.messages
        last = self._last_of(event.rollout_id)
        kept = 0
        for message, before in zip(messages, last.prompt, strict=False):
            if message is not before:
                break
            kept += 1
        reply = last.reply
        replied = reply is not None and kept < len(messages) and messages[kept] is reply
        last.prompt, last.reply = messages, _reply_message(step)
        return StepOut(
            event=msgspec.structs.replace(event, step=msgspec.structs.replace(step, messages=())),
            kept=kept,
            added=list(messages[kept + 1 if replied else kept :]),
            ack=ack,
            replied=replied,
        )

    def decode(self, item: StepOut) -> StepRecorded:
        """The ``StepRecorded`` event ``item`` carries, its prompt whole."""
        event = item.event
        last = self._last_of(event.rollout_id)
        prompt, reply = last.prompt, last.reply
        if item.kept > len(prompt):
            raise ValueError(
                f"StepOut of rollout {event.rollout_id}: keeps {item.kept} messages "
                f"of a prompt of {len(prompt)}"
            )
        if item.replied:
            if reply is None:
                raise ValueError(
                    f"StepOut of rollout {event.rollout_id}: repeats the reply of a step "
                    "this end does not hold"
                )
            messages = (*prompt[: item.kept], reply, *item.added)
        else:
            messages = (*prompt[: item.kept], *item.added)
        step = msgspec.structs.replace(event.step, messages=messages)
        last.prompt, last.reply = messages, _reply_message(step)
        return msgspec.structs.replace(event, step=step)

    def forget(self, rollout: str) -> None:
        """``rollout`` ended: forget its prompts and its sub-agents'."""
        self._last.pop(top_level_id(rollout), None)

    def _last_of(self, rollout_id: str) -> _Last:
        top = top_level_id(rollout_id)
        rollouts = self._last.get(top)
        if rollouts is None:
            rollouts = self._last[top] = {}
        last = rollouts.get(rollout_id)
        if last is None:
            last = rollouts[rollout_id] = _Last()
        return last


def _reply_message(step: Step) -> AssistantMessage | None:
    """The message of ``step``'s reply (its first choice's), if it has one."""
    reply = step.reply
    return reply.choices[0].message if reply is not None and reply.choices else None


ENCODER: Final = msgspec.msgpack.Encoder()
PLACED: Final = msgspec.msgpack.Decoder(PlacedRollout)
OUTCOME: Final = msgspec.msgpack.Decoder(RolloutOutcome)
OUTBOUND: Final = msgspec.msgpack.Decoder(list[Outbound])
REPLIES: Final = msgspec.msgpack.Decoder(list[Reply])
READY: Final = msgspec.msgpack.Decoder(WorkerReady)
TO_WORKER: Final = msgspec.msgpack.Decoder(ToWorker)
TO_DRIVER: Final = msgspec.msgpack.Decoder(ToDriver)
