"""Exactly-once bookkeeping across a crash, through the public API
(``Runtime.run(journal=True)`` and a checkpoint, as the daemon uses them).

The "store" here is a list of the events the run's sink took; the "crash"
is the run cancelled while a tool call runs, after which the sink records
nothing more.  The next incarnation resumes from a checkpoint built from
what was recorded, the way the daemon's store builds one:

- the step whose tool call the crash cut was not committed, but its model
  reply was journaled: the model is not asked again, the step is taken up
  with that reply, and its tool call keeps its idempotency key, so a tool
  that honours the key performs its side effect once;
- the run's cost counts every call either incarnation made, once;
- a call in flight at the crash (no settlement on record) is charged as
  reserved, and a call cap holds across the crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from agentrt import Runtime
from agentrt.protocols import (
    Budget,
    CallReserved,
    CallSettled,
    Event,
    ModelRequest,
    RolloutFinished,
    RolloutId,
    ScalingSpec,
    StepRecorded,
    SummaryWritten,
    ToolMessage,
    ToolSpec,
    TrajectorySummary,
    Usage,
)
from agentrt.protocols._ids import is_top_level
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._checkpoint import JournaledCall
from agentrt.runtime.engine._journal import EventJournal
from agentrt.runtime.engine._runtime import RolloutCheckpoint, RunCheckpoint
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput

pytestmark = pytest.mark.anyio

RUN = "run-once"


class Ledgerish:
    """A tool with a side effect (an append to ``effects``) that honours the
    idempotency key: a call whose key it has seen returns the first result
    without doing the effect again.  ``on_call`` runs after the effect."""

    def __init__(self) -> None:
        self.effects: list[str] = []
        self.keys: list[str] = []
        self.results: dict[str, str] = {}
        self.on_call: Any = None

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="pay", description="pays an invoice (a side effect)")

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        key = context.idempotency_key
        self.keys.append(key)
        if key not in self.results:
            self.effects.append(key)
            self.results[key] = f"paid #{len(self.effects)}"
        if self.on_call is not None:
            await self.on_call(len(self.keys))
        return ToolOutput.of_text(self.results[key])


def pay_three_times(request: ModelRequest) -> ReplySpec:
    done = sum(isinstance(m, ToolMessage) for m in request.messages)
    return ScriptedToolCall("pay", {"invoice": done}) if done < 3 else "all paid"


class Store:
    """The events a run's sink took, until the "crash"."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.dead = False

    async def __call__(self, event: Event) -> None:
        if not self.dead:
            self.events.append(event)
        else:  # the process is gone: a cancellation lands here at the latest
            await anyio.lowlevel.checkpoint()

    def checkpoint(self) -> RunCheckpoint:
        steps: dict[str, list[Any]] = {}
        finished: dict[str, RolloutFinished] = {}
        summaries: dict[str, TrajectorySummary] = {}
        for e in self.events:
            if isinstance(e, StepRecorded) and is_top_level(e.rollout_id):
                steps.setdefault(e.rollout_id, []).append(e.step)
            elif isinstance(e, RolloutFinished):
                finished[e.rollout_id] = e
            elif isinstance(e, SummaryWritten):
                summaries[e.summary.rollout_id] = e.summary
        settled = {e.call: e for e in self.events if isinstance(e, CallSettled)}
        calls = []
        for e in self.events:
            if isinstance(e, CallReserved):
                end = settled.get(e.call)
                calls.append(
                    JournaledCall(
                        request_id=e.request_id,
                        model=e.model,
                        reserved=_usage(e.prompt_tokens, e.completion_tokens),
                        settled=end is not None,
                        usage=end.usage if end is not None else None,
                        reply=end.reply if end is not None else None,
                    )
                )
        return RunCheckpoint(
            next_seq=max(e.seq for e in self.events) + 1,
            rollouts={
                RolloutId.parse(RUN, rid): RolloutCheckpoint(
                    steps=steps.get(rid, []),
                    finished=finished.get(rid),
                    summary=summaries.get(rid),
                )
                for rid in {*steps, *finished}
                if is_top_level(rid)
            },
            calls=calls,
        )


def _usage(prompt: int, completion: int) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


async def _crash_when(rt: Runtime, store: Store, tool: Ledgerish, at_call: int) -> None:
    """Run until the tool's ``at_call``-th call has done its effect, then
    "crash": cancel the run; the store records nothing more."""
    async with anyio.create_task_group() as tg:

        async def crash(n: int) -> None:
            if n == at_call:
                store.dead = True
                tg.cancel_scope.cancel()

        tool.on_call = crash

        async def run() -> None:
            await rt.run("pay three invoices", events=store, run_id=RUN, journal=True)
            pytest.fail("the run was crashed; it cannot return")

        tg.start_soon(run)
    tool.on_call = None


