"""``agentrt run`` shows text as it is generated: the live display's lines
of text, and ``TokenPrinter`` without the display; failed rollouts say why."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agentrt.protocols import (
    Event,
    RolloutFinished,
    RolloutStarted,
    RunFinished,
    RunStarted,
    TokenDelta,
)
from agentrt.runtime.cli._progress import ProgressState, TokenPrinter, render

pytestmark = pytest.mark.anyio

RUN = "run-1"


def token(text: str, step: int = 0, rollout: str = "r0") -> TokenDelta:
    return TokenDelta(run_id=RUN, rollout_id=f"{RUN}-{rollout}", step=step, text=text)


def shown(state: ProgressState) -> str:
    console = Console(file=io.StringIO(), width=160)
    console.print(render(state))
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def test_the_display_shows_the_text_being_generated_and_why_a_rollout_failed() -> None:
    state = ProgressState()
    for event in (
        RunStarted(run_id=RUN, agent="a", task="t", rollouts=2),
        RolloutStarted(run_id=RUN, rollout_id=f"{RUN}-r0"),
        RolloutStarted(run_id=RUN, rollout_id=f"{RUN}-r1"),
        token("The answer "),
        token("is forty"),
    ):
        state.apply(event)
    assert "r0 The answer is forty" in shown(state)
    state.apply(
        RolloutFinished(
            run_id=RUN,
            rollout_id=f"{RUN}-r1",
            status="failed",
            stop_reason="model call failed: cannot connect",
        )
    )
    text = shown(state)
    assert "model call failed: cannot" in text


async def test_the_printer_writes_each_piece_as_it_comes() -> None:
    out = io.StringIO()
    seen: list[Event] = []

    async def then(event: Event) -> None:
        seen.append(event)

    printer = TokenPrinter(out, then)
    await printer(RunStarted(run_id=RUN, agent="a", task="t"))
    await printer(token("Hel"))
    assert out.getvalue() == "[r0] Hel"
    await printer(token("lo"))
    await printer(token("Next", step=1))
    await printer(RunFinished(run_id=RUN, status="succeeded"))
    assert out.getvalue() == "[r0] Hello\n[r0] Next\n"
    assert len(seen) == 5
