"""Agent hierarchies from specs: ``build_hierarchy`` builds the tree of nodes
into a ``Hierarchy``; ``used_servers`` says which MCP servers it needs.
Running rollouts as actors and holding MCP servers open is the engine's.

May import the runtime floor, tools and the rest of ``agentrt.agents``;
never aggregators or the roof.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, final

from agentrt.agents._agent import Agent
from agentrt.agents._bindings import resolve_binding
from agentrt.agents._control import RolloutContext, RolloutResult
from agentrt.agents._delegation import AgentNode, Node, RolloutScopes, SubAgentTool, sliced_ledger
from agentrt.agents._pipeline import PipelineNode, Stage
from agentrt.agents._recording import EventEmitter, EventSink
from agentrt.agents._spec import AgentSpec, McpTools
from agentrt.agents._spec_loader import SpecSet, UnitRef
from agentrt.protocols._run import RunOptions
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.tools._approval import ApprovalGate, ApprovalPolicy, PersonAsker
from agentrt.tools._tool import Tool
from agentrt.tools.mcp._mcp_config import McpServerConfig

if TYPE_CHECKING:  # the MCP SDK loads when a connection opens, not with the agents
    from agentrt.tools.mcp._servers import McpToolSource

Backends = Mapping[str, ModelBackend] | Sequence[ModelBackend]


@final
class Hierarchy:
    """The nodes built from a ``SpecSet``; ``run`` runs the entry node."""

    def __init__(
        self,
        specs: SpecSet,
        nodes: Mapping[UnitRef, Node],
        *,
        emitter: EventEmitter,
        prices: PriceTable,
    ) -> None:
        self.specs = specs
        self.nodes = dict(nodes)
        self.emitter = emitter
        self.prices = prices

    @property
    def root(self) -> Node:
        return self.nodes[self.specs.root]

    @property
    def resumable(self) -> bool:
        """Whether ``run`` can take up a rollout from its committed steps
        (``resume``): when the entry node is an agent, not a pipeline."""
        return isinstance(self.root, AgentNode)

    def node(self, name: str) -> Node:
        """The node called ``name`` (the first, if files repeat a name)."""
        for ref, node in self.nodes.items():
            if ref.name == name:
                return node
        raise KeyError(f"no node named {name!r}; nodes: {', '.join(r.name for r in self.nodes)}")

    async def run(self, task: str, ctx: RolloutContext | None = None) -> RolloutResult:
        """Run the entry node once on ``task``, charged to a child of
        ``ctx.ledger`` (default: a fresh uncapped one) capped at its slice.
        The trajectory's cost counts its own model calls; the ledger's
        ``spent`` counts the whole tree.  ``ctx.resume``/``restored``: as
        ``Agent.run``'s, for the entry agent's own steps (``resumable``
        says whether the entry node takes them).  ``ctx.options``: the
        run's ``RunOptions``, for the entry agent (a pipeline takes none:
        a ``ConfigError``)."""
        if ctx is None:
            ctx = RolloutContext.new()
        root = self.root
        if not isinstance(root, AgentNode):
            if ctx.options != RunOptions():
                raise ConfigError(
                    f"the entry node {root.name!r} is a pipeline: run options (sampling, "
                    "client tools, a response schema) apply to an agent",
                    where="options",
                )
            if ctx.resume is not None:
                raise ValueError(f"the entry node {root.name!r} is a pipeline: it cannot resume")
        parent = ctx.ledger or BudgetLedger(f"{root.name}-run", prices=self.prices)
        _, sliced = sliced_ledger(parent, root.name, root.limits)
        try:
            return await root.run(task, ctx.replace(ledger=sliced))
        finally:
            sliced.finish()


def build_hierarchy(
    specs: SpecSet,
    *,
    backends: Backends,
    events: EventEmitter | EventSink | None = None,
    default_model: str | None = None,
    prices: PriceTable | None = None,
    mcp: McpToolSource | None = None,
    ask: PersonAsker | None = None,
) -> Hierarchy:
    """Build every unit reachable from the entry, callees first: each agent
    gets its bound tools plus one ``SubAgentTool`` per sub-agent and shares
    the hierarchy's event emitter (one stream shows the whole tree); a
    pipeline binds its stages.  ``default_model`` serves agents that name
    none; ``mcp`` must be open when any agent uses MCP tools.  A tool or
    sub-agent whose binding sets ``approval`` is wrapped in an
    ``ApprovalGate`` that asks ``ask`` (None: nobody can approve, so its
    calls are declined).  Every
    configuration error (a binding that does not import, a model no backend
    serves, two tools of one name) is a ``ConfigError`` naming the spec
    file, line and key."""
    emitter = events if isinstance(events, EventEmitter) else EventEmitter(events)
    prices = prices or PriceTable.free()
    scopes = RolloutScopes()
    nodes: dict[UnitRef, Node] = {}
    for ref in specs.build_order():
        unit = specs.unit(ref)
        callees = specs.edges[ref]
        if isinstance(unit, AgentSpec):
            tools: list[Tool] = []
            for index, binding in enumerate(unit.tools):
                tools += _gated(
                    resolve_binding(
                        binding,
                        base_dir=specs.file(ref).base_dir,
                        where=specs.where(ref, ("tools", index)),
                        mcp=mcp,
                        tool_timeout_s=unit.limits.tool_timeout_s,
                    ),
                    binding.approval,
                    ask,
                )
            for sub, edge in zip(unit.sub_agents, callees, strict=True):
                tools += _gated(
                    [
                        SubAgentTool(
                            nodes[edge.target],
                            scopes=scopes,
                            description=edge.description,
                            budget_share=edge.budget_share,
                        )
                    ],
                    sub.approval,
                    ask,
                )
            config = unit.agent_config(ref.name, model=default_model)
            try:
                agent = Agent(
                    config,
                    backends=backends,
                    tools=tools,
                    events=emitter,
                    prices=prices,
                    mcp=mcp,
                )
            except ConfigError as exc:
                raise ConfigError(str(exc), where=specs.where(ref)) from exc
            nodes[ref] = AgentNode(
                agent,
                description=unit.description or _describe(ref.name, unit.instructions),
                limits=unit.limits,
                scopes=scopes,
            )
        else:
            stages = [
                Stage(stage, nodes[edge.target])
                for stage, edge in zip(unit.stages, callees, strict=True)
            ]
            nodes[ref] = PipelineNode(ref.name, unit, stages, emitter=emitter, prices=prices)
    return Hierarchy(specs, nodes, emitter=emitter, prices=prices)


def _gated(tools: list[Tool], policy: ApprovalPolicy | None, ask: PersonAsker | None) -> list[Tool]:
    """``tools``, each behind an ``ApprovalGate`` when ``policy`` is set."""
    if policy is None:
        return tools
    return [ApprovalGate(tool, policy, ask) for tool in tools]


def _describe(name: str, instructions: str) -> str:
    """A sub-agent's tool description when its spec gives none."""
    first = " ".join(instructions.split())
    if len(first) > 200:
        first = first[:197] + "..."
    return f"Delegate a task to the {name} agent and get its answer. Its instructions: {first}"


def used_servers(specs: SpecSet) -> dict[str, McpServerConfig]:
    """The MCP servers the units reachable from the entry use."""
    used: dict[str, McpServerConfig] = {}
    for ref in specs.build_order():
        unit = specs.unit(ref)
        if isinstance(unit, AgentSpec):
            for binding in unit.tools:
                if isinstance(binding, McpTools):
                    used[binding.server_name] = specs.servers[binding.server_name]
            for server in unit.mcp_context_servers():
                used[server] = specs.servers[server]
    return used


__all__ = ["Backends", "Hierarchy", "build_hierarchy", "used_servers"]
