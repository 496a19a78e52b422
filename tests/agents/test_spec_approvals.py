"""A spec's tool binding or sub-agent with ``approval`` waits for the person
behind the run (the ``ApprovalGate``, as ``[approvals.TOOL]``), and the
trajectory records each approval's question and outcome on the call's
``ToolResult``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.agents._spec_loader import load_spec
from agentrt.protocols import (
    ElicitationAnswered,
    Event,
    ModelRequest,
    StepRecorded,
    SystemMessage,
    ToolMessage,
    ToolResult,
)
from agentrt.runtime.engine._runtime import Runtime
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools import ElicitationQuestion
from agentrt.tools._tool import ElicitationReply
from tests._support.approvals import Person

pytestmark = pytest.mark.anyio

_modules = itertools.count()

#: A spec whose calculator asks first, with the defaults.
CALCULATOR_ASKS = "name: worker\ntools:\n  - {builtin: calculator, approval: true}\n"


def _tool_module(tmp_path: Path) -> tuple[str, Path]:
    """A module beside the spec whose ``delete_file`` appends to a file (a
    fresh module name per test: bindings are imported once per process)."""
    name = f"approval_tools_{next(_modules)}"
    log = tmp_path / "deleted.txt"
    (tmp_path / f"{name}.py").write_text(
        "def delete_file(path: str) -> str:\n"
        '    """Delete a file."""\n'
        f"    with open({str(log)!r}, 'a') as out:\n"
        "        out.write(path + '\\n')\n"
        "    return 'deleted ' + path\n"
    )
    return name, log


def _calls_then_answers(tool: str, arguments: dict[str, Any]) -> ScriptedBackend:
    """Calls ``tool`` once, then answers with what the tool said; a
    sub-agent (told ``You help.``) answers ``helped``."""

    def script(request: ModelRequest) -> Any:
        system = next((m for m in request.messages if isinstance(m, SystemMessage)), None)
        if system is not None and "You help." in str(system.content):
            return "helped"
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return ScriptedToolCall(tool, arguments)
        return f"done: {results[-1].content}"

    return ScriptedBackend(script, name="scripted", models=["scripted"])


def _spec(tmp_path: Path, name: str, text: str) -> Path:
    spec = tmp_path / name
    spec.write_text(text)
    return spec


def _tool_results(events: list[Event]) -> list[ToolResult]:
    return [r for e in events if isinstance(e, StepRecorded) for r in e.step.tool_results]


def _assert_refused(answer: str | None, events: list[Event], outcome: str, says: str) -> None:
    """The one call was not made: its result records the approval's
    ``outcome`` and the run's answer passes on what the tool said."""
    [result] = _tool_results(events)
    assert result.approval is not None
    assert result.approval.outcome == outcome
    assert answer is not None
    assert says in answer


async def _run(
    spec: Path, backend: ScriptedBackend, on_elicitation: Any, *, run_id: str = "run-1"
) -> tuple[str | None, list[Event]]:
    events: list[Event] = []

    async def sink(event: Event) -> None:
        events.append(event)

    async with Runtime(
        {}, backends=[backend], agents={"team": load_spec(spec)}, on_elicitation=on_elicitation
    ) as rt:
        result = await rt.run("clean up", agent="team", run_id=run_id, events=sink)
    return result.answer, events


@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_a_python_binding_with_approval_runs_only_when_approved(
    tmp_path: Path, action: str
) -> None:
    module, log = _tool_module(tmp_path)
    spec = _spec(
        tmp_path,
        "agent.yaml",
        "name: worker\ntools:\n"
        f"  - python: '{module}:delete_file'\n"
        "    approval: {timeout_s: 60, message: 'Delete it?'}\n",
    )
    ask = Person(action)

    backend = _calls_then_answers("delete_file", {"path": "/tmp/x"})
    answer, events = await _run(spec, backend, ask)
    [question] = ask.asked
    assert (question.mode, question.tool, question.message) == (
        "approval",
        "delete_file",
        "Delete it?",
    )
    assert question.arguments == {"path": "/tmp/x"}
    assert question.run_id == "run-1"
    # The run records the question and its answer (what a resumed run takes up).
    [answered] = [e for e in events if isinstance(e, ElicitationAnswered)]
    assert (answered.question_id, answered.action) == (question.id, action)
    [result] = _tool_results(events)
    assert result.approval is not None
    assert (result.approval.question_id, result.approval.message, result.approval.outcome) == (
        question.id,
        "Delete it?",
        action,
    )
    if action == "accept":
        assert log.read_text() == "/tmp/x\n"
        assert answer == "done: deleted /tmp/x"
    else:
        assert not log.exists()
        assert result.is_error
        assert "the person denied it; the call did not run" in result.content


