"""What a run leaves behind once it returns: no actor of its own (its rollout
actors live under the Runtime's one rollout supervisor and end with it) and
no reference cycle (a finished run's objects are freed by reference
counting, not left for the cyclic garbage collector)."""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from agentrt import Runtime
from agentrt.protocols import ScalingSpec
from agentrt.runtime.kernel._address import ActorAddress
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools import tool

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]

#: Types whose objects a finished run must not leave in a reference cycle.
ENGINE_TYPES = frozenset(
    {
        "RunExecution",
        "Agent",
        "Rollout",
        "RolloutActor",
        "ActorCell",
        "ActorContext",
        "Mailbox",
        "Supervisor",
        "TaskHandle",
    }
)


def script() -> list[ReplySpec]:
    """Two tool calls, then the answer; repeated for every rollout."""
    return [
        ScriptedToolCall("add", {"a": 1, "b": 1}),
        ScriptedToolCall("add", {"a": 2, "b": 2}),
        "4",
    ]


async def test_a_finished_run_leaves_no_engine_object_in_a_reference_cycle() -> None:
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    backend = ScriptedBackend(script(), on_exhausted="cycle")
    async with Runtime(backends=[backend], tools=[tool(add)]) as rt:
        assert (await rt.run("add")).answer == "4"  # first-call caches, lazy imports
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(3):
                result = await rt.run("add")
                assert result.answer == "4"
            del result
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            found = Counter(type(o).__name__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            if was_enabled:
                gc.enable()
    left = {name: n for name, n in found.items() if name in ENGINE_TYPES}
    assert not left, f"in reference cycles after 3 runs: {left}; all garbage: {found}"
    # What remains is the budget ledgers' parent <-> child links (a few
    # objects a run); before, a run left ~130 objects in cycles.
    assert sum(found.values()) <= 3 * 20, found


async def test_rollout_actors_live_under_the_runtimes_supervisor_and_end_with_their_run() -> None:
    seen: list[tuple[ActorAddress, ...]] = []
    rt_ref: list[Runtime] = []

    async def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append(rt_ref[0].rollout_supervisor.children)
        return a + b

    backend = ScriptedBackend(script(), on_exhausted="cycle")
    async with Runtime(backends=[backend], tools=[tool(add)]) as rt:
        rt_ref.append(rt)
        assert rt.rollout_supervisor.children == ()
        first = await rt.run("add", scaling=ScalingSpec(rollouts=2))
        second = await rt.run("add")
        assert first.answer == second.answer == "4"
        assert rt.rollout_supervisor.children == ()  # every rollout actor ended with its run
    names = {address.name for children in seen for address in children}
    runs = {name.split("-", 1)[0] for name in names}
    assert len(runs) == 2, names  # each actor named after its run
    assert {name.split("-", 1)[1] for name in names} == {"r0", "r1"}
    assert any(len(children) == 2 for children in seen)  # the first run's two, side by side
