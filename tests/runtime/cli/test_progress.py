"""The live progress display of ``agentrt run``: its state model, its
rendering, the live redraws and the CLI's ``--progress`` switch."""

from __future__ import annotations

import io

import anyio
import pytest
from rich.console import Console

from agentrt.protocols import (
    AssistantMessage,
    BudgetUpdated,
    Choice,
    Cost,
    ErrorRaised,
    Event,
    ModelReply,
    RolloutFinished,
    RolloutStarted,
    RunFinished,
    RunStarted,
    Step,
    StepRecorded,
    ToolCalled,
    ToolResult,
    Usage,
    VoteCast,
)
from agentrt.protocols._usage import BudgetCut
from agentrt.runtime.cli._main import main
from agentrt.runtime.cli._progress import ProgressState, live_progress, render

RUN = "run-abc"


def _step(index: int, prompt: int, completion: int) -> Step:
    reply = ModelReply(
        model="m",
        choices=[Choice(message=AssistantMessage(content="..."))],
        usage=Usage(prompt_tokens=prompt, completion_tokens=completion),
        latency_s=0.01,
    )
    return Step(index=index, messages=(), reply=reply)


def _vote(round_: int, candidates: list[str], winner: str, votes: dict[str, int]) -> VoteCast:
    ids = [f"{RUN}-{c}" for c in candidates]
    return VoteCast(
        run_id=RUN,
        aggregator="rtv",
        round=round_,
        candidates=ids,
        winner=f"{RUN}-{winner}",
        votes={f"{RUN}-{k}": v for k, v in votes.items()},
    )


def _script() -> list[Event]:
    """Three rollouts (one failing), a two-round bracket, ledger snapshots."""
    r = [f"{RUN}-r{i}" for i in range(3)]
    return [
        RunStarted(run_id=RUN, agent="solver", task="2+2?", rollouts=3),
        *(RolloutStarted(run_id=RUN, rollout_id=rid) for rid in r),
        StepRecorded(run_id=RUN, rollout_id=r[0], step=_step(0, 100, 10)),
        ToolCalled(run_id=RUN, rollout_id=r[0], call_id="c1", tool="calculator", arguments="{}"),
        StepRecorded(run_id=RUN, rollout_id=r[0], step=_step(1, 150, 5)),
        StepRecorded(run_id=RUN, rollout_id=r[1], step=_step(0, 100, 7)),
        RolloutFinished(run_id=RUN, rollout_id=r[0], status="finished", answer="4"),
        RolloutFinished(run_id=RUN, rollout_id=r[1], status="finished", answer="5"),
        ErrorRaised(run_id=RUN, where="rollout 2", message="boom", rollout_id=r[2]),
        RolloutFinished(run_id=RUN, rollout_id=r[2], status="failed"),
        BudgetUpdated(
            run_id=RUN,
            spent=Cost(
                usd=0.002, usage=Usage(prompt_tokens=400, completion_tokens=22), model_calls=4
            ),
            left_tokens=578,
        ),
        _vote(1, ["r0", "r1"], "r0", {"r0": 2, "r1": 1}),
        _vote(1, ["r2"], "r2", {}),
        _vote(2, ["r0", "r2"], "r0", {"r0": 3, "r2": 0}),
        RunFinished(
            run_id=RUN,
            status="succeeded",
            answer="4",
            cost=Cost(
                usd=0.003, usage=Usage(prompt_tokens=500, completion_tokens=30), model_calls=7
            ),
        ),
    ]


def _text(state: ProgressState) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=100, force_terminal=False).print(render(state))
    return buffer.getvalue()


def test_the_state_follows_rollouts_bracket_and_budget() -> None:
    state = ProgressState(cap_tokens=1000)
    script = _script()
    for event in script[:7]:  # up to r0's second step
        state.apply(event)
    r0 = state.rollouts[f"{RUN}-r0"]
    assert (r0.status, r0.steps, r0.tool_calls, r0.tokens) == ("running", 2, 1, 265)
    assert r0.last_tool == "calculator"
    assert (state.spent_tokens, state.model_calls) == (265, 2)  # from the steps so far
    for event in script[7:12]:
        state.apply(event)
    assert [r.status for r in state.rollouts.values()] == ["finished", "finished", "failed"]
    assert state.rollouts[f"{RUN}-r1"].answer == "5"
    assert state.errors == ["rollout 2: boom"]
    state.apply(script[12])  # the ledger knows more than the steps
    assert (state.spent_tokens, state.model_calls, state.spent_usd) == (422, 4, 0.002)
    for event in script[13:16]:
        state.apply(event)
    assert [(v.round, v.winner) for v in state.votes] == [
        (1, f"{RUN}-r0"),
        (1, f"{RUN}-r2"),
        (2, f"{RUN}-r0"),
    ]
    state.apply(script[16])  # RunFinished's cost is exact and final
    assert (state.status, state.answer) == ("succeeded", "4")
    assert (state.spent_tokens, state.model_calls, state.spent_usd) == (530, 7, 0.003)