async def test_a_step_cut_by_a_crash_is_taken_up_with_its_reply_and_its_tool_runs_once() -> None:
    tool = Ledgerish()
    first = ScriptedBackend(pay_three_times)
    store = Store()
    async with Runtime(backends=[first], tools=[tool]) as rt:
        with anyio.fail_after(10):
            await _crash_when(rt, store, tool, at_call=2)
    committed = [e for e in store.events if isinstance(e, StepRecorded)]
    assert [e.step.index for e in committed] == [0]  # step 1's tool ran; its step did not commit
    assert len(first.requests) == 2
    assert tool.effects == tool.keys  # two calls, two effects so far

    second = ScriptedBackend(pay_three_times)
    async with Runtime(backends=[second], tools=[tool]) as rt:
        with anyio.fail_after(10):
            result = await rt.run(
                "pay three invoices",
                events=store.__class__(),
                run_id=RUN,
                checkpoint=store.checkpoint(),
                journal=True,
            )
    assert result.answer == "all paid"
    rollout = committed[0].rollout_id
    # Step 1 was not asked again: its journaled reply was taken up...
    asked = [r.request_id for r in second.requests]
    assert f"{rollout}-1" not in asked
    assert asked == [f"{rollout}-2", f"{rollout}-3"]
    # ...so its tool call kept its id and key, and the effect happened once.
    assert len(tool.keys) == 4
    assert tool.keys[1] == tool.keys[2] == f"{rollout}/1/{tool.keys[1].rsplit('/', 1)[1]}"
    assert len(tool.effects) == 3 == len(set(tool.effects))
    # Every call either incarnation made is in the cost once.
    assert result.cost.model_calls == len(first.requests) + len(second.requests) == 4


async def test_a_call_in_flight_at_a_crash_is_charged_and_the_cap_holds() -> None:
    tool = Ledgerish()
    gate = anyio.Event()

    def stall_second(request: ModelRequest) -> ReplySpec:
        if request.request_id is not None and request.request_id.endswith("-1"):
            store.dead = True  # the process dies with this call in flight
            gate.set()
            return ScriptedReply(content="never", delay_s=3600)
        return pay_three_times(request)

    first = ScriptedBackend(stall_second)
    store = Store()
    async with Runtime(backends=[first], tools=[tool]) as rt:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await rt.run(
                        "pay three invoices",
                        events=store,
                        run_id=RUN,
                        journal=True,
                        budget=Budget(max_model_calls=3),
                    )

                tg.start_soon(run)
                await gate.wait()
                tg.cancel_scope.cancel()
    reserved = [e for e in store.events if isinstance(e, CallReserved)]
    settled = [e for e in store.events if isinstance(e, CallSettled)]
    assert (len(reserved), len(settled)) == (2, 1)  # the second call was in flight

    second = ScriptedBackend(pay_three_times)
    async with Runtime(backends=[second], tools=[tool]) as rt:
        with anyio.fail_after(10):
            result = await rt.run(
                "pay three invoices",
                events=Store(),
                run_id=RUN,
                checkpoint=store.checkpoint(),
                journal=True,
                budget=Budget(max_model_calls=3),
            )
    # Two calls reached the first backend; the cap of 3 leaves one more.
    assert len(first.requests) == 2
    assert len(second.requests) == 1
    assert result.cost.model_calls == 3
    assert result.status != "succeeded" or result.answer is None


async def test_journal_needs_an_events_sink() -> None:
    async with Runtime(backends=[ScriptedBackend(pay_three_times)], tools=[Ledgerish()]) as rt:
        with pytest.raises(ValueError, match="journal=True needs an events sink"):
            await rt.run("x", journal=True)


async def test_without_a_journal_nothing_is_journaled() -> None:
    store = Store()
    async with Runtime(backends=[ScriptedBackend(pay_three_times)], tools=[Ledgerish()]) as rt:
        result = await rt.run("pay", events=store, scaling=ScalingSpec(rollouts=1))
    assert result.answer == "all paid"
    assert not [e for e in store.events if isinstance(e, CallReserved | CallSettled)]


# -- aggregation: judge verdicts are replayed, not asked again ----------------------


def is_judging(request: ModelRequest) -> bool:
    """A judge call: it offers only the verdict tool (agent steps offer theirs)."""
    return [t.name for t in request.tools] == ["verdict"]


