"""The memory bank proof: parallel rollouts whose sub-steps overlap make
fewer model and tool calls with a shared bank, and reach the same answers.

Each rollout must learn three facts (alpha, beta, gamma), each by two
expensive tool steps: ``search(topic)`` gives a document id, ``fetch(doc)``
the fact.  The scripted model reads its own history and, when the per-step
memory note lists a fetched fact it still needs, fetches it with
``memory_get`` instead (all such facts in one step).  The rollouts start on
different topics, so what one learns another can reuse.

This proves the mechanics only: this scripted model trusts every note it
sees and every fact is right.  ``bench/memory.py`` measures a model that uses
notes with some probability and a source that is sometimes wrong (fewer
calls, and a majority answer that is right less often).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import anyio
import msgspec
import pytest

from agentrt.agents import Agent, AgentConfig, RolloutContext
from agentrt.protocols import ModelRequest, ToolMessage, ToolSpec, UserMessage
from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.memory._bank import MemoryBank
from agentrt.runtime.memory._view import NOTE_HEADER, MemoryView
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools._memory_tools import memory_tools
from agentrt.tools._tool import ToolContext, ToolOutput

pytestmark = pytest.mark.anyio

TASK = "Report the weights of alpha, beta and gamma."
ORDERS = {
    "r0": ("alpha", "beta", "gamma"),
    "r1": ("beta", "gamma", "alpha"),
    "r2": ("gamma", "alpha", "beta"),
    "r3": ("alpha", "gamma", "beta"),
}
WEIGHTS = {"alpha": 17, "beta": 42, "gamma": 99}
FACT = re.compile(r"^fact (\w+): \w+ weighs (\d+) kg", re.MULTILINE)
DOC = re.compile(r"^doc-(\w+)$")
KEY = re.compile(r"^- \[(\d+)\] fetch\(.*\) -> fact (\w+):", re.MULTILINE)


class LookupTool:
    """A slow lookup tool counting its calls."""

    def __init__(self, name: str, param: str, answer: Any) -> None:
        self._spec = ToolSpec(
            name=name,
            description=f"the {name} lookup",
            parameters={
                "type": "object",
                "properties": {param: {"type": "string"}},
                "required": [param],
                "additionalProperties": False,
            },
        )
        self.param = param
        self.answer = answer
        self.calls = 0

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls += 1
        await anyio.sleep(0.02)
        return ToolOutput.of_text(self.answer(arguments[self.param]))


def search_tool() -> LookupTool:
    return LookupTool("search", "topic", lambda topic: f"doc-{topic}")


def fetch_tool() -> LookupTool:
    def fetch(doc: str) -> str:
        topic = doc.removeprefix("doc-")
        n = WEIGHTS[topic]
        return f"fact {topic}: {topic} weighs {n} kg (source: registry entry {topic}-{n})"

    return LookupTool("fetch", "doc", fetch)


def model(request: ModelRequest) -> ReplySpec:
    """The scripted model: stateless, it reads everything off the request."""
    rollout = (request.request_id or "").rsplit("-", 1)[0]
    order = ORDERS[rollout]
    facts: dict[str, str] = {}
    docs: set[str] = set()
    for message in request.messages:
        if isinstance(message, ToolMessage):
            facts.update((t, n) for t, n in FACT.findall(message.content))
            if found := DOC.match(message.content):
                docs.add(found.group(1))
    visible: dict[str, int] = {}
    last = request.messages[-1]
    if (
        isinstance(last, UserMessage)
        and isinstance(last.content, str)
        and last.content.startswith(NOTE_HEADER)
    ):
        visible = {topic: int(i) for i, topic in KEY.findall(last.content)}
    needed = [t for t in order if t not in facts]
    if not needed:
        return "; ".join(f"{t}={facts[t]}kg" for t in sorted(facts))
    reuse = [ScriptedToolCall("memory_get", {"id": visible[t]}) for t in needed if t in visible]
    if reuse:
        return reuse
    topic = needed[0]
    if topic in docs:
        return ScriptedToolCall("fetch", {"doc": f"doc-{topic}"})
    return ScriptedToolCall("search", {"topic": topic})


async def run_rollouts(
    with_bank: bool,
) -> tuple[dict[str, str | None], int, int, list[ModelRequest]]:
    backend = ScriptedBackend(model)
    search, fetch = search_tool(), fetch_tool()
    answers: dict[str, str | None] = {}
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-1", task_id="weights", k=6) if with_bank else None
        tools = [search, fetch, *(memory_tools(view) if view is not None else [])]
        agent = Agent(AgentConfig(name="weigher"), backends=[backend], tools=tools, memory=view)

        async def one(rollout_id: str) -> None:
            result = await agent.run(TASK, RolloutContext(run_id="run-1", rollout_id=rollout_id))
            assert result.trajectory.status == "finished", result.trajectory.stop_reason
            answers[rollout_id] = result.trajectory.answer

        async with anyio.create_task_group() as tg:
            for rollout_id in ORDERS:
                tg.start_soon(one, rollout_id)
    return answers, len(backend.requests), search.calls + fetch.calls, backend.requests


async def test_a_shared_bank_saves_model_and_tool_calls_with_the_same_answers() -> None:
    alone, alone_calls, alone_tools, _ = await run_rollouts(with_bank=False)
    shared, shared_calls, shared_tools, requests = await run_rollouts(with_bank=True)

    expected = "; ".join(f"{t}={WEIGHTS[t]}kg" for t in sorted(WEIGHTS))
    assert set(alone.values()) == {expected}
    assert shared == alone
    # Without the bank every rollout does 3 x (search + fetch) + the answer.
    assert (alone_calls, alone_tools) == (4 * 7, 4 * 6)
    assert shared_calls < alone_calls
    assert shared_tools < alone_tools
    # Somebody actually reused memory.
    gets = [
        c
        for r in requests
        for m in r.messages
        if not isinstance(m, (ToolMessage, UserMessage))
        for c in getattr(m, "tool_calls", [])
        if c.function.name == "memory_get"
    ]
    assert gets


async def test_the_memory_note_leaves_the_shared_prefix_byte_identical() -> None:
    _, _, _, requests = await run_rollouts(with_bank=True)
    encode = msgspec.json.encode
    prefixes = {encode(r.messages[:2]) + encode(r.tools) for r in requests}
    assert len(prefixes) == 1
    noted = [r for r in requests if isinstance(r.messages[-1], UserMessage) and len(r.messages) > 2]
    assert noted, "no step showed the shared memory keys"
    for request in noted:
        note = request.messages[-1]
        assert isinstance(note, UserMessage)
        assert isinstance(note.content, str)
        assert note.content.startswith(NOTE_HEADER)
        # The note is never part of the history the next step extends.
        assert sum(isinstance(m, UserMessage) for m in request.messages[2:]) == 1


async def test_failed_and_memory_tool_results_are_not_offered() -> None:
    def lookup(topic: str) -> str:
        if topic == "beta":
            raise ToolError("lookup service down")
        return f"doc-{topic}"

    backend = ScriptedBackend(
        [
            ScriptedToolCall("search", {"topic": "alpha"}),
            ScriptedToolCall("search", {"topic": "beta"}),
            ScriptedToolCall("memory_search", {"query": "alpha"}),
            "done",
        ]
    )
    search = LookupTool("search", "topic", lookup)
    async with MemoryBank() as bank:
        # Shown at once (no corroboration): this checks what is offered.
        view = MemoryView(bank, run_id="run-2", corroborate=1)
        agent = Agent(
            AgentConfig(name="offers"),
            backends=[backend],
            tools=[search, *memory_tools(view)],
            memory=view,
        )
        result = await agent.run("find alpha", RolloutContext(run_id="run-2", rollout_id="r0"))
        assert result.trajectory.answer == "done"
        assert result.trajectory.steps[1].tool_results[0].is_error
        keys = [h.key for h in await bank.keys(view.owners)]
    # The search result was offered and stored; the memory_search one was not.
    assert keys == ['search({"topic":"alpha"}) -> doc-alpha']
    assert view.offered == 1
    assert search.calls == 2


class ScriptedLookup:
    """A lookup answering from ``answers`` in turn, then the last one again
    (a source that may err per call), read-only or not; counts its calls."""

    def __init__(self, answers: list[str], *, read_only: bool) -> None:
        self._spec = ToolSpec(
            name="lookup",
            description="look a weight up",
            parameters={"type": "object", "properties": {"item": {"type": "string"}}},
            annotations={"readOnlyHint": True} if read_only else {},
        )
        self.answers = answers
        self.calls = 0

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls += 1  # the last answer again past the list's end
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        return ToolOutput.of_text(f"fact {arguments['item']}: weighs {answer} kg")


async def look_up(
    answers: list[str], *, read_only: bool = True, rollouts: int = 1, recheck: bool = True
) -> tuple[ScriptedLookup, list[tuple[str, int, list[str]]], list[Any]]:
    """``rollouts`` rollouts, one after the other, each looking alpha up
    once; the lookup's calls, what the bank shares (key, support, sources)
    and each rollout's steps."""
    lookup = ScriptedLookup(answers, read_only=read_only)
    steps: list[Any] = []
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-3", recheck=recheck)
        for rollout in range(rollouts):
            backend = ScriptedBackend([ScriptedToolCall("lookup", {"item": "alpha"}), "done"])
            agent = Agent(
                AgentConfig(name="looker"), backends=[backend], tools=[lookup], memory=view
            )
            context = RolloutContext(run_id="run-3", rollout_id=f"r{rollout}")
            result = await agent.run("weigh alpha", context)
            assert result.trajectory.answer == "done"
            steps.append(result.trajectory.steps)
        shared = []
        for hit in await bank.keys(view.owners):
            item = await bank.get(hit.id, view.owners, count_hit=False)
            assert item is not None
            shared.append((item.value, item.support, item.sources))
    return lookup, shared, steps


