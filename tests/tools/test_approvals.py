"""A tool under ``[approvals.TOOL]`` waits for the person behind the run:
the embedding's callback (or the run's ``elicitation`` event) approves or
denies each call; a denial, nobody to ask, or no answer by the deadline is
the tool's result, and the tool does not run."""

from __future__ import annotations

import time
from typing import Any

import pytest

import agentrt
from agentrt.agents import AgentConfig
from agentrt.protocols import (
    ElicitationAnswered,
    ElicitationRequested,
    Event,
    ModelRequest,
    RunFinished,
    StepRecorded,
    ToolMessage,
)
from agentrt.runtime.engine._runtime import RunCheckpoint, Runtime
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools import ElicitationQuestion, tool
from agentrt.tools._tool import ElicitationReply
from tests._support.approvals import Person

pytestmark = pytest.mark.anyio


def _deleting() -> tuple[Any, list[str]]:
    deleted: list[str] = []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    return delete_file, deleted


def _calls_then_answers() -> ScriptedBackend:
    def script(request: ModelRequest) -> Any:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ScriptedToolCall("delete_file", {"path": "/tmp/x"})
        return "done"

    return ScriptedBackend(script, name="scripted", models=["scripted"])


def _tool_result(backend: ScriptedBackend) -> str:
    [message] = [m for m in backend.requests[-1].messages if isinstance(m, ToolMessage)]
    return message.content


def _config(timeout_s: float = 60.0) -> dict[str, Any]:
    return {"approvals": {"delete_file": {"timeout_s": timeout_s}}}


AGENT = {"worker": AgentConfig(name="worker", tools=["delete_file"])}


def _runtime(
    delete_file: Any,
    on_elicitation: Any = None,
    *,
    backend: ScriptedBackend | None = None,
    timeout_s: float = 60.0,
) -> Runtime:
    """A runtime whose worker may call ``delete_file`` once approved."""
    return Runtime(
        _config(timeout_s),
        backends=[backend or _calls_then_answers()],
        tools=[delete_file],
        agents=AGENT,
        on_elicitation=on_elicitation,
    )


@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_the_callback_approves_or_denies_each_call(action: str) -> None:
    delete_file, deleted = _deleting()
    ask = Person(action)
    backend = _calls_then_answers()
    async with _runtime(delete_file, ask, backend=backend) as rt:
        result = await rt.run("clean up", agent="worker", run_id="run-approve")
    assert result.answer == "done"
    [question] = ask.asked
    assert (question.mode, question.tool, question.run_id) == (
        "approval",
        "delete_file",
        "run-approve",
    )
    assert question.arguments == {"path": "/tmp/x"}
    assert question.expires_at is not None
    if action == "accept":
        assert deleted == ["/tmp/x"]
        assert _tool_result(backend) == "deleted /tmp/x"
    else:
        assert deleted == []
        assert "the person denied it" in _tool_result(backend)


@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_the_trajectory_records_each_approval_on_its_tool_result(action: str) -> None:
    delete_file, _ = _deleting()
    steps: list[StepRecorded] = []

    async def record(event: Event) -> None:
        if isinstance(event, StepRecorded):
            steps.append(event)

    async with _runtime(delete_file, Person(action)) as rt:
        await rt.run("clean up", agent="worker", events=record)
    [result] = [r for e in steps for r in e.step.tool_results]
    assert result.approval is not None
    assert (result.approval.outcome, result.approval.question_id[:8]) == (action, "approve-")
    assert result.is_error == (action == "decline")


async def test_nobody_to_ask_declines_the_call() -> None:
    delete_file, deleted = _deleting()
    backend = _calls_then_answers()
    async with _runtime(delete_file, backend=backend) as rt:
        await rt.run("clean up", agent="worker")
    assert deleted == []
    assert "nobody can be asked" in _tool_result(backend)


async def test_an_unanswered_approval_times_out_and_says_so() -> None:
    delete_file, deleted = _deleting()
    backend = _calls_then_answers()
    events: list[Any] = []
    async with (
        _runtime(delete_file, "events", backend=backend, timeout_s=0.3) as rt,
        rt.stream("clean up", agent="worker") as stream,
    ):
        async for event in stream:
            events.append(event)
    assert deleted == []
    assert "nobody answered within 0.3 s" in _tool_result(backend)
    [answered] = [e for e in events if isinstance(e, ElicitationAnswered)]
    assert answered.action == "timeout"
    assert isinstance(events[-1], RunFinished)


