"""The live terminal progress display of ``agentrt run`` (runtime roof):
``ProgressState`` (a pure model folded from events), ``render`` and
``live_progress``.

Only the CLI's output layer uses this module; it imports protocols, anyio
and rich, nothing else of agentrt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TextIO, final

import anyio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from agentrt.protocols._events import (
    BudgetUpdated,
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutStarted,
    RunFinished,
    RunStarted,
    StepRecorded,
    SummaryWritten,
    TokenDelta,
    ToolCalled,
    VoteCast,
)
from agentrt.protocols._ids import is_top_level, short_rollout_id
from agentrt.protocols._usage import BudgetCut
from agentrt.runtime.budget._pricing import usd_text

__all__ = [
    "ProgressDisplay",
    "ProgressState",
    "RolloutRow",
    "TokenPrinter",
    "live_progress",
    "render",
]

EventSink = Callable[[Event], Awaitable[None]]

_BAR_WIDTH = 24
_ANSWER_WIDTH = 32
_MAX_ERRORS = 3
_MAX_FOR_USER = 3
_TEXT_TAIL = 400
_TEXT_WIDTH = 100
_MAX_TEXTS = 4


@dataclasses.dataclass(slots=True)
class RolloutRow:
    """What the display knows of one rollout."""

    rollout_id: str
    parent: str | None = None
    status: str = "running"
    steps: int = 0
    tool_calls: int = 0
    tokens: int = 0
    last_tool: str = ""
    answer: str | None = None
    text: str = ""
    """The end of what its model is generating now (``TokenDelta``)."""
    error: str | None = None
    """Why it ended without an answer."""


@dataclasses.dataclass(slots=True)
class _Spend:
    tokens: int = 0
    usd: float = 0.0
    calls: int = 0

    def at_least(self, other: _Spend) -> _Spend:
        return _Spend(
            max(self.tokens, other.tokens), max(self.usd, other.usd), max(self.calls, other.calls)
        )


@dataclasses.dataclass(slots=True)
class ProgressState:
    """A run's progress, folded from its events with ``apply``: one row per
    rollout, the aggregation's decisions (from ``VoteCast``) and the budget.
    Budget figures come from the best source so far: the ledger's
    ``BudgetUpdated`` snapshots, the steps' usage, and finally
    ``RunFinished``'s exact cost."""

    cap_tokens: int | None = None
    """The run's token cap when known up front (``--budget-tokens``)."""
    run_id: str = ""
    agent: str = ""
    planned: int | None = None
    """Rollouts the run announced (``RunStarted``), when it did."""
    rollouts: dict[str, RolloutRow] = dataclasses.field(default_factory=dict)
    votes: list[VoteCast] = dataclasses.field(default_factory=list)
    status: str = "running"
    answer: str | None = None
    errors: list[str] = dataclasses.field(default_factory=list)
    for_user: list[str] = dataclasses.field(default_factory=list)
    """What tools meant for the person (``ToolResult.for_user``), by tool."""
    stopped: BudgetCut | None = None
    """How a budget cap cut the run short (``RunFinished.stopped``)."""
    _from_steps: _Spend = dataclasses.field(default_factory=_Spend)
    _from_rollouts: _Spend = dataclasses.field(default_factory=_Spend)
    _from_ledger: _Spend = dataclasses.field(default_factory=_Spend)
    _final: _Spend | None = None

    def apply(self, event: Event) -> ProgressState:
        """Fold ``event`` into the state; returns the state."""
        match event:
            case RunStarted(run_id=run_id, agent=agent, rollouts=planned):
                self.run_id, self.agent, self.planned = run_id, agent, planned
            case RolloutStarted() | StepRecorded() | ToolCalled() | RolloutFinished():
                self._apply_rollout(event)
            case TokenDelta(rollout_id=rid, text=text, reasoning=reasoning):
                row = self._row(rid)
                row.text = (row.text + (text or reasoning))[-_TEXT_TAIL:]
            case SummaryWritten(summary=summary):
                row = self._row(summary.rollout_id)
                if row.answer is None and summary.answer is not None:
                    row.answer = summary.answer
            case VoteCast():
                self.votes.append(event)
            case BudgetUpdated(spent=spent, reserved_tokens=reserved, left_tokens=left):
                self._from_ledger = _Spend(
                    spent.usage.total_tokens, spent.usd, spent.model_calls
                ).at_least(self._from_ledger)
                if self.cap_tokens is None and left is not None:
                    self.cap_tokens = spent.usage.total_tokens + reserved + left
            case ErrorRaised(where=where, message=message):
                self.errors.append(f"{where}: {message}")
            case RunFinished(status=status, answer=answer, cost=cost, stopped=stopped):
                self.status, self.answer, self.stopped = status, answer, stopped
                self._final = _Spend(cost.usage.total_tokens, cost.usd, cost.model_calls)
            case _:
                pass
        return self

    def _apply_rollout(
        self, event: RolloutStarted | StepRecorded | ToolCalled | RolloutFinished
    ) -> None:
        row = self._row(event.rollout_id)
        match event:
            case RolloutStarted(parent_rollout_id=parent):
                row.parent = parent
            case StepRecorded(step=step):
                row.steps += 1
                row.text = ""
                self.for_user += [
                    f"{r.name}: {r.for_user}" for r in step.tool_results if r.for_user
                ]
                if step.reply is not None:
                    tokens = step.reply.usage.total_tokens
                    row.tokens += tokens
                    self._from_steps.tokens += tokens
                    self._from_steps.calls += 1
            case ToolCalled(tool=tool, is_error=failed):
                row.tool_calls += 1
                row.last_tool = f"{tool} (error)" if failed else tool
            case RolloutFinished(status=status, answer=answer, cost=cost, stop_reason=why):
                row.status, row.answer, row.text = status, answer, ""
                if answer is None and status != "finished":
                    row.error = why or status
                row.tokens = max(row.tokens, cost.usage.total_tokens)
                self._from_rollouts.usd += cost.usd

    def _row(self, rollout_id: str) -> RolloutRow:
        return self.rollouts.setdefault(rollout_id, RolloutRow(rollout_id))

    @property
    def spent_tokens(self) -> int:
        return self._spend().tokens

    @property
    def spent_usd(self) -> float:
        return self._spend().usd

    @property
    def model_calls(self) -> int:
        return self._spend().calls

    def _spend(self) -> _Spend:
        if self._final is not None:
            return self._final
        return self._from_ledger.at_least(self._from_steps).at_least(self._from_rollouts)

    def short(self, rollout_id: str) -> str:
        """A rollout id without the run id in front (the engine names
        rollouts ``<run id>-r<i>``)."""
        return short_rollout_id(self.run_id, rollout_id)


