"""Delegation: units of a hierarchy (``Node``, ``AgentNode``) and sub-agents
called as tools (``SubAgentTool``), each call on its slice of the caller's
budget.

May import the runtime floor, the tools base and the rest of
``agentrt.agents``; never aggregators or the roof.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, Protocol, final

from agentrt.agents._agent import Agent
from agentrt.agents._control import RolloutContext, RolloutResult, Runnable
from agentrt.agents._spec import BudgetLimits, budget_slice
from agentrt.protocols._ids import call_rollout_id
from agentrt.protocols._run import Budget
from agentrt.protocols._tools import ToolSpec
from agentrt.protocols._trajectory import Trajectory
from agentrt.protocols._usage import Cost
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import pico_to_usd
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput

#: Characters of a callee's partial answer quoted when it did not finish.
PARTIAL_ANSWER_CHARS: Final = 600


class Node(Runnable, Protocol):
    """A unit of a hierarchy: an agent or a pipeline; ``run`` charges its
    rollout to ``ctx.ledger`` (default: a fresh, uncapped one)."""

    @property
    def description(self) -> str: ...

    @property
    def limits(self) -> BudgetLimits:
        """Its budget slice when called (``budget_share``, ``budget``)."""
        ...


@final
class RolloutScopes:
    """The contexts of the hierarchy's running agent rollouts, by rollout id
    (each with its ledger set)."""

    def __init__(self) -> None:
        self._contexts: dict[str, RolloutContext] = {}

    def enter(self, ctx: RolloutContext) -> None:
        if ctx.rollout_id in self._contexts:
            raise ValueError(f"rollout {ctx.rollout_id!r} is already running")
        self._contexts[ctx.rollout_id] = ctx

    def exit(self, rollout_id: str) -> None:
        self._contexts.pop(rollout_id, None)

    def context(self, rollout_id: str) -> RolloutContext | None:
        return self._contexts.get(rollout_id)

    def __len__(self) -> int:
        return len(self._contexts)


@final
class AgentNode:
    """An ``Agent`` as a node of a hierarchy.  While one of its rollouts
    runs, its ledger is recorded in the hierarchy's ``RolloutScopes``: that
    is how a ``SubAgentTool`` called from it finds the budget to slice."""

    def __init__(
        self, agent: Agent, *, description: str, limits: BudgetLimits, scopes: RolloutScopes
    ) -> None:
        self.agent = agent
        self._description = description
        self._limits = limits
        self._scopes = scopes

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def description(self) -> str:
        return self._description

    @property
    def limits(self) -> BudgetLimits:
        return self._limits

    async def run(self, task: str, ctx: RolloutContext | None = None) -> RolloutResult:
        """The agent's ``run``, its context recorded while it runs (so its
        sub-agent calls find their budget and ids)."""
        if ctx is None:
            ctx = RolloutContext.new()
        if ctx.ledger is None:
            ctx = ctx.replace(ledger=BudgetLedger(ctx.rollout_id, prices=self.agent.prices))
        self._scopes.enter(ctx)
        try:
            return await self.agent.run(task, ctx)
        finally:
            self._scopes.exit(ctx.rollout_id)


def left_budget(ledger: BudgetLedger) -> Budget:
    """What ``ledger`` has left (over its ancestors too), as the caps of a
    ``Budget``, not counting the calls in flight in its own subtree: so
    sub-agents called in parallel slice the same remainder, whichever
    reserves first."""
    snapshot = ledger.snapshot()
    room = ledger.headroom()
    return Budget(
        max_tokens=None if room.tokens is None else room.tokens + snapshot.reserved_tokens,
        max_usd=None if room.pico is None else pico_to_usd(room.pico + snapshot.reserved_pico),
        max_model_calls=None if room.calls is None else room.calls + snapshot.in_flight,
        max_wall_seconds=room.seconds,
    )


def sliced_ledger(
    parent: BudgetLedger, name: str, limits: BudgetLimits, *, share: float | None = None
) -> tuple[int, BudgetLedger]:
    """A child of ``parent`` capped at ``limits``' slice of what it has left
    (``left_budget``; ``share`` overrides ``limits.budget_share``), named
    ``<name>-<n>`` with ``n`` the tree's next call number; (n, the child)."""
    if share is not None:
        limits = limits.model_copy(update={"budget_share": share})
    number = parent.call_number()
    return number, parent.child(f"{name}-{number}", budget_slice(limits, left_budget(parent)))