async def test_a_read_only_call_made_twice_that_agrees_is_shared_at_once() -> None:
    lookup, shared, [steps] = await look_up(["42", "42"])
    assert lookup.calls == 2  # the model's call and the loop's second one
    assert shared == [("fact alpha: weighs 42 kg", 2, ["r0", "r0/recheck"])]
    # The rollout's own record holds the one call it made.
    assert [len(s.tool_results) for s in steps] == [1, 0]


async def test_a_read_only_call_made_twice_that_disagrees_is_not_shared() -> None:
    lookup, shared, _ = await look_up(["45", "42"])
    assert lookup.calls == 2
    assert shared == []  # neither value has a second call behind it


async def test_a_call_that_is_not_read_only_is_made_once_and_not_shared() -> None:
    lookup, shared, _ = await look_up(["42"], read_only=False)
    assert lookup.calls == 1
    assert shared == []


async def test_without_recheck_a_read_only_call_is_made_once() -> None:
    lookup, shared, _ = await look_up(["42"], recheck=False)
    assert lookup.calls == 1
    assert shared == []


async def test_a_call_the_bank_shares_a_result_of_is_not_made_twice() -> None:
    lookup, shared, _ = await look_up(["42", "42", "42"], rollouts=2)
    assert lookup.calls == 3  # the second rollout's call is not checked again
    assert shared == [("fact alpha: weighs 42 kg", 3, ["r0", "r0/recheck", "r1"])]
