"""``Runtime``: the one executor, and the synchronous ``run``.

Owns what a ``Runtime`` holds open for its runs and shares between them:
the model backends (opened once), the actor system every run's actor tree
lives in, the agents (YAML specs loaded and checked once, on entry), the
MCP servers those agents use (one connection per server, opened once), the
memory bank and one slot limiter per backend.  A run itself is a
``RunExecution`` (``agentrt.runtime.engine._run_execution``).  Must not know which
entry point (CLI, daemon, MCP, embedding) uses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, final

import anyio
import msgspec
from anyio.abc import TaskStatus

from agentrt.agents._agent import Agent
from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._context import fit_context
from agentrt.agents._delegation import AgentNode
from agentrt.agents._hierarchy import Hierarchy, build_hierarchy, used_servers
from agentrt.agents._recording import EventEmitter, EventSink, stream_sink
from agentrt.agents._spec_loader import SpecSet, load_spec
from agentrt.agents._token_stream import TokenPacer
from agentrt.aggregators._aggregator import (
    AGGREGATION_MIN_TOKENS,
    AggregationContext,
    Aggregator,
)
from agentrt.aggregators._compose import AggregatorConfig, build_aggregator, parse_config
from agentrt.aggregators._judge import Judge
from agentrt.aggregators._pdr import ParallelDistillRefine
from agentrt.aggregators._vote import voted_answer
from agentrt.protocols._events import ElicitationRequested, Event, McpAuthorizationRequired
from agentrt.protocols._ids import new_run_id
from agentrt.protocols._run import Budget, RunOptions, RunResult, ScalingSpec
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.config._runtime_config import RuntimeConfig
from agentrt.runtime.engine._checkpoint import RolloutCheckpoint, RunCheckpoint
from agentrt.runtime.engine._mcp_requests import ElicitationHandler, RunRequests
from agentrt.runtime.engine._run_execution import RunExecution, spawn_rollout_supervisor
from agentrt.runtime.engine._run_plan import RunServices, chosen_normalizer, plan_run
from agentrt.runtime.kernel._actor_spec import SupervisorSpec
from agentrt.runtime.kernel._errors import ConfigError, UserError
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.memory._bank import MemoryBank
from agentrt.runtime.memory._view import MemoryView
from agentrt.runtime.models._backend import ModelBackend, backend_concurrency
from agentrt.runtime.models._model_reference import canonical_reference, pick_backend
from agentrt.runtime.models._model_registry import ModelRegistry
from agentrt.runtime.models._prompt_estimate import TokenCounter, calibrate_chars_per_token
from agentrt.runtime.models.managed._managed_actor import ManagedServerHandle, spawn_managed_server
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.observe._tracing_config import open_tracer
from agentrt.runtime.placement._local import LocalPlacement
from agentrt.runtime.placement._open import open_placement
from agentrt.runtime.placement._placement import Placement
from agentrt.tools._approval import ApprovalGate
from agentrt.tools._tool import Tool
from agentrt.tools.mcp._mcp_config import McpServerConfig
from agentrt.tools.sandbox._workspaces import keep_run, release_run

if TYPE_CHECKING:  # the MCP SDK loads when a Runtime opens its first server
    from agentrt.runtime.observe._tracing import RunTracer
    from agentrt.tools._tool import ElicitationReply
    from agentrt.tools.mcp._server_actor import McpServerStatus
    from agentrt.tools.mcp._servers import McpServers

log = get_logger(__name__)

AgentRef = str | AgentConfig | Agent | Hierarchy | None
"""An agent by name (``RuntimeConfig.agents``), a configuration, or built."""

_State = Literal["unopened", "open", "closed"]


@final
class Runtime:
    """Runs tasks with inference-time scaling::

        async with agentrt.Runtime(config) as rt:
            result = await rt.run(task, agent="solver", scaling=ScalingSpec(rollouts=4))
            async with rt.stream(task) as events:
                async for event in events:
                    ...

    ``config``: a ``RuntimeConfig`` (or its mapping); ``backends``: model
    backends as objects (owned by the caller, not opened or closed here), in
    addition to ``config.models`` (created and opened on entry; when neither
    is given, the embedded model); ``tools``: tool objects agents pick from
    by name; ``agents``: agents as loaded specs or configurations, in
    addition to ``config.agents``; ``judge``: the judge RTV and best-of-N use
    (default: a ``ModelJudge`` on the agent's backend); ``prices``: what
    models cost, for ``Budget.max_usd`` and the costs reported (default:
    ``config.prices``, then the genai-prices database; a model priced
    nowhere costs nothing unless a ``max_usd`` cap must count it, which
    is then an error naming it); ``registry``: a validated models section to create
    backends from, instead of ``config.models``; ``on_elicitation``: asked
    when an MCP server whose policy is ``elicitation.mode: ask`` has a
    question for the person behind a run (an async callable taking an
    ``ElicitationQuestion`` and returning an ``ElicitationReply``; or
    ``"events"``: the question becomes the run's ``ElicitationRequested``
    event, answered with ``answer_elicitation``; None: such questions are
    declined); it is also asked to approve each call of a tool under
    ``config.approvals`` (``mode`` ``approval``; a denial, or no answer by
    the question's ``expires_at``, is the tool's result).  A server's
    sampling requests (``sampling.mode: allow``) are served by these
    backends and charged to the run whose tool call asked.
    ``on_mcp_authorization``: shown the URL where a person approves an
    OAuth-protected MCP server's access (``[mcp.NAME.auth]``, see
    docs/mcp-auth.md); it must return promptly (the approval arrives as the
    browser's redirect to agentrt's loopback listener).

    ``config.placement`` says where rollouts run: here, or on rollout
    workers of a Ray cluster, each of which opens its own backends, MCP
    servers and agents from ``config``, ``tools`` and ``agents``.

    Raises ``ConfigError`` on entry for an agent spec that does not load, an
    agent naming a tool or MCP server nobody provides, a bad model section,
    or a Ray placement that cannot start (``open_placement``): before any
    model call.  A required MCP server (``required``, the default) that
    cannot start fails the entry with ``McpServerError`` saying why (its
    stderr quoted); an optional one starts in the background and does not
    delay it."""

    def __init__(
        self,
        config: RuntimeConfig | Mapping[str, Any] | None = None,
        *,
        backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
        tools: Sequence[Tool] = (),
        agents: Mapping[str, SpecSet | AgentConfig] | None = None,
        judge: Judge | None = None,
        prices: PriceTable | None = None,
        registry: ModelRegistry | None = None,
        on_elicitation: ElicitationHandler | None = None,
        on_mcp_authorization: Callable[[McpAuthorizationRequired], Awaitable[None]] | None = None,
    ) -> None:
        if config is None or isinstance(config, RuntimeConfig):
            self.config = config or RuntimeConfig()
        elif isinstance(config, Mapping):
            self.config = RuntimeConfig.model_validate(dict(config))
        else:
            raise TypeError(
                f"config must be a RuntimeConfig or a mapping, not {type(config).__name__}"
            )
        given = dict(backends) if isinstance(backends, Mapping) else {b.name: b for b in backends}
        for name, backend in given.items():
            if not isinstance(backend, ModelBackend):
                raise TypeError(f"backends[{name!r}] is a {type(backend).__name__}, not a backend")
        for index, tool in enumerate(tools):
            if not isinstance(tool, Tool):
                raise TypeError(
                    f"tools[{index}] is a {type(tool).__name__}, not a Tool "
                    "(wrap a Python function with agentrt.tools.function_tool)"
                )
        self._given = given
        self.on_elicitation = on_elicitation
        self.on_mcp_authorization = on_mcp_authorization
        self._runs: dict[str, RunExecution] = {}
        """The runs executing now, by id (what MCP servers' requests reach)."""
        self._run_requests: RunRequests | None = None
        self.tools = list(tools)
        self._given_tools = list(tools)
        self._offered: tuple[str, ...] = ()
        """The MCP tools in ``tools`` (their names), as last listed."""
        self._agents_given = dict(agents or {})
        self._named_agents: dict[str, tuple[object, list[Tool], Agent]] = {}
        """Named agents as built (``runner``): by name, with the entry and
        the ``tools`` list they were built from."""
        self._scaling: ScalingSpec | None = None  # the configuration's, built once
        # Per aggregator name: the options dict last validated, a copy of
        # it, and its configuration (``aggregator_config``).
        self._aggregator_configs: dict[
            str, tuple[dict[str, Any], dict[str, Any], AggregatorConfig]
        ] = {}
        self.judge = judge
        self.prices = (
            prices
            if prices is not None
            else PriceTable(
                models=self.config.prices,
                database=self.config.price_database,
                unpriced_free_uncapped=True,
            )
        )
        self.tracer: RunTracer | None = None
        self.chars_per_token: dict[str, float] = {}
        """Per model: characters per token measured with its backend's own
        tokenizer on entry (agents' context budgets use it); absent: chars/3."""
        self._windows: dict[str, int] = {}
        """Exports runs as OpenTelemetry traces (``config.tracing``), open while this is."""
        self._registry = registry
        self.backends: dict[str, ModelBackend] = {}
        self.specs: dict[str, SpecSet] = {}
        """Every agent given as a spec, by name, loaded on entry."""
        self.bank: MemoryBank | None = None
        self.default_model: str | None = None
        """The model agents that name none use (``config.models.default``)."""
        self._mcp: McpServers | None = None
        self.managed: dict[str, ManagedServerHandle] = {}
        """Model servers this Runtime runs (``managed`` in ``[models]``), by backend."""
        self._slots: dict[str, anyio.CapacityLimiter | None] = {}
        self.placement: Placement = LocalPlacement()
        """Where runs' rollouts run (``config.placement``), open while this is."""
        self._stack = AsyncExitStack()
        self._state: _State = "unopened"

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "unopened":
            raise RuntimeError("Cannot reopen a Runtime once it has been opened or closed.")
        self._state = "open"
        try:
            await self._open()
        except BaseException:
            self._state = "closed"
            await self._stack.aclose()
            raise
        return self

    async def _open(self) -> None:
        given_tools = list(self.tools)
        self._load_specs()
        tracer = open_tracer(self.config.tracing)
        if tracer is not None:
            self.tracer = tracer
            # Closed last, off the event loop: its final flush may wait on the receiver.
            self._stack.push_async_callback(anyio.to_thread.run_sync, tracer.close)
        self._closing = anyio.Event()
        host = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(self._closing.set)  # before the group exits (LIFO)
        self.system: ActorSystem = await host.start(self._host_actors)
        services = await self.system.spawn_supervisor(SupervisorSpec("services"))
        # Every run's rollout actors live under it (``RunExecution``).
        self.rollout_supervisor = await spawn_rollout_supervisor(
            self.system, self.config.rollout_restarts
        )
        if self._registry is not None or self.config.models.backends or not self._given:
            registry = self._registry or ModelRegistry(self.config.models)
            for name, managed in registry.managed_servers().items():
                # A model server agentrt runs: supervised, healthy before use.
                server = await spawn_managed_server(self.system, managed, parent=services)
                self._stack.push_async_callback(server.stop)
                self.managed[name] = server
            for name in registry.backend_names():
                backend = registry.create(name)
                self.backends[name] = await self._stack.enter_async_context(backend)
            # A model name when it leads to the default backend alone, else the
            # backend's name (another backend serves the same model name).
            # Again now that every backend knows its models (an SGLang one reads
            # its name from the server), so a name two serve is caught.
            served = {name: backend.models for name, backend in self.backends.items()}
            chosen = pick_backend(served, registry.default, where="models.default")
            self.default_model = canonical_reference(served, chosen or registry.resolve()[0])
        await self._measure_tokenizers()
        self.backends.update(self._given)
        if self.default_model is None and self.backends:
            first = next(iter(self.backends.values()))
            self.default_model = first.models[0] if first.models else None
        for name, backend in self.backends.items():
            limit = self.config.concurrency.get(name) or backend_concurrency(backend)
            self._slots[name] = anyio.CapacityLimiter(limit) if limit is not None else None
        # What runs ask of the world: a person (approvals, MCP questions), models.
        requests = RunRequests(
            self._runs, self.backends, lambda: self.default_model, self.on_elicitation
        )
        self._run_requests = requests
        self.tools = self._gated(self._given_tools)
        servers = self._servers()
        if servers:
            # One supervised actor per MCP server connection, shared by every run.
            from agentrt.tools.mcp._servers import spawn_mcp_servers

            mcp = await spawn_mcp_servers(
                self.system,
                list(servers.values()),
                parent=services,
                hooks=dataclasses.replace(requests.hooks(), authorize=self.on_mcp_authorization),
                # A required server that cannot start fails the open with its reason.
                require_all=True,
            )
            self._stack.push_async_callback(mcp.stop)
            self._mcp = mcp
            # Inline agents name MCP tools as ``<server>__<tool>`` in ``tools``.
            self._join_mcp_tools()
        self._check_approvals()
        if self.config.memory:
            bank = MemoryBank(self.config.memory_path)
            self.bank = await self._stack.enter_async_context(bank)
        self._check_agents()
        self.placement = await self._stack.enter_async_context(
            open_placement(
                self.config,
                tools=given_tools,
                agents=self._agents_given,
                prices=self.prices,
                backends=self._given,
                bank=self.bank,
            )
        )
        open_mcp = self._mcp
        self.run_services = RunServices(
            config=self.config,
            backends=self.backends,
            placement=self.placement,
            system=self.system,
            supervisor=self.rollout_supervisor,
            slot=self.slot,
            rollout_finished=(
                open_mcp.rollout_finished if open_mcp is not None and open_mcp.per_rollout else None
            ),
        )
        """What runs use of this Runtime (``RunExecution``)."""

    async def _measure_tokenizers(self) -> None:
        """Calibrate each configured backend's characters per token with its
        own tokenizer (llama.cpp's, a server's ``/tokenize``), once, and note
        its context window; a backend without one keeps the default."""

        async def measure(backend: TokenCounter, models: list[str]) -> None:
            try:
                ratio = await calibrate_chars_per_token(backend, timeout_s=2.0)
            except Exception as error:  # no tokenizer there (e.g. a plain OpenAI API)
                log.debug("no tokenizer to calibrate with", models=models, error=repr(error))
                return
            self.chars_per_token.update(dict.fromkeys(models, ratio))

        async with anyio.create_task_group() as tg:
            for backend in self.backends.values():
                window = getattr(backend, "context_window", None)
                if isinstance(window, int):
                    self._windows.update(dict.fromkeys(backend.models, window))
                if isinstance(backend, TokenCounter):
                    tg.start_soon(measure, backend, backend.models)

    async def _host_actors(self, *, task_status: TaskStatus[ActorSystem]) -> None:
        """The actor system, in a task of its own behind a shield: cancelling
        the code that opened the Runtime does not reach the rollout actors
        directly; each run stops its own rollouts when it is cancelled (so
        the daemon can checkpoint a run before its rollouts see a thing)."""
        with anyio.CancelScope(shield=True):
            async with ActorSystem(system_id="agentrt") as system:
                task_status.started(system)
                await self._closing.wait()

    def _load_specs(self) -> None:
        for name, entry in self.config.agents.items():
            if isinstance(entry, str):
                self.specs[name] = load_spec(entry, servers=self.config.mcp)
        for name, given in self._agents_given.items():
            if isinstance(given, SpecSet):
                self.specs[name] = given

    def _servers(self) -> dict[str, McpServerConfig]:
        """The MCP servers of ``config.mcp`` and every spec's, each once (a
        name used twice must mean the same server)."""
        servers: dict[str, McpServerConfig] = dict(self.config.mcp)
        for agent, specs in self.specs.items():
            for name, server in used_servers(specs).items():
                if name in servers and servers[name] != server:
                    raise ConfigError(
                        f"MCP server {name!r} is configured differently by two agents",
                        where=f"agents.{agent}",
                    )
                servers[name] = server
        return servers

    def _join_mcp_tools(self) -> None:
        """``tools``: the tools given, then every MCP tool as listed now (an
        optional server that connected late brings its tools)."""
        assert self._mcp is not None
        offered = self._mcp.tools()
        names = tuple(t.spec.name for t in offered)
        if names != self._offered:
            self.tools = self._gated([*self._given_tools, *offered])
            self._offered = names

    def _gated(self, tools: Sequence[Tool]) -> list[Tool]:
        """``tools``, each one under ``config.approvals`` behind an
        ``ApprovalGate`` that asks the person behind the run."""
        approvals = self.config.approvals
        if not approvals:
            return list(tools)
        assert self._run_requests is not None
        ask = self._run_requests.asker()
        return [
            ApprovalGate(tool, approvals[tool.spec.name], ask)
            if tool.spec.name in approvals
            else tool
            for tool in tools
        ]

    def _check_approvals(self) -> None:
        """A tool under ``approvals`` that no one offers is a typo: an error
        (an MCP server's tool may come later, when its server connects)."""
        names = {tool.spec.name for tool in self.tools}
        servers = set(self._servers())
        for name in self.config.approvals:
            if name not in names and name.partition("__")[0] not in servers:
                known = ", ".join(sorted(names)) or "none"
                raise ConfigError(
                    f"no tool is named {name!r}; the tools are: {known}",
                    where=f"approvals.{name}",
                )

    def _pending_mcp_tool(self, names: Iterable[str]) -> tuple[str, str] | None:
        """The first of ``names`` that belongs to an optional MCP server that
        has not listed its tools yet, with that server; else None."""
        if self._mcp is None:
            return None
        pending = {
            name
            for name, handle in self._mcp.connections.items()
            if not handle.config.required and not handle.tools()
        }
        for tool in names:
            server = tool.partition("__")[0]
            if server in pending and tool not in self._offered:
                return tool, server
        return None

    def _check_agents(self) -> None:
        """Build every configured agent once, so a bad tool or model name is
        an error now rather than in the middle of a run.  Tools of optional
        MCP servers still connecting are checked when a run uses them."""
        for name in {*self.config.agents, *self._agents_given}:
            entry = self._agents_given.get(name) or self.config.agents.get(name)
            ref: AgentRef = name
            if (
                isinstance(entry, AgentConfig)
                and entry.tools is not None
                and self._pending_mcp_tool(entry.tools) is not None
            ):
                ready = [t for t in entry.tools if self._pending_mcp_tool([t]) is None]
                ref = entry.model_copy(update={"tools": ready})
            self.runner(ref, EventEmitter(), BudgetLedger(f"check-{name}"), None)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state = "closed"
        await self._stack.aclose()

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"the Runtime is {self._state}; use `async with Runtime(...)`")

    # -- what runs share ----------------------------------------------------------

    def slot(self, backend: str) -> anyio.CapacityLimiter | None:
        """The limiter on rollouts in flight on ``backend`` (``None``: unbounded)."""
        return self._slots.get(backend)

    def waiting(self) -> dict[str, int]:
        """Rollouts waiting for a slot, per backend (a queue depth for metrics)."""
        return {
            name: slot.statistics().tasks_waiting
            for name, slot in self._slots.items()
            if slot is not None
        }

    def runner(
        self,
        agent: AgentRef,
        emitter: EventEmitter,
        ledger: BudgetLedger,
        memory: MemoryView | None,
    ) -> Agent | Hierarchy:
        """What a run of ``agent`` runs: an ``Agent`` or a ``Hierarchy``,
        its events on ``emitter``.  A named agent is built and checked once
        and bound to each run (``Agent.bound``), again when ``tools`` changed
        (an optional MCP server joined) or its entry was replaced."""
        if isinstance(agent, Agent | Hierarchy):
            return agent
        if agent is not None and not isinstance(agent, str):
            built = self._built(agent, ledger, emitter, memory)
            built.report_signals = False  # a run reads them as events
            return built
        name = agent or self.config.default_agent
        if name in self.specs:
            return build_hierarchy(
                self.specs[name],
                backends=self.backends,
                events=emitter,
                default_model=self.default_model,
                prices=self.prices,
                mcp=self._mcp,
                ask=self._run_requests.asker() if self._run_requests is not None else None,
            )
        entry = self._agents_given.get(name) or self.config.agents.get(name)
        if not isinstance(entry, AgentConfig) and agent is not None:
            known = ", ".join(sorted({*self.config.agents, *self._agents_given})) or "none"
            raise ConfigError(f"unknown agent {name!r}; configured: {known}", where="agent")
        cached = self._named_agents.get(name)
        if cached is None or cached[0] is not entry or cached[1] is not self.tools:
            # The MCP check runs here only: a built agent's tools were all
            # offered, and they stay so until ``tools`` changes.
            config = entry if isinstance(entry, AgentConfig) else AgentConfig(name=name)
            cached = (entry, self.tools, self._built(config, None, None, None))
            self._named_agents[name] = cached
        return cached[2].bound(ledger=ledger, events=emitter, memory=memory, report_signals=False)

    def _built(
        self,
        config: AgentConfig,
        ledger: BudgetLedger | None,
        emitter: EventEmitter | None,
        memory: MemoryView | None,
    ) -> Agent:
        """``config`` as an ``Agent`` on this Runtime's backends and tools,
        its context fitted to its model's measured tokenizer and window."""
        if config.tools is not None and (pending := self._pending_mcp_tool(config.tools)):
            tool, server = pending
            raise ConfigError(
                f"tool {tool!r} is offered by the optional MCP server {server!r}, "
                "which has not connected yet",
                where=f"agents.{config.name}.tools",
            )
        model = config.model or self.default_model
        if config.routing is None and config.model is None and model is not None:
            config = config.model_copy(update={"model": model})  # ``[models] default``
        if config.routing is None and model is not None:
            config = fit_context(
                config,
                chars_per_token=self.chars_per_token.get(model),
                window_tokens=self._windows.get(model),
            )
        return Agent(
            config,
            backends=self.backends,
            tools=self.tools,
            ledger=ledger,
            events=emitter,
            prices=self.prices,
            memory=memory,
            mcp=self._mcp,
        )

    async def mcp_status(self) -> dict[str, McpServerStatus]:
        """Each MCP server's connection as its actor reports it: state
        (``ready``, ``restarting``...), why it is not ready, restarts, tools."""
        self._check_open()
        if self._mcp is None:
            return {}
        return {name: await h.status() for name, h in self._mcp.connections.items()}

    # -- runs ---------------------------------------------------------------------

    async def run(
        self,
        task: str,
        *,
        agent: AgentRef = None,
        scaling: ScalingSpec | None = None,
        budget: Budget | None = None,
        aggregator: Aggregator | None = None,
        events: EventSink | None = None,
        run_id: str | None = None,
        checkpoint: RunCheckpoint | None = None,
        tokens: bool | Callable[[], bool] = False,
        options: RunOptions | None = None,
        journal: bool = False,
    ) -> RunResult:
        """Run ``task``: ``scaling.rollouts`` rollouts of ``agent`` (default:
        ``config.default_agent``), each summarized, then aggregated.

        ``budget``: hard caps on the whole run, every model call included;
        ``aggregator``: an object instead of ``scaling.aggregate``;
        ``events``: receives every event of the run (awaited: backpressure);
        ``checkpoint``: go on with the run ``run_id`` from what an earlier
        incarnation committed; ``tokens``: stream the model calls and send
        their text to ``events`` as ``TokenDelta`` events while it is
        generated (``True``; or a callable asked before each call, say
        "does a client follow the run now"; local placement only).  Raises
        ``ConfigError`` for an unknown agent or bad aggregator options before
        any model call.  ``options``: how the agent calls its model in this
        run (``RunOptions``: sampling, client tools, the answer's schema).
        ``journal``: ``events`` is durable storage (the daemon's run store):
        every model call is recorded there (``CallReserved``) before it is
        sent and its end (``CallSettled``) after, so resuming the run from
        its checkpoint charges the calls a crash left in flight and its caps
        hold across crashes (needs ``events``)."""
        self._check_open()
        if not isinstance(task, str):
            raise TypeError(f"task must be a string, not {type(task).__name__}")
        if scaling is not None and not isinstance(scaling, ScalingSpec):
            raise TypeError(
                f"scaling must be a ScalingSpec, not {type(scaling).__name__} "
                "(e.g. ScalingSpec(rollouts=4, aggregate='majority'))"
            )
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must be a Budget, not {type(budget).__name__}")
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"options must be RunOptions, not {type(options).__name__}")
        self.placement.check_agent(agent)
        sink = events if self.tracer is None else self.tracer.observe(events)
        emitter = EventEmitter(sink, first_seq=checkpoint.next_seq if checkpoint else 1)
        if tokens is not False and events is not None:
            emitter.tokens = TokenPacer(tokens if callable(tokens) else None)
        if journal and events is None:
            raise ValueError("journal=True needs an events sink to journal the calls to")
        if self._mcp is not None:
            await self._mcp.catch_up()  # optional MCP servers that became ready join
            self._join_mcp_tools()
        plan = plan_run(
            self,
            task,
            emitter,
            run_id=run_id or new_run_id(),
            agent=agent,
            scaling=scaling or self._default_scaling(),
            budget=budget,
            aggregator=aggregator,
            checkpoint=checkpoint,
            options=options,
            journal=journal,
        )
        execution = RunExecution(plan, self.run_services, emitter)
        self._runs[plan.run_id] = execution
        try:
            return await execution.execute()
        finally:
            del self._runs[plan.run_id]
            if self.config.keep_workspaces:
                log.info("workspaces.kept", run_id=plan.run_id, path=str(keep_run(plan.run_id)))
            else:
                await release_run(plan.run_id)  # its rollouts' workspaces (shell, editor)
            if self._mcp is not None:
                with anyio.CancelScope(shield=True):
                    await self._mcp.run_finished(plan.run_id)  # no task outlives it

    def answer_elicitation(
        self, question_id: str, reply: ElicitationReply, *, run_id: str | None = None
    ) -> bool:
        """Answer the question of a run's ``ElicitationRequested`` event
        (``on_elicitation="events"``); False when no such question waits
        (already answered, timed out, unknown, or not ``run_id``'s)."""
        self._check_open()
        requests = self._run_requests
        return requests is not None and requests.answer(question_id, reply, run_id=run_id)

    def waiting_questions(self, run_id: str | None = None) -> list[ElicitationRequested]:
        """The questions of runs' ``ElicitationRequested`` events that wait
        for ``answer_elicitation`` (``run_id``'s only, when given), oldest first."""
        self._check_open()
        requests = self._run_requests
        return requests.pending(run_id) if requests is not None else []

    def aggregator_config(self, scaling: ScalingSpec) -> AggregatorConfig:
        """``scaling``'s aggregator configuration, validated again only for
        another options dict or changed options (a ``ConfigError`` names
        the bad key, as ``build_aggregator`` would)."""
        options = scaling.options
        cached = self._aggregator_configs.get(scaling.aggregate)
        if cached is not None and cached[0] is options and cached[1] == options:
            return cached[2]
        config = parse_config({"name": scaling.aggregate, **options}, "scaling.aggregate")
        self._aggregator_configs[scaling.aggregate] = (options, dict(options), config)
        return config

    def _default_scaling(self) -> ScalingSpec:
        """The configuration's scaling, built again only when it changed."""
        c = self.config
        spec = self._scaling
        if (
            spec is None
            or spec.rollouts != c.rollouts
            or spec.aggregate != c.aggregate
            or spec.options != c.aggregate_options
        ):
            spec = self._scaling = ScalingSpec(
                rollouts=c.rollouts, aggregate=c.aggregate, options=dict(c.aggregate_options)
            )
        return spec

    @asynccontextmanager
    async def stream(
        self,
        task: str,
        *,
        agent: AgentRef = None,
        scaling: ScalingSpec | None = None,
        budget: Budget | None = None,
        aggregator: Aggregator | None = None,
        buffer: int = 64,
        options: RunOptions | None = None,
        tokens: bool = True,
    ) -> AsyncIterator[AsyncIterator[Event]]:
        """A run of ``task`` whose events arrive as they happen, ``RunFinished``
        last::

            async with rt.stream(task) as events:
                async for event in events:
                    ...

        With ``tokens``, the model calls stream: ``TokenDelta`` events carry
        their text as it is generated (see ``run``).  The run waits while
        ``buffer`` events are unread.  Leaving the block
        early cancels the run; a run that fails raises its error (an
        ``AgentrtError``) when the block exits."""
        send, receive = anyio.create_memory_object_stream[Event](buffer)
        failure: list[BaseException] = []

        async def produce() -> None:
            async with send:
                try:
                    await self.run(
                        task,
                        agent=agent,
                        scaling=scaling,
                        budget=budget,
                        aggregator=aggregator,
                        events=stream_sink(send),
                        tokens=tokens,
                        options=options,
                    )
                except Exception as exc:
                    failure.append(exc)

        raised: list[Exception] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            try:
                async with receive:
                    yield receive
            except Exception as exc:  # the caller's block: raised below as itself
                raised.append(exc)
            finally:
                tg.cancel_scope.cancel()
        if raised:
            raise raised[0]
        if failure:
            raise failure[0]

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        agent: AgentRef = None,
        scaling: ScalingSpec | None = None,
        trajectories: Mapping[str, Trajectory] | None = None,
        budget: Budget | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Aggregate the ``summaries`` of rollouts that already ran (a stored
        run, an exported file, an evaluation's pool) with ``scaling.aggregate``
        and its options: no rollout runs.  Judges and agents ask the first
        model of ``agent`` (default: ``config.default_agent``) on a ledger of
        this call's own (capped by ``budget``); the result's ``cost`` is what
        that ledger spent.  ``trajectories``: the rollouts' steps, by rollout
        id, for aggregators that read them.  Raises ``ConfigError`` for an
        unknown aggregator, a bad option, or one that runs new rollouts
        (``stored_aggregator``), before any model call."""
        self._check_open()
        chosen = stored_aggregator(scaling or self._default_scaling(), judge=self.judge)
        run_id = run_id or new_run_id("agg")
        ledger = BudgetLedger(run_id, budget, self.prices)
        runner = self.runner(agent, EventEmitter(), ledger, None)
        node = runner.root if isinstance(runner, Hierarchy) else runner
        root = node.agent if isinstance(node, AgentNode) else node
        backend = (
            root.backend_for(root.policy.ladder.tiers[0].model)
            if isinstance(root, Agent)
            else next(iter(self.backends.values()))
        )
        context = AggregationContext.metered(
            backend,
            ledger,
            run_id=run_id,
            trajectories=trajectories or {},
            min_tokens=AGGREGATION_MIN_TOKENS,
        )
        try:
            agg = await chosen.aggregate(task, list(summaries), context)
        finally:
            ledger.finish()
        return RunResult(
            run_id=run_id,
            status="succeeded" if agg.answer is not None else "failed",
            answer=voted_answer(agg.answer, chosen_normalizer(chosen))
            if agg.answer is not None
            else None,
            raw_answer=agg.answer,
            rationale=agg.rationale,
            summaries=list(summaries),
            aggregation_trace=[msgspec.to_builtins(v) for v in agg.trace],
            cost=ledger.spent,
            error=None if agg.answer is not None else agg.rationale or "no rollout answered",
        )


def stored_aggregator(
    scaling: ScalingSpec, *, judge: Judge | None = None, where: str = "scaling.aggregate"
) -> Aggregator:
    """The aggregator ``scaling`` names, for rollouts that already ran.
    Raises ``ConfigError`` naming ``where`` for an unknown name or option,
    and for PDR (its refinement rounds run new rollouts: run it with
    ``Runtime.run``)."""
    chosen = build_aggregator(
        {"name": scaling.aggregate, **scaling.options}, judge=judge, where=where
    )
    if isinstance(chosen, ParallelDistillRefine):
        raise ConfigError(
            f"{scaling.aggregate!r} runs new rollouts in its refinement rounds, so it cannot "
            "re-aggregate stored ones; choose majority, weighted, best_of_n, rtv, aggagent or "
            "compressed (or run pdr with `agentrt run --aggregate pdr`)",
            where=where,
        )
    return chosen


def run(
    task: str,
    *,
    config: RuntimeConfig | Mapping[str, Any] | None = None,
    backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
    tools: Sequence[Tool] = (),
    agent: AgentRef = None,
    scaling: ScalingSpec | None = None,
    budget: Budget | None = None,
    aggregator: Aggregator | None = None,
    judge: Judge | None = None,
    on_elicitation: ElicitationHandler | None = None,
) -> RunResult:
    """Run one task synchronously (scripts, notebooks): opens a ``Runtime``,
    runs, closes it.  Inside a running event loop, use ``Runtime`` instead.
    ``on_elicitation``: asked to approve calls of tools under
    ``approvals`` and MCP servers' questions (``Runtime``'s)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UserError(
            "agentrt.run() cannot be called from a running event loop (a notebook cell or "
            "async code); use `async with agentrt.Runtime(config) as rt: await rt.run(task)`"
        )

    async def main() -> RunResult:
        async with Runtime(
            config, backends=backends, tools=tools, judge=judge, on_elicitation=on_elicitation
        ) as rt:
            return await rt.run(
                task, agent=agent, scaling=scaling, budget=budget, aggregator=aggregator
            )

    return anyio.run(main)


__all__ = [
    "AgentRef",
    "RolloutCheckpoint",
    "RunCheckpoint",
    "Runtime",
    "RuntimeConfig",
    "run",
    "stored_aggregator",
]
