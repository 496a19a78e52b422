"""What ``agentrt run`` does: N rollouts of an agent (or a hierarchy) on a task.

Owns

- ``RunConfig`` / ``load_run_config``: the configuration file
  (``agentrt.toml`` or JSON) -- its ``[models]`` section (the model
  registry) and its ``[agents]`` table (agent name -> spec file, relative
  to the configuration file), other sections left to their owners;
- ``agent_specs``: which hierarchy a run uses: ``--agent`` as a spec file
  (``x.yaml``, ``x.yaml#name``) or a name from ``[agents]``, else the
  default agent (short instructions, the calculator, small limits), with
  the command line's overrides (steps, tokens, temperature, MCP servers);
- ``run_agent``: opens the backends the hierarchy's agents use (each once),
  the MCP servers its specs name, and an actor system named after the run;
  spawns one hierarchy actor per rollout under a one-for-one ``rollouts``
  supervisor; asks them in parallel (each ask with a deadline; a rollout
  past it is cancelled); folds the results into a ``RunResult`` (one
  summary per rollout, the run ledger's exact usage, the most common
  answer) plus each rollout's ``RolloutResult`` for display.

Failures are data: a backend error, a deadline, an exhausted budget end
that rollout; the run fails only when no rollout answers.  Configuration
mistakes are ``ConfigError`` / ``SpecError`` before anything starts.

The roof: may import agents, tools and the whole runtime; only the CLI
imports it.
"""

from __future__ import annotations

import dataclasses
import json
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, final

import anyio
import msgspec

from agentrt.agents.control import RolloutResult
from agentrt.agents.hierarchy import Hierarchy, open_hierarchy, spawn_hierarchy
from agentrt.agents.recording import EventSink
from agentrt.agents.spec import AgentSpec, McpTools, default_agent
from agentrt.agents.spec_loader import SPEC_SUFFIXES, SpecSet, load_spec
from agentrt.protocols import Budget, Cost, RunResult, ScalingSpec, TrajectorySummary
from agentrt.runtime.actors import ActorCrashed, ActorError, ActorSystem, AskTimeout, SupervisorSpec
from agentrt.runtime.budget import BudgetLedger
from agentrt.runtime.engine import Runtime, RuntimeConfig
from agentrt.runtime.errors import ConfigError
from agentrt.runtime.log import get_logger
from agentrt.runtime.models.base import ModelBackend
from agentrt.runtime.models.registry import ModelRegistry
from agentrt.tools.mcp import parse_server_spec

__all__ = [
    "AgentRun",
    "RolloutOutcome",
    "RunConfig",
    "agent_specs",
    "eval_runner",
    "load_run_config",
    "run_agent",
    "run_scaled",
]

log = get_logger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class RunConfig:
    """The parts of the configuration file ``agentrt run`` reads."""

    registry: ModelRegistry
    agents: dict[str, Path]
    """Agent name -> spec file (resolved against the configuration's directory)."""
    source: str = "<no configuration>"


def load_run_config(path: Path | None) -> RunConfig:
    """Read ``path`` (TOML, or JSON by suffix); no path: the embedded model."""
    if path is None:
        return RunConfig(registry=ModelRegistry(), agents={})
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the configuration: {error.strerror}", where=where) from None
    data: Any
    kind = "JSON" if path.suffix == ".json" else "TOML"
    try:
        data = json.loads(raw) if kind == "JSON" else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"not valid {kind}: {error}", where=where) from None
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a table/object", where=where)
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError("must be a table/object", where=f"{where}: models")
    registry = ModelRegistry.from_mapping(models, where=f"{where}: models")
    agents = data.get("agents", {})
    if not isinstance(agents, dict) or not all(isinstance(v, str) for v in agents.values()):
        raise ConfigError(
            "must map agent names to spec files, e.g. planner = 'agents/planner.yaml'",
            where=f"{where}: agents",
        )
    return RunConfig(
        registry=registry,
        agents={name: path.parent / spec for name, spec in agents.items()},
        source=where,
    )


