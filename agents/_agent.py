"""``Agent``: an agent's configuration bound to its runtime dependencies
(backends, tools, routing policy, ledger, emitter); ``Agent.run`` runs one
rollout (``agents.loop``).

May import protocols, the runtime floor and ``agentrt.tools._tool``; never
aggregators or the roof.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._agent_loop import AgentRollout
from agentrt.agents._bindings import builtin_tool
from agentrt.agents._control import RolloutContext, RolloutControl, RolloutResult
from agentrt.agents._mcp_context import mcp_context
from agentrt.agents._recording import EventEmitter, EventSink
from agentrt.agents._spec_tools import BuiltinTool
from agentrt.agents._toolbox import Toolbox
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.memory._view import MemoryView
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._model_reference import pick_backend
from agentrt.runtime.routing._policies import FixedTierPolicy, RoutingPolicy
from agentrt.runtime.routing._routing_config import build_policy
from agentrt.runtime.routing._tiers import Tier, TierLadder
from agentrt.tools._tool import Tool
from agentrt.tools._tool_registry import ToolRegistry

if TYPE_CHECKING:  # the MCP SDK loads when a connection opens, not with the agents
    from agentrt.tools.mcp._servers import McpToolSource


@final
class Agent:
    """An agent ready to run rollouts; one instance serves any number of
    concurrent rollouts (each has its own router, context and signals).
    Every mismatch -- an unknown tool, a tier routed to a model no backend
    serves, two backends and no model -- is a ``ConfigError`` at
    construction, before any rollout starts."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        backends: Mapping[str, ModelBackend] | Sequence[ModelBackend],
        tools: Sequence[Tool] | ToolRegistry = (),
        ledger: BudgetLedger | None = None,
        events: EventEmitter | EventSink | None = None,
        policy: RoutingPolicy | None = None,
        prices: PriceTable | None = None,
        memory: MemoryView | None = None,
        mcp: McpToolSource | None = None,
    ) -> None:
        """``backends``: by name, or a list (named by ``backend.name``);
        ``tools``: the tool objects (or a registry), of which
        ``config.tools`` picks;
        ``ledger``: charged by every rollout unless ``run`` gets another
        (default: a fresh uncapped ledger per rollout); ``events``: an
        emitter shared with the rest of the run, or a sink; ``policy``:
        overrides ``config.routing`` (else ``config.model``, else the single
        backend's first model); ``prices``: for the
        routing ladder when there is no ledger (default: every model free);
        ``memory``: a run's shared memory bank: each step shows its top keys
        after the history and offers successful tool results to it;
        ``mcp``: the open MCP servers (``Runtime``'s, or a hierarchy's)
        that ``config.resources`` (shown at each step, current, after the
        history) and ``config.prompt`` (got at a rollout's first step,
        shown after the instructions) read from; a ``ConfigError`` when
        they name a server that is not open.
        """
        where = f"agent {config.name!r}"
        self.config = config
        self.backends = _by_name(backends, where)
        self.toolbox = Toolbox(
            _select(tools, config, where), finish_tool=config.finish_tool, where=where
        )
        self.ledger = ledger
        self.prices = ledger.prices if ledger is not None else prices or PriceTable.free()
        self._policy_given = policy is not None
        self.policy = policy if policy is not None else self._build_policy(where)
        key = "routing" if config.routing is not None else "model"
        self._routes = _routes(self.backends, self.policy, f"{where}.{key}")
        self.emitter = events if isinstance(events, EventEmitter) else EventEmitter(events)
        self.memory = memory
        self.resources, self.prompt = mcp_context(config, mcp, where=where)
        #: Whether ``RolloutResult.signals`` lists the signals a rollout
        #: raised.  When nothing reads them (this off, no ``stop_on``, a
        #: router that does not read them, no sink of ``SignalRaised``
        #: events), a rollout does not compute them.
        self.report_signals = True

    def bound(
        self,
        *,
        ledger: BudgetLedger | None,
        events: EventEmitter | EventSink | None,
        memory: MemoryView | None,
        report_signals: bool = True,
    ) -> Agent:
        """This agent with another ledger, emitter and memory view (the
        constructor's meanings), sharing its configuration, backends, tools
        and routing policy: what a ``Runtime`` builds and checks once per
        agent and binds to each run (``report_signals``: see the
        attribute; a run reads signals as events).  A ledger priced by another table than
        this agent's gets a routing policy of its own (as the constructor
        would build it)."""
        agent = object.__new__(Agent)
        agent.config = self.config
        agent.backends = self.backends
        agent._routes = self._routes
        agent.toolbox = self.toolbox
        agent.ledger = ledger
        agent.prices = ledger.prices if ledger is not None else self.prices
        agent._policy_given = self._policy_given
        agent.policy = (
            self.policy
            if self._policy_given or agent.prices is self.prices
            else agent._build_policy(f"agent {self.config.name!r}")
        )
        agent.emitter = events if isinstance(events, EventEmitter) else EventEmitter(events)
        agent.memory = memory
        agent.resources = self.resources
        agent.prompt = self.prompt
        agent.report_signals = report_signals
        return agent

    @property
    def name(self) -> str:
        return self.config.name

    def _build_policy(self, where: str) -> RoutingPolicy:
        if self.config.routing is not None:
            return build_policy(self.config.routing, self.prices)
        model = self.config.model
        if model is None:
            if len(self.backends) != 1:
                raise ConfigError(
                    f"{len(self.backends)} backends and neither `model` nor `routing` is set: "
                    "say which model serves the agent",
                    where=where,
                )
            (backend,) = self.backends.values()
            model = backend.models[0]
        ladder = TierLadder([Tier("default", model)], self.prices, degrade_below=None)
        return FixedTierPolicy(ladder, "default", name="single-model")

    @property
    def resumable(self) -> bool:
        """An agent's rollout can always go on from its committed steps
        (``RolloutContext.resume``), as a ``Hierarchy``'s can when its entry
        node is an agent."""
        return True

    def backend_for(self, model: str) -> ModelBackend:
        """The backend a tier's ``model`` reference means: the backend of
        that name, else the one serving a model of that name (checked when
        the agent was built)."""
        return self._routes[model][0]

    def served_model(self, model: str) -> str | None:
        """The model name to ask ``backend_for(model)`` for: ``model``
        itself, or when it names the backend, that backend's first model
        (``None``: the backend's own default)."""
        return self._routes[model][1]

    async def run(self, task: str, ctx: RolloutContext | None = None) -> RolloutResult:
        """Run one rollout of ``task`` to its end, as ``ctx`` says (see
        ``RolloutContext``; default: a run of its own, charged to the
        agent's ``ledger`` or a fresh uncapped one).

        ``ctx.resume``: continue a parent rollout (partial-rollout
        branching) after these, its first steps: they are replayed into the
        context, not re-run, so step k's request repeats the parent's prefix
        byte for byte (given the same task, seed and agent, and no
        compaction before step k); the trajectory records ``branch_step=k``
        and starts with the copied steps.  With ``ctx.restored`` they are
        this rollout's own steps, committed by an earlier incarnation of the
        run (a resumed run): charged to the ledger as spent and no
        ``branch_step`` is recorded; with ``ctx.charged`` they are already
        on the ledger (the rollout's actor crashed and was restarted in this
        process): counted in the trajectory's cost, not charged again.

        The rollout ends when a reply has no tool calls (its text is the
        answer), the finish tool is called, a signal in ``config.stop_on``
        fires, or a limit is reached (steps, rollout tokens, context, budget:
        ``exhausted``); a backend failure ends it ``failed``.  Those are data
        in the result, and a ``RolloutFinished`` event is emitted in every
        case, cancellation included.  Any other exception (a bug) emits a
        fatal ``ErrorRaised`` and propagates.  Cancelling the caller, or
        ``ctx.control.cancel(rollout_id)``, stops it at once, tool and model
        calls included.

        ``ctx.options``: the run's ``RunOptions`` (sampling over the
        agent's, the client's tools, the answer's JSON schema); a client
        tool named like one of the agent's or a bad schema is a
        ``ConfigError``."""
        if ctx is None:
            ctx = RolloutContext.new()
        ledger = ctx.ledger or self.ledger or BudgetLedger(ctx.rollout_id, prices=self.prices)
        rollout = AgentRollout(self, task=task, ctx=ctx, ledger=ledger)
        return await rollout.run(ctx.control or RolloutControl())


