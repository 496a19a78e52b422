"""The engine's defaults and API shapes: backend slots (queued, never a cap
of 8), ``stream()`` as an async context manager, bad input refused before
any model call."""

from __future__ import annotations

import anyio
import pytest

import agentrt
from agentrt.agents import EventLog
from agentrt.protocols import (
    ModelReply,
    ModelRequest,
    RolloutQueued,
    RunFinished,
    RunStarted,
    ScalingSpec,
)
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend, ScriptedReply
from tests._support.backends import ForwardingBackend

pytestmark = pytest.mark.anyio


class Counting(ForwardingBackend[ScriptedBackend]):
    """A scripted backend that records the most calls it had in flight."""

    def __init__(self, reply: str | ScriptedReply, *, limit: int | None) -> None:
        super().__init__(
            ScriptedBackend(lambda _request: reply, name="counting"), opens_inner=False
        )
        self.limit = limit
        self.peak = 0
        self.running = 0
        self.requests = 0

    @property
    def max_concurrency(self) -> int | None:
        return self.limit

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests += 1
        reply = await self._tracked(request)
        return reply

    async def _tracked(self, request: ModelRequest) -> ModelReply:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            return await self.inner.complete(request)
        finally:
            self.running -= 1


async def test_a_backend_that_takes_one_call_queues_the_other_rollouts() -> None:
    backend = Counting(ScriptedReply(content="42", delay_s=0.05), limit=1)
    log = EventLog()
    async with agentrt.Runtime({"early_stop": False}, backends=[backend]) as rt:
        result = await rt.run("q", scaling=ScalingSpec(rollouts=3), events=log)
    assert result.answer == "42"
    assert backend.peak == 1
    queued = log.of_type(RolloutQueued)
    assert len(queued) == 2
    assert {q.backend for q in queued} == {"counting"}
    assert {q.limit for q in queued} == {1}


async def test_the_configured_concurrency_overrides_the_backend() -> None:
    backend = Counting(ScriptedReply(content="42", delay_s=0.05), limit=None)
    config = {"early_stop": False, "concurrency": {"counting": 2}}
    async with agentrt.Runtime(config, backends=[backend]) as rt:
        await rt.run("q", scaling=ScalingSpec(rollouts=5))
    assert backend.peak == 2


async def test_many_runs_are_not_capped_by_a_default_limit() -> None:
    """64 independent single-rollout runs on a backend with no limit all
    have their call in flight at once (the old default let 8 run)."""
    backend = Counting(ScriptedReply(content="ok", delay_s=0.2), limit=None)
    log = EventLog()
    async with agentrt.Runtime(backends=[backend]) as rt, anyio.create_task_group() as tg:
        for _ in range(64):
            tg.start_soon(lambda: rt.run("q", events=log))
    assert backend.peak == 64
    assert not log.of_type(RolloutQueued)
    assert len(log.of_type(RunFinished)) == 64


async def test_stream_is_an_async_context_manager_and_leaving_early_cancels() -> None:
    backend = Counting(ScriptedReply(content="b", delay_s=30), limit=None)
    async with agentrt.Runtime({"early_stop": False}, backends=[backend]) as rt:
        with anyio.fail_after(5):
            async with rt.stream("q", scaling=ScalingSpec(rollouts=2)) as events:
                async for event in events:
                    if isinstance(event, RunStarted):
                        break
        assert backend.inner.in_flight == 0


async def test_a_failing_stream_raises_the_error_not_a_group() -> None:
    backend = Counting("a", limit=None)
    async with agentrt.Runtime(backends=[backend]) as rt:
        with pytest.raises(ConfigError, match="unknown agent 'nope'"):
            async with rt.stream("q", agent="nope") as events:
                seen = [e async for e in events]
    assert seen == []
    assert backend.requests == 0


async def test_bad_arguments_fail_before_any_model_call() -> None:
    backend = Counting("a", limit=None)
    with pytest.raises(TypeError, match=r"tools\[0\] is a str, not a Tool"):
        agentrt.Runtime(backends=[backend], tools=["calculator"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="config must be a RuntimeConfig"):
        agentrt.Runtime(42)  # type: ignore[arg-type]
    async with agentrt.Runtime(backends=[backend]) as rt:
        with pytest.raises(TypeError, match="scaling must be a ScalingSpec"):
            await rt.run("q", scaling={"rollouts": 2})  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="v: Input should be less than or equal to 64"):
            await rt.run(
                "q", scaling=ScalingSpec(rollouts=2, aggregate="rtv", options={"v": 10**9})
            )
        with pytest.raises(ConfigError, match="unknown agent"):
            await rt.run("q", agent="nope")
    assert backend.requests == 0


async def test_an_agent_naming_an_unknown_tool_is_refused_on_entry() -> None:
    backend = Counting("a", limit=None)
    config = {"agents": {"solver": {"name": "solver", "tools": ["no_such_tool"]}}}
    with pytest.raises(ConfigError, match="no_such_tool"):
        async with agentrt.Runtime(config, backends=[backend]):
            pass
    assert backend.requests == 0


async def test_an_error_in_the_stream_block_arrives_as_itself() -> None:
    backend = Counting("a", limit=None)

    async def consume(rt: agentrt.Runtime) -> None:
        async with rt.stream("q") as events:
            async for _event in events:
                raise KeyError("mine")

    async with agentrt.Runtime(backends=[backend]) as rt:
        with pytest.raises(KeyError, match="mine"):
            await consume(rt)