def test_what_a_tool_meant_for_the_person_is_shown() -> None:
    step = Step(
        index=0,
        messages=(),
        tool_results=(
            ToolResult(call_id="c1", name="ev__note", content="[...]", for_user="Saved."),
            ToolResult(call_id="c2", name="calculator", content="4"),
        ),
    )
    state = ProgressState().apply(StepRecorded(run_id=RUN, rollout_id=f"{RUN}-r0", step=step))
    assert state.for_user == ["ev__note: Saved."]
    shown = Console(file=io.StringIO(), width=120, force_terminal=False)
    shown.print(render(state))
    assert "for you ev__note: Saved." in shown.file.getvalue()  # type: ignore[attr-defined]


def test_the_cap_comes_from_the_ledger_when_not_given() -> None:
    state = ProgressState()
    for event in _script()[:13]:
        state.apply(event)
    assert state.cap_tokens == 422 + 578


def test_render_shows_rows_bracket_and_budget() -> None:
    state = ProgressState(cap_tokens=1000)
    script = _script()
    for event in script[:-1]:
        state.apply(event)
    lines = _text(state).splitlines()
    assert lines[0].startswith("rollouts 3/3 done (solver)")
    r0 = next(line for line in lines if line.startswith("r0 "))
    assert r0.split() == ["r0", "finished", "2", "1", "265", "calculator", "4"]
    assert next(line for line in lines if line.startswith("r2 ")).split()[:2] == ["r2", "failed"]
    assert "rtv round 1" in lines
    assert "rtv round 2" in lines
    assert "  r0 (2) vs r1 (1) -> r0" in lines
    assert "  r2 (bye) -> r2" in lines
    assert "  r0 (3) vs r2 (0) -> r0" in lines
    budget = next(line for line in lines if line.startswith("budget"))
    assert "422/1,000 tokens 42%" in budget
    assert "$0.002000, 4 calls" in budget
    assert "error rollout 2: boom" in lines
    state.apply(script[-1])
    assert "run succeeded: 4" in _text(state).splitlines()


def test_a_run_a_cap_cut_short_says_so() -> None:
    state = ProgressState(cap_tokens=1000)
    for event in _script()[:-1]:
        state.apply(event)
    stopped = BudgetCut(limit="max_tokens", rollouts=3, finished=2, cut=1)
    state.apply(RunFinished(run_id=RUN, status="succeeded", answer="4", stopped=stopped))
    lines = _text(state).splitlines()
    assert "run succeeded: 4" in lines
    assert "cut short by max_tokens: 2 of 3 rollouts finished (1 stopped by the cap)" in lines


@pytest.mark.anyio
async def test_the_live_display_redraws_while_running_and_keeps_the_last_frame() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, force_terminal=True, color_system=None)
    async with live_progress(console, cap_tokens=1000, refresh_per_second=50) as display:
        await display(RunStarted(run_id=RUN, agent="solver", task="t", rollouts=1))
        await display(RolloutStarted(run_id=RUN, rollout_id=f"{RUN}-r0"))
        await anyio.sleep(0.3)  # 15 redraw periods
        assert "rollouts 0/1 done (solver)" in buffer.getvalue()
        await display(RolloutFinished(run_id=RUN, rollout_id=f"{RUN}-r0", status="finished"))
    assert "rollouts 1/1 done (solver)" in buffer.getvalue()


@pytest.mark.anyio
async def test_off_a_terminal_only_the_final_frame_is_printed() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, force_terminal=False)
    async with live_progress(console, refresh_per_second=50) as display:
        for event in _script():
            await display(event)
        await anyio.sleep(0.05)  # redraws happen, but print nothing off a terminal
        assert buffer.getvalue() == ""
    out = buffer.getvalue()
    assert out.count("rollouts 3/3 done") == 1
    assert out.endswith("run succeeded: 4\n")


# -- the CLI ------------------------------------------------------------------


def test_run_with_progress_shows_the_bracket_and_the_budget(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "Capital?", "--rollouts", "4", "--aggregate", "rtv", "--budget-tokens", "50000"]
    argv += ["--aggregate-option", "g=2", "--aggregate-option", "v=1", "--config", config]
    assert main([*argv, "--progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rollouts 4/4 done")
    assert "rtv round 1" in lines
    assert "rtv round 2" in lines
    assert sum(" -> r" in line for line in lines) == 3  # N - 1 comparisons for G = 2
    assert any(line.startswith("budget [") and "/50,000 tokens" in line for line in lines)
    # The usual output follows the display (the scripted judge's replies are
    # no verdicts, so the seeded coin decides which answer).
    assert any(line in ("answer: Paris", "answer: Lyon") for line in lines)


def test_without_progress_off_a_terminal_the_output_is_unchanged(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "Capital?", "--rollouts", "3", "--budget-tokens", "50000", "--config", config]

    def lines(*extra: str) -> list[str]:
        assert main([*argv, *extra]) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        # The last line holds the wall time, which differs between runs.
        return captured.out.splitlines()[:-1]

    plain = lines()
    assert plain == lines("--no-progress")
    assert not any(line.startswith(("budget", "rollouts ")) for line in plain)
    shown = lines("--progress")  # the plain path feeds the display too
    assert shown[-len(plain) :] == plain
    assert shown[0].rstrip() == "rollouts 3/3 done (assistant)"
    assert any(line.startswith("r2 ") and "finished" in line for line in shown)
    assert any(line.startswith("budget [") for line in shown)