def answer_by_rollout(request: ModelRequest) -> ReplySpec:
    """Agent steps: rollout i answers i.  Judge calls: always prefer the
    first candidate."""
    if is_judging(request):
        return "Both are plausible. VERDICT: 1"
    rid = request.request_id or ""
    if sum(isinstance(m, ToolMessage) for m in request.messages) == 0:
        return ScriptedToolCall("pay", {"invoice": 0})
    return f"ANSWER: {rid.rsplit('-r', 1)[1].split('-')[0]}"


def judge_calls(backend: ScriptedBackend) -> int:
    return sum(is_judging(r) for r in backend.requests)


async def test_judge_calls_settled_before_a_crash_are_not_made_again() -> None:
    scaling = ScalingSpec(rollouts=4, aggregate="rtv", options={"g": 2, "v": 1})
    reference = ScriptedBackend(answer_by_rollout)
    async with Runtime(backends=[reference], tools=[Ledgerish()]) as rt:
        expected = await rt.run("pick one", scaling=scaling, run_id=RUN)
    total = judge_calls(reference)
    assert total == 3, total  # two first-round matches, then the final

    store = Store()
    seen = 0

    def crash_on_the_final(request: ModelRequest) -> ReplySpec:
        nonlocal seen
        if is_judging(request):
            seen += 1
            if seen == total:  # the final's judge call: the process dies
                store.dead = True
                return ScriptedReply(content="never", delay_s=3600)
        return answer_by_rollout(request)

    first = ScriptedBackend(crash_on_the_final)
    async with Runtime(backends=[first], tools=[Ledgerish()]) as rt:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await rt.run(
                        "pick one", scaling=scaling, events=store, run_id=RUN, journal=True
                    )

                tg.start_soon(run)
                with anyio.fail_after(10):
                    while not store.dead:  # noqa: ASYNC110 - the backend sets it
                        await anyio.sleep(0.005)
                tg.cancel_scope.cancel()
    # The first round's verdicts were on record; the final's call was in
    # flight (the backend took it, the journal has no end for it).
    settled_judging = judge_calls(first) - 1
    assert settled_judging == total - 1

    second = ScriptedBackend(answer_by_rollout)
    later = Store()
    async with Runtime(backends=[second], tools=[Ledgerish()]) as rt:
        with anyio.fail_after(10):
            result = await rt.run(
                "pick one",
                scaling=scaling,
                events=later,
                run_id=RUN,
                checkpoint=store.checkpoint(),
                journal=True,
            )
    assert result.answer == expected.answer
    # The verdict on record was taken up; only the rest were asked.
    assert judge_calls(second) == total - settled_judging
    assert all(is_judging(r) for r in second.requests)  # no agent step asked again


async def test_the_warm_up_is_not_repeated_for_a_resumed_run() -> None:
    tool = Ledgerish()
    first = ScriptedBackend(pay_three_times)
    store = Store()
    scaling = ScalingSpec(rollouts=2, aggregate="majority")
    config = {"warm_prefix": True}
    async with Runtime(config, backends=[first], tools=[tool]) as rt:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def crash(n: int) -> None:
                    if n == 3:  # both rollouts made their first step
                        store.dead = True
                        tg.cancel_scope.cancel()

                tool.on_call = crash

                async def run() -> None:
                    await rt.run("pay", scaling=scaling, events=store, run_id=RUN, journal=True)

                tg.start_soon(run)
    assert [r.request_id for r in first.requests].count(f"{RUN}-warm") == 1

    second = ScriptedBackend(pay_three_times)
    tool.on_call = None
    async with Runtime(config, backends=[second], tools=[tool]) as rt:
        with anyio.fail_after(10):
            result = await rt.run(
                "pay",
                scaling=scaling,
                events=Store(),
                run_id=RUN,
                checkpoint=store.checkpoint(),
                journal=True,
            )
    assert result.answer == "all paid"
    assert f"{RUN}-warm" not in [r.request_id for r in second.requests]
    assert second.requests  # the rollouts went on


async def test_call_handles_are_unique_across_a_run_s_journals() -> None:
    """Two journals of one run (a crashed incarnation and its resumed one,
    or two Ray workers' rollouts) never hand out the same call handle: a
    resumed run's journal matches each ``CallSettled`` to its
    ``CallReserved`` by handle."""
    sent: list[CallReserved] = []

    async def emit(event: Any) -> None:
        sent.append(event)

    ledger = BudgetLedger(RUN)
    journals = [EventJournal(emit, RUN), EventJournal(emit, RUN)]
    handles = [
        await journal.reserved(ledger.reserve("m", 10, 10), f"{RUN}-r0-{i}")
        for journal in journals
        for i in range(50)
    ]
    assert len(set(handles)) == 100
    assert [e.call for e in sent] == handles