async def test_an_approval_on_the_runs_stream_is_answered_through_the_runtime() -> None:
    delete_file, deleted = _deleting()
    backend = _calls_then_answers()
    seen: list[Any] = []
    async with (
        _runtime(delete_file, "events", backend=backend) as rt,
        rt.stream("clean up", agent="worker") as events,
    ):
        async for event in events:
            seen.append(event)
            if isinstance(event, ElicitationRequested):
                [waiting] = rt.waiting_questions(event.run_id)
                assert waiting.question_id == event.question_id
                assert rt.answer_elicitation(
                    event.question_id, ElicitationReply(action="accept"), run_id=event.run_id
                )
                assert rt.waiting_questions() == []
    assert deleted == ["/tmp/x"]
    kinds = [type(e).__name__ for e in seen]
    asked, answered = kinds.index("ElicitationRequested"), kinds.index("ElicitationAnswered")
    assert asked < answered < kinds.index("ToolCalled")


async def test_an_approval_for_a_tool_nobody_offers_is_a_config_error() -> None:
    delete_file, _ = _deleting()
    with pytest.raises(ConfigError) as caught:
        async with Runtime(
            {"approvals": {"delete_fiel": {}}},
            backends=[_calls_then_answers()],
            tools=[delete_file],
        ):
            pass
    assert caught.value.where == "approvals.delete_fiel"
    assert "delete_file" in str(caught.value)


async def test_the_same_call_asks_the_same_question() -> None:
    """A resumed run asks again for the same call: the question id is the call's."""
    delete_file, _ = _deleting()
    ask = Person("decline")
    for _ in range(2):
        async with _runtime(delete_file, ask) as rt:
            await rt.run("clean up", agent="worker", run_id="run-same")
    ids = [q.id for q in ask.asked]
    assert len(ids) == 2
    assert ids[0] == ids[1]


async def _question_id() -> str:
    """The id the scripted call's approval gets in the run ``run-resumed``."""
    delete_file, _ = _deleting()
    ask = Person("decline")
    async with _runtime(delete_file, ask) as rt:
        await rt.run("clean up", agent="worker", run_id="run-resumed")
    [question] = ask.asked
    return question.id


async def test_a_resumed_run_takes_up_a_recorded_answer_without_asking() -> None:
    question_id = await _question_id()
    delete_file, deleted = _deleting()

    async def ask(question: ElicitationQuestion) -> ElicitationReply:
        raise AssertionError(f"asked again: {question.id}")

    recorded = ElicitationAnswered(run_id="run-resumed", question_id=question_id, action="accept")
    checkpoint = RunCheckpoint(next_seq=1, rollouts={}, answered={question_id: recorded})
    async with _runtime(delete_file, ask) as rt:
        await rt.run("clean up", agent="worker", run_id="run-resumed", checkpoint=checkpoint)
    assert deleted == ["/tmp/x"]


async def test_a_resumed_run_keeps_the_questions_first_deadline() -> None:
    question_id = await _question_id()
    delete_file, deleted = _deleting()
    backend = _calls_then_answers()
    first = ElicitationRequested(
        run_id="run-resumed",
        question_id=question_id,
        server="",
        mode="approval",
        message="allow?",
        expires_at=time.time() - 1,  # passed while the daemon was down
    )
    checkpoint = RunCheckpoint(next_seq=1, rollouts={}, asked={question_id: first})
    async with _runtime(delete_file, "events", backend=backend, timeout_s=3600) as rt:
        await rt.run("clean up", agent="worker", run_id="run-resumed", checkpoint=checkpoint)
    assert deleted == []
    assert "nobody answered within 3600 s" in _tool_result(backend)


def test_agentrt_run_takes_the_callback_too() -> None:
    delete_file, deleted = _deleting()
    ask = Person()
    result = agentrt.run(
        "clean up",
        config={**_config(), "agents": {"worker": {"name": "worker", "tools": ["delete_file"]}}},
        backends=[_calls_then_answers()],
        tools=[delete_file],
        agent="worker",
        on_elicitation=ask,
    )
    assert result.answer == "done"
    assert ([q.tool for q in ask.asked], deleted) == (["delete_file"], ["/tmp/x"])