def agent_specs(
    agent: str | None,
    config: RunConfig,
    *,
    max_steps: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    mcp: tuple[str, ...] = (),
) -> SpecSet:
    """The hierarchy ``--agent`` names (see the module docstring); the
    overrides apply to every agent of it, ``mcp`` servers to its entry."""
    if agent is None:
        limits: dict[str, Any] = {}
        if max_steps is not None:
            limits["max_steps"] = max_steps
        if max_tokens is not None:
            limits["max_tokens_per_step"] = max_tokens
        specs = SpecSet.single(default_agent(**limits))
    elif agent.split("#", 1)[0].endswith(SPEC_SUFFIXES) or Path(agent).is_file():
        specs = load_spec(agent)
    elif agent in config.agents:
        specs = load_spec(config.agents[agent])
    else:
        known = ", ".join(sorted(config.agents)) or "none"
        raise ConfigError(
            f"no agent named {agent!r} in the configuration's [agents] (known: {known}), "
            "and it is no spec file (those end in .yaml)",
            where=f"--agent ({config.source})",
        )
    return _override(specs, max_steps, max_tokens, temperature, mcp)


def _override(
    specs: SpecSet,
    max_steps: int | None,
    max_tokens: int | None,
    temperature: float | None,
    mcp: tuple[str, ...],
) -> SpecSet:
    limits: dict[str, Any] = {}
    if max_steps is not None:
        limits["max_steps"] = max_steps
    if max_tokens is not None:
        limits["max_tokens_per_step"] = max_tokens
    servers = [parse_server_spec(text) for text in mcp]
    root = specs.unit(specs.root)
    if servers and not isinstance(root, AgentSpec):
        raise ConfigError("--mcp gives tools to an agent; the entry is a pipeline", where="--mcp")
    files = {}
    for key, spec_file in specs.files.items():
        units = {}
        for name, unit in spec_file.units.items():
            if not isinstance(unit, AgentSpec):
                units[name] = unit
                continue
            update: dict[str, Any] = {}
            if limits:
                update["limits"] = unit.limits.model_copy(update=limits)
            if temperature is not None:
                update["temperature"] = temperature
            if servers and key == specs.root.file and name == specs.root.name:
                update["tools"] = [*unit.tools, *(McpTools(mcp=s) for s in servers)]
            units[name] = unit.model_copy(update=update)
        files[key] = dataclasses.replace(spec_file, units=units)
    added = {s.name: s for s in servers}
    return dataclasses.replace(specs, files=files, servers={**specs.servers, **added})


class RolloutOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One rollout: its result (or why there is none) and what it spent
    (its whole tree of sub-agents included)."""

    rollout_id: str
    result: RolloutResult | None = None
    error: str | None = None
    cost: Cost = Cost()


@final
class AgentRun(msgspec.Struct, frozen=True, kw_only=True):
    """A finished ``run_agent``: the ``RunResult`` and each rollout."""

    result: RunResult
    rollouts: list[RolloutOutcome]
    mcp_failures: dict[str, str] = {}
    """MCP servers that could not be started (the run went on without them)."""


async def run_agent(
    task: str,
    *,
    specs: SpecSet,
    registry: ModelRegistry,
    model: str | None = None,
    rollouts: int = 1,
    timeout_s: float = 300.0,
    budget: Budget | None = None,
    events: EventSink | None = None,
    run_id: str | None = None,
) -> AgentRun:
    """Run ``rollouts`` rollouts of ``specs``' entry on ``task`` in parallel
    (see the module docstring); ``model`` serves agents that name none."""
    if rollouts < 1:
        raise ValueError(f"rollouts must be at least 1, got {rollouts}")
    run_id = run_id or f"run-{uuid.uuid4().hex[:12]}"
    backends, default_model = _backends(specs, registry, model)
    started = time.perf_counter()
    ids = [f"rollout-{index}" for index in range(rollouts)]
    outcomes: dict[str, RolloutOutcome] = {}
    async with AsyncExitStack() as stack:
        for backend in backends.values():
            await stack.enter_async_context(backend)
        if default_model is None:
            default_model = backends[registry.resolve(model)[0]].models[0]
        hierarchy = await stack.enter_async_context(
            open_hierarchy(specs, backends=backends, events=events, default_model=default_model)
        )
        run_ledger = BudgetLedger(run_id, budget, hierarchy.prices)
        ledgers = {rollout_id: run_ledger.child(rollout_id) for rollout_id in ids}
        system = await stack.enter_async_context(ActorSystem(system_id=run_id))
        supervisor = await system.spawn_supervisor(SupervisorSpec("rollouts"))
        handles = [
            await spawn_hierarchy(
                system, hierarchy, name=rollout_id, parent=supervisor, ledger_for=ledgers.get
            )
            for rollout_id in ids
        ]

        async def ask(index: int) -> None:
            rollout_id = ids[index]
            error: str | None = None
            result: RolloutResult | None = None
            try:
                result = await handles[index].run(
                    task, timeout=timeout_s, run_id=run_id, rollout_id=rollout_id
                )
            except AskTimeout:
                error = f"no answer within {timeout_s:g} s"
            except ActorCrashed as crash:
                error = f"crashed: {crash.cause!r}"
            except ActorError as failure:
                error = str(failure)
            if error is not None:
                log.warning("rollout_failed", rollout=rollout_id, error=error)
            outcomes[rollout_id] = RolloutOutcome(
                rollout_id=rollout_id, result=result, error=error, cost=ledgers[rollout_id].spent
            )

        async with anyio.create_task_group() as group:
            for index in range(rollouts):
                group.start_soon(ask, index)
        mcp_failures = dict(hierarchy.mcp_failures)
        spent = run_ledger.spent
    wall = time.perf_counter() - started
    ordered = [outcomes[r] for r in ids]
    cost = msgspec.structs.replace(spent, wall_seconds=wall)
    return AgentRun(
        result=_result(run_id, ordered, cost), rollouts=ordered, mcp_failures=mcp_failures
    )


async def run_scaled(
    task: str,
    *,
    specs: SpecSet,
    registry: ModelRegistry,
    scaling: ScalingSpec,
    model: str | None = None,
    budget: Budget | None = None,
    events: EventSink | None = None,
) -> AgentRun:
    """``agentrt run --aggregate``: the rollouts through the embedding facade
    (``Runtime``: scheduler, prefix warm-up, summaries, the named aggregator)
    with the hierarchy's backends and MCP servers opened here."""
    started = time.perf_counter()
    async with _opened(specs, registry, model, events) as (backends, hierarchy):
        async with Runtime(RuntimeConfig(), backends=backends, prices=hierarchy.prices) as rt:
            result = await rt.run(
                task, agent=hierarchy, scaling=scaling, budget=budget, events=events
            )
        failures = dict(hierarchy.mcp_failures)
    cost = msgspec.structs.replace(result.cost, wall_seconds=time.perf_counter() - started)
    rollouts = [RolloutOutcome(rollout_id=s.rollout_id, cost=s.cost) for s in result.summaries]
    return AgentRun(
        result=msgspec.structs.replace(result, cost=cost), rollouts=rollouts, mcp_failures=failures
    )


@asynccontextmanager
async def _opened(
    specs: SpecSet, registry: ModelRegistry, model: str | None, events: EventSink | None
) -> AsyncIterator[tuple[dict[str, ModelBackend], Hierarchy]]:
    """The hierarchy's backends and MCP servers, open for the block."""
    backends, default_model = _backends(specs, registry, model)
    async with AsyncExitStack() as stack:
        for backend in backends.values():
            await stack.enter_async_context(backend)
        if default_model is None:
            default_model = backends[registry.resolve(model)[0]].models[0]
        hierarchy = await stack.enter_async_context(
            open_hierarchy(specs, backends=backends, events=events, default_model=default_model)
        )
        yield backends, hierarchy