async def test_a_built_in_with_approval_true_asks_with_the_defaults(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "agent.yaml", CALCULATOR_ASKS)
    ask = Person()

    backend = _calls_then_answers("calculator", {"expression": "6*7"})
    answer, events = await _run(spec, backend, ask)
    [question] = ask.asked
    assert question.tool == "calculator"
    assert answer is not None
    assert "42" in answer
    [result] = _tool_results(events)
    assert result.approval is not None
    assert result.approval.outcome == "accept"


async def test_a_binding_without_approval_is_not_asked_and_records_none(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "agent.yaml", "name: worker\ntools: [calculator]\n")
    ask = Person()

    backend = _calls_then_answers("calculator", {"expression": "6*7"})
    _, events = await _run(spec, backend, ask)
    assert ask.asked == []
    [result] = _tool_results(events)
    assert result.approval is None


async def test_a_sub_agent_with_approval_is_not_called_when_declined(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "team.yaml",
        "entry: boss\nagents:\n"
        "  boss:\n    sub_agents:\n      - {agent: helper, approval: {timeout_s: 30}}\n"
        "  helper: {instructions: 'You help.'}\n",
    )
    ask = Person("decline")

    backend = _calls_then_answers("helper", {"task": "help me"})
    answer, events = await _run(spec, backend, ask)
    [question] = ask.asked
    assert (question.tool, question.run_id) == ("helper", "run-1")
    helper_calls = [
        r
        for r in backend.requests
        if any(isinstance(m, SystemMessage) and "You help." in str(m.content) for m in r.messages)
    ]
    assert helper_calls == []
    _assert_refused(answer, events, "decline", "denied")


async def test_a_sub_agent_with_approval_runs_when_approved(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "team.yaml",
        "entry: boss\nagents:\n"
        "  boss: {sub_agents: [{agent: helper, approval: true}]}\n"
        "  helper: {instructions: 'You help.'}\n",
    )
    backend = _calls_then_answers("helper", {"task": "help me"})
    answer, events = await _run(spec, backend, Person())
    assert answer is not None
    assert "helped" in answer
    approvals = [r.approval for r in _tool_results(events) if r.name == "helper"]
    assert [a.outcome for a in approvals if a is not None] == ["accept"]


async def test_waiting_for_the_person_does_not_count_against_the_tool_timeout(
    tmp_path: Path,
) -> None:
    spec = _spec(
        tmp_path,
        "agent.yaml",
        "name: worker\nlimits: {tool_timeout_s: 0.05}\ntools:\n"
        "  - {builtin: calculator, approval: {timeout_s: 60}}\n",
    )

    async def slow(question: ElicitationQuestion) -> ElicitationReply:
        await anyio.sleep(0.3)  # longer than the tool's own limit
        return ElicitationReply(action="accept")

    backend = _calls_then_answers("calculator", {"expression": "6*7"})
    answer, events = await _run(spec, backend, slow)
    [result] = _tool_results(events)
    assert not result.is_error, result.content
    assert answer == "done: 42"


async def test_an_unanswered_approval_is_recorded_as_timed_out(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "agent.yaml",
        "name: worker\ntools:\n  - {builtin: calculator, approval: {timeout_s: 0.05}}\n",
    )

    async def never(question: ElicitationQuestion) -> ElicitationReply:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    backend = _calls_then_answers("calculator", {"expression": "6*7"})
    answer, events = await _run(spec, backend, never)
    _assert_refused(answer, events, "timeout", "nobody answered within 0.05 s")


async def test_nobody_to_ask_is_recorded_as_unavailable(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "agent.yaml", CALCULATOR_ASKS)
    backend = _calls_then_answers("calculator", {"expression": "6*7"})
    answer, events = await _run(spec, backend, None)
    _assert_refused(answer, events, "unavailable", "nobody can be asked")


async def test_a_sub_agents_own_tool_asks_within_the_run(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "team.yaml",
        "entry: boss\nagents:\n"
        "  boss: {sub_agents: [helper]}\n"
        "  helper:\n    instructions: 'You count.'\n"
        "    tools: [{builtin: calculator, approval: true}]\n",
    )

    def script(request: ModelRequest) -> Any:
        system = next(m for m in request.messages if isinstance(m, SystemMessage))
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if "You count." in str(system.content):
            return (
                f"counted {results[-1].content}"
                if results
                else ScriptedToolCall("calculator", {"expression": "6*7"})
            )
        return (
            f"boss: {results[-1].content}"
            if results
            else ScriptedToolCall("helper", {"task": "count"})
        )

    ask = Person()

    backend = ScriptedBackend(script, name="scripted", models=["scripted"])
    answer, events = await _run(spec, backend, ask)
    [question] = ask.asked
    assert (question.tool, question.run_id) == ("calculator", "run-1")
    assert answer is not None
    assert "counted 42" in answer
    [calculated] = [r for r in _tool_results(events) if r.name == "calculator"]
    assert calculated.approval is not None
    assert calculated.approval.outcome == "accept"