def render(state: ProgressState) -> RenderableType:
    """The rollouts table, the aggregation's decisions and the budget."""
    parts: list[RenderableType] = [_rollouts(state)]
    texts = [r for r in state.rollouts.values() if r.text and r.status == "running"]
    for row in texts[-_MAX_TEXTS:]:
        line = Text(f"{state.short(row.rollout_id)} ", style="bold")
        line.append(_tail(row.text, _TEXT_WIDTH), style="cyan")
        parts.append(line)
    if state.votes:
        parts.append(_bracket(state))
    parts.append(_budget(state))
    for note in state.for_user[-_MAX_FOR_USER:]:
        parts.append(Text(f"for you {_clip(note, 90)}", style="green"))
    for error in state.errors[-_MAX_ERRORS:]:
        parts.append(Text(f"error {_clip(error, 90)}", style="red"))
    if state.status != "running":
        answer = f": {_clip(state.answer, 60)}" if state.answer is not None else ""
        parts.append(Text(f"run {state.status}{answer}", style="bold"))
        if state.stopped is not None:
            parts.append(Text(state.stopped.describe(), style="yellow"))
    return Group(*parts)


def _rollouts(state: ProgressState) -> Table:
    done = sum(1 for r in state.rollouts.values() if r.status != "running" and r.parent is None)
    # PDR's refinement rollouts come on top of the announced ones.
    total = max(state.planned or 0, sum(1 for r in state.rollouts.values() if r.parent is None))
    title = f"rollouts {done}/{total} done" if total else "rollouts starting"
    title += f" ({state.agent})" if state.agent else ""
    table = Table(title=title, title_justify="left", expand=False, box=None, pad_edge=False)
    for name, justify in (
        ("rollout", "left"),
        ("status", "left"),
        ("steps", "right"),
        ("tools", "right"),
        ("tokens", "right"),
        ("last tool", "left"),
        ("answer", "left"),
    ):
        table.add_column(name, justify="right" if justify == "right" else "left", no_wrap=True)
    for row in state.rollouts.values():
        name = state.short(row.rollout_id)
        if row.parent is not None:
            name = f"  > {name}"
        table.add_row(
            name,
            Text(row.status, style=_STATUS_STYLE.get(row.status, "")),
            str(row.steps),
            str(row.tool_calls),
            f"{row.tokens:,}",
            row.last_tool or "-",
            _clip(row.answer, _ANSWER_WIDTH)
            if row.answer is not None
            else Text(_clip(row.error, _ANSWER_WIDTH), style="red")
            if row.error is not None
            else "",
        )
    return table