def _routes(
    backends: Mapping[str, ModelBackend], policy: RoutingPolicy, where: str
) -> dict[str, tuple[ModelBackend, str | None]]:
    """(backend, served model name) for each tier's model reference."""
    served = {name: backend.models for name, backend in backends.items()}
    routes: dict[str, tuple[ModelBackend, str | None]] = {}
    for tier in policy.ladder.tiers:
        name = pick_backend(served, tier.model, where=where)
        if name is None:
            known = sorted({*backends, *(m for models in served.values() for m in models)})
            raise ConfigError(
                f"tier {tier.name!r} routes to model {tier.model!r}, which no backend serves "
                f"or is named (backends and models: {', '.join(known)})",
                where=where,
            )
        backend = backends[name]
        if name == tier.model and tier.model not in backend.models:
            routes[tier.model] = (backend, backend.models[0] if backend.models else None)
        else:
            routes[tier.model] = (backend, tier.model)
    return routes


def _by_name(
    backends: Mapping[str, ModelBackend] | Sequence[ModelBackend], where: str
) -> dict[str, ModelBackend]:
    if isinstance(backends, Mapping):
        named = dict(backends)
    else:
        named = {}
        for backend in backends:
            if backend.name in named:
                raise ConfigError(f"two backends are named {backend.name!r}", where=where)
            named[backend.name] = backend
    if not named:
        raise ConfigError("an agent needs at least one model backend", where=where)
    return named


#: Built-ins an agent that names them gets even when the runtime offers none of
#: that name: each runs in the sandbox, in the rollout's workspace.
_ON_DEMAND: Final = ("shell", "editor", "python")


def _select(tools: Sequence[Tool] | ToolRegistry, config: AgentConfig, where: str) -> list[Tool]:
    if isinstance(tools, ToolRegistry):
        tools = [tools.get(name) for name in tools.names()]
    if config.tools is None:
        return list(tools)
    by_name = {t.spec.name: t for t in tools}
    for name in config.tools:  # the sandboxed built-ins need no [tools] entry
        if name not in by_name and name in _ON_DEMAND:
            by_name[name] = builtin_tool(
                BuiltinTool(builtin=name),
                base_dir=Path.cwd(),
                where=f"{where}.tools",
                tool_timeout_s=config.limits.tool_timeout_s,
            )
    missing = [n for n in config.tools if n not in by_name]
    if missing:
        raise ConfigError(
            f"unknown tools {missing}; available: {', '.join(sorted(by_name)) or 'none'}",
            where=f"{where}.tools",
        )
    return [by_name[n] for n in config.tools]


__all__ = ["Agent"]