_TASK_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The task, self-contained: the agent sees nothing else.",
            "minLength": 1,
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


@final
class SubAgentTool:
    """A node offered to a caller's model as a tool taking
    ``{"task": "..."}``.  Each call runs the node once, as a child rollout of
    the caller in the same run, charged to a child of the caller's ledger
    capped at ``budget_slice`` (``budget_share``, default the node's, of
    what the caller has left, tightened by its ``budget``).  It returns
    ``delegation_output``; a callee that runs out of its slice is an error
    result with the partial answer, and the caller carries on."""

    def __init__(
        self,
        node: Node,
        *,
        scopes: RolloutScopes,
        description: str | None = None,
        budget_share: float | None = None,
    ) -> None:
        self.node = node
        self._scopes = scopes
        self._share = budget_share
        self._spec = ToolSpec(
            name=node.name,
            description=description or node.description,
            parameters=dict(_TASK_SCHEMA),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        task = str(arguments.get("task", "")).strip()
        if not task:
            raise ToolError(f"sub-agent {self.node.name!r} needs a non-empty `task`")
        caller = self._scopes.context(context.rollout_id)
        if caller is None or caller.ledger is None:
            raise ToolError(
                f"sub-agent {self.node.name!r} was called from rollout {context.rollout_id!r}, "
                "which no hierarchy node runs, so it has no budget to draw on"
            )
        name = self.node.name
        number, ledger = sliced_ledger(caller.ledger, name, self.node.limits, share=self._share)
        try:
            result = await self.node.run(
                task, caller.call(call_rollout_id(caller.rollout_id, name, number), ledger)
            )
        finally:
            ledger.finish()
        return delegation_output(result.trajectory, ledger.spent)


def delegation_output(trajectory: Trajectory, spent: Cost) -> ToolOutput:
    """The callee's answer and a one-line account of its trajectory; an
    error output when it did not finish."""
    calls = Counter(r.name for step in trajectory.steps for r in step.tool_results)
    tools = ", ".join(f"{name} x{n}" for name, n in sorted(calls.items())) or "none"
    steps = len(trajectory.steps)
    account = (
        f"{trajectory.agent}: {trajectory.status} after {steps} step{'s' * (steps != 1)}; "
        f"tool calls: {tools}; {spent.usage.total_tokens} tokens, {spent.model_calls} model calls"
    )
    structured = {
        "agent": trajectory.agent,
        "rollout_id": trajectory.rollout_id,
        "status": trajectory.status,
        "stop_reason": trajectory.stop_reason,
        "steps": steps,
        "tool_calls": dict(calls),
        "tokens": spent.usage.total_tokens,
        "model_calls": spent.model_calls,
        "answer": trajectory.answer,
    }
    answer = (trajectory.answer or "").strip()
    if trajectory.status == "finished":
        text = f"{answer or '(no answer)'}\n\n[{account}]"
        return ToolOutput(content=[ToolContent(text=text)], structured=structured)
    partial = answer or _last_text(trajectory)
    if len(partial) > PARTIAL_ANSWER_CHARS:
        partial = partial[:PARTIAL_ANSWER_CHARS] + "..."
    text = (
        f"error: sub-agent {trajectory.agent!r} did not finish ({trajectory.stop_reason}). "
        f"[{account}]" + (f"\nPartial answer: {partial}" if partial else "")
    )
    return ToolOutput(content=[ToolContent(text=text)], is_error=True, structured=structured)


def _last_text(trajectory: Trajectory) -> str:
    """The last text the callee's model wrote (its partial answer)."""
    for step in reversed(trajectory.steps):
        if step.reply is not None and step.reply.choices:
            text = (step.reply.message.content or "").strip()
            if text:
                return text
    return ""


__all__ = [
    "PARTIAL_ANSWER_CHARS",
    "AgentNode",
    "Node",
    "RolloutScopes",
    "SubAgentTool",
    "delegation_output",
    "left_budget",
    "sliced_ledger",
]