_STATUS_STYLE = {"running": "yellow", "finished": "green", "failed": "red", "cancelled": "dim"}


def _bracket(state: ProgressState) -> Text:
    """Round by round: each comparison's candidates, tally and winner."""
    text = Text()
    last: tuple[str, int] | None = None
    for vote in state.votes:
        if (vote.aggregator, vote.round) != last:
            last = (vote.aggregator, vote.round)
            text.append(f"{vote.aggregator} round {vote.round}\n", style="bold")
        if len(vote.candidates) > 1 and vote.votes:
            field = " vs ".join(
                f"{state.short(c)} ({vote.votes.get(c, 0)})" for c in vote.candidates
            )
        else:
            field = " vs ".join(state.short(c) for c in vote.candidates)
            if len(vote.candidates) == 1:
                field += " (bye)"
        winner = state.short(vote.winner) if vote.winner is not None else "no winner"
        text.append(f"  {field} -> ")
        text.append(winner, style="green")
        text.append("\n")
    text.rstrip()
    return text


def _budget(state: ProgressState) -> Text:
    spent = state.spent_tokens
    text = Text()
    text.append("budget ", style="bold")
    if state.cap_tokens:
        share = min(1.0, spent / state.cap_tokens)
        filled = round(share * _BAR_WIDTH)
        text.append("[")
        text.append("#" * filled, style="red" if share >= 0.9 else "green")
        text.append("." * (_BAR_WIDTH - filled))
        text.append(f"] {spent:,}/{state.cap_tokens:,} tokens {share:.0%}")
    else:
        text.append(f"{spent:,} tokens (no cap)")
    money = usd_text(state.spent_usd)
    text.append(f", {money + ', ' if money else ''}{state.model_calls} calls")
    return text


def _tail(value: str, width: int) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= width else "..." + flat[3 - width :]


def _clip(value: str | None, width: int) -> str:
    flat = " ".join((value or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


@final
class ProgressDisplay:
    """The event sink of a live display: folds each event into ``state``
    and marks the display for a redraw (drawing happens on a timer)."""

    def __init__(self, state: ProgressState) -> None:
        self.state = state
        self.dirty = True

    async def __call__(self, event: Event) -> None:
        self.state.apply(event)
        self.dirty = True


@final
class TokenPrinter:
    """An event sink that writes the text of the run's rollouts to
    ``stream`` as it is generated (``agentrt run --stream`` without the
    live display): each piece as it comes, a ``[r0] `` label whenever the
    writing rollout or step changes; then hands every event to ``then``."""

    def __init__(self, stream: TextIO, then: EventSink | None = None) -> None:
        self.stream = stream
        self.then = then
        self._at: tuple[str, int] | None = None
        self.run_id = ""

    async def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.run_id = event.run_id
        elif isinstance(event, TokenDelta) and event.text and is_top_level(event.rollout_id):
            if self._at != (event.rollout_id, event.step):
                label = short_rollout_id(self.run_id, event.rollout_id)
                lead = "\n" if self._at is not None else ""
                self.stream.write(f"{lead}[{label}] ")
                self._at = (event.rollout_id, event.step)
            self.stream.write(event.text)
            self.stream.flush()
        elif isinstance(event, RunFinished) and self._at is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._at = None
        if self.then is not None:
            await self.then(event)


@asynccontextmanager
async def live_progress(
    console: Console,
    *,
    cap_tokens: int | None = None,
    refresh_per_second: float = 10.0,
) -> AsyncIterator[ProgressDisplay]:
    """A live display on ``console`` for the block; pass the yielded
    ``ProgressDisplay`` as the run's event sink.  Redrawn at most
    ``refresh_per_second`` times a second, only when something changed; on
    a console that is no terminal, the final frame is printed once.  The
    final frame stays."""
    if refresh_per_second <= 0:
        raise ValueError(f"refresh_per_second must be > 0, got {refresh_per_second}")
    display = ProgressDisplay(ProgressState(cap_tokens=cap_tokens))
    period = 1.0 / refresh_per_second
    # auto_refresh off: rich's refresh thread would render while the event
    # loop mutates the state; redraws happen on this task instead.
    with Live(render(display.state), console=console, auto_refresh=False) as live:

        async def redraw() -> None:
            while True:
                await anyio.sleep(period)
                if display.dirty:
                    display.dirty = False
                    live.update(render(display.state), refresh=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(redraw)
            try:
                yield display
            finally:
                tg.cancel_scope.cancel()
        live.update(render(display.state))
    if not console.is_terminal:
        # rich prints the last frame without ending its line off a terminal.
        console.line()