@final
class _HierarchyRunner:
    """``agentrt eval``'s runner: every run of the hierarchy through the facade."""

    def __init__(self, rt: Runtime, hierarchy: Hierarchy) -> None:
        self._rt = rt
        self._hierarchy = hierarchy

    async def run(self, task: str, *, scaling: ScalingSpec) -> RunResult:
        return await self._rt.run(task, agent=self._hierarchy, scaling=scaling)


@asynccontextmanager
async def eval_runner(args: Any) -> AsyncIterator[_HierarchyRunner]:
    """Opens the runner ``agentrt eval`` uses, from its ``--config``,
    ``--agent`` and ``--model`` arguments."""
    config = load_run_config(args.config)
    specs = agent_specs(args.agent, config)
    model = getattr(args, "model", None)
    async with (
        _opened(specs, config.registry, model, None) as (backends, hierarchy),
        Runtime(RuntimeConfig(), backends=backends, prices=hierarchy.prices) as rt,
    ):
        yield _HierarchyRunner(rt, hierarchy)


def _backends(
    specs: SpecSet, registry: ModelRegistry, model: str | None
) -> tuple[dict[str, ModelBackend], str | None]:
    """One unopened backend per backend the hierarchy's agents use, and the
    default model (``None``: the default backend's first, once open)."""
    wanted: set[str | None] = set()
    for ref in specs.build_order():
        unit = specs.unit(ref)
        if isinstance(unit, AgentSpec):
            if unit.routing is not None:
                wanted.update(tier.model for tier in unit.routing.tiers)
            else:
                wanted.add(unit.model)
    default_backend, default_model = registry.resolve(model)
    names = {default_backend} | {registry.resolve(m)[0] for m in wanted if m is not None}
    ordered = [n for n in registry.backend_names() if n in names]
    return {name: registry.create(name) for name in ordered}, default_model


def _summary(outcome: RolloutOutcome) -> TrajectorySummary:
    result = outcome.result
    if result is None:
        return TrajectorySummary(
            rollout_id=outcome.rollout_id,
            failure_modes=[outcome.error or "no result"],
            cost=outcome.cost,
        )
    trajectory = result.trajectory
    answer = (trajectory.answer or "").strip()
    if trajectory.status == "finished" and answer:
        return TrajectorySummary(rollout_id=outcome.rollout_id, answer=answer, cost=outcome.cost)
    reason = trajectory.stop_reason or ("empty answer" if trajectory.status == "finished" else "")
    return TrajectorySummary(
        rollout_id=outcome.rollout_id,
        failure_modes=[f"{trajectory.status}: {reason}"],
        cost=outcome.cost,
    )


def _result(run_id: str, outcomes: list[RolloutOutcome], cost: Cost) -> RunResult:
    summaries = [_summary(o) for o in outcomes]
    answered = [s.answer for s in summaries if s.answer]
    if not answered:
        errors = sorted({mode for s in summaries for mode in s.failure_modes})
        return RunResult(
            run_id=run_id,
            status="failed",
            summaries=summaries,
            cost=cost,
            error="; ".join(errors) or "no rollout answered",
        )
    counts = Counter(answered)
    # Plurality; ties go to the answer given first.
    best = max(counts, key=lambda a: (counts[a], -answered.index(a)))
    trace: Mapping[str, Any] = {
        "aggregate": "plurality",
        "votes": counts[best],
        "distinct": len(counts),
    }
    return RunResult(
        run_id=run_id,
        status="succeeded",
        answer=best,
        rationale=f"{counts[best]} of {len(outcomes)} rollouts gave this answer",
        summaries=summaries,
        aggregation_trace=[dict(trace)],
        cost=cost,
    )
