"""A named agent is built and checked once per Runtime and bound to each run
(``Runtime.runner``, ``Agent.bound``); it is built again when the Runtime's
tools change (an optional MCP server joining replaces ``Runtime.tools``)."""

from __future__ import annotations

import pytest

from agentrt import Runtime
from agentrt.agents import Agent, AgentConfig, EventEmitter
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools import tool

pytestmark = pytest.mark.anyio


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def bound(rt: Runtime, ledger: BudgetLedger) -> Agent:
    agent = rt.runner("solver", EventEmitter(), ledger, None)
    assert isinstance(agent, Agent)
    return agent


async def test_runs_of_a_named_agent_share_its_tools_and_routing_not_their_ledgers() -> None:
    backend = ScriptedBackend(
        [ScriptedToolCall("add", {"a": 1, "b": 2}), "3"], on_exhausted="cycle"
    )
    agents = {"solver": AgentConfig(name="solver", tools=["add"])}
    async with Runtime(backends=[backend], tools=[tool(add)], agents=agents) as rt:
        one, two = BudgetLedger("one", prices=rt.prices), BudgetLedger("two", prices=rt.prices)
        first, second = bound(rt, one), bound(rt, two)
        assert first is not second
        assert first.toolbox is second.toolbox
        assert first.policy is second.policy
        assert (first.ledger, second.ledger) == (one, two)
        assert first.emitter is not second.emitter
        # A ledger on another price table gets a routing policy built on it.
        other = bound(rt, BudgetLedger("other", prices=PriceTable.free()))
        assert other.toolbox is first.toolbox
        assert other.policy is not first.policy
        assert other.prices is not rt.prices
        for _ in range(2):
            assert (await rt.run("1 + 2?", agent="solver")).answer == "3"


async def test_a_named_agent_is_built_again_when_the_runtimes_tools_change() -> None:
    script: list[ReplySpec] = [ScriptedToolCall("mul", {"a": 2, "b": 3}), "6"]
    backend = ScriptedBackend(script, on_exhausted="cycle")
    agents = {"solver": AgentConfig(name="solver")}  # every tool the Runtime has
    async with Runtime(backends=[backend], tools=[tool(add)], agents=agents) as rt:
        ledger = BudgetLedger("run", prices=rt.prices)
        assert bound(rt, ledger).toolbox.names == ["add"]
        # What ``_join_mcp_tools`` does when an optional server's tools arrive.
        rt.tools = [*rt.tools, tool(mul)]
        assert bound(rt, ledger).toolbox.names == ["add", "mul"]
        result = await rt.run("2 * 3?", agent="solver")
    assert result.answer == "6"
    (summary,) = result.summaries
    assert not summary.failure_modes  # mul was known: no "unknown tool" error


async def test_an_aggregators_configuration_is_validated_once_per_options_in_use() -> None:
    """The configuration's scaling is reused by every run, and so is its
    validated aggregator configuration; changed options are validated again,
    and bad ones still fail naming the key."""
    from agentrt import RuntimeConfig
    from agentrt.protocols import ScalingSpec
    from agentrt.runtime.kernel._errors import ConfigError

    backend = ScriptedBackend(["42"], on_exhausted="repeat_last")
    config = RuntimeConfig.model_validate({"rollouts": 3, "aggregate": "majority"})
    async with Runtime(config, backends=[backend]) as rt:
        first, second = (await rt.run("q"), await rt.run("q"))
        assert (first.answer, second.answer) == ("42", "42")
        spec = rt._default_scaling()
        assert spec is rt._default_scaling()
        validated = rt.aggregator_config(spec)
        assert rt.aggregator_config(spec) is validated
        options: dict[str, object] = {"g": 2}
        changed = ScalingSpec(rollouts=3, aggregate="rtv", options=options)
        assert rt.aggregator_config(changed).model_dump()["g"] == 2
        options["g"] = 3  # the same dict, changed: validated again
        assert rt.aggregator_config(changed).model_dump()["g"] == 3
        options["g"] = "many"
        with pytest.raises(ConfigError, match=r"scaling\.aggregate \(rtv\).*g"):
            rt.aggregator_config(changed)
