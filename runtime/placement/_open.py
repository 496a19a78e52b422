"""Placement: where a run's rollouts run.  ``LocalPlacement`` (this
process's actor system), ``ProcessPlacement`` (worker processes of this
host) or ``RayPlacement`` (rollout workers on a Ray cluster, imported only
when configured: ``import agentrt`` never imports Ray);
``open_placement`` opens the one ``[placement]`` asks for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._spec_loader import SpecSet
from agentrt.runtime.budget._pricing import PriceTable
from agentrt.runtime.config._runtime_config import PlacementConfig, RuntimeConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.memory._bank import MemoryStore
from agentrt.runtime.placement._local import LocalPlacement
from agentrt.runtime.placement._placement import (
    PlacedRun,
    Placement,
    PlacementLost,
    RolloutGaveUp,
    RolloutJob,
)
from agentrt.runtime.placement._worker_wire import WorkerSpec
from agentrt.tools._tool import Tool


@asynccontextmanager
async def open_placement(
    config: RuntimeConfig,
    *,
    tools: Sequence[Tool] = (),
    agents: Mapping[str, SpecSet | AgentConfig] | None = None,
    prices: PriceTable | None = None,
    backends: Mapping[str, object] | None = None,
    bank: MemoryStore | None = None,
) -> AsyncIterator[Placement]:
    """The placement ``config.placement`` names, open until the block ends.

    ``ray``, or ``local`` with ``workers``: workers (Ray actors, or
    worker processes of this host) are started (and stopped on exit) with
    ``config`` (placement aside), ``tools``, ``agents`` and ``prices``,
    from which each builds its own backends, MCP connections and agents;
    their rollouts use ``bank`` (the Runtime's memory bank) through the
    driver.  Raises ``ConfigError`` when Ray is not installed, the cluster
    cannot be reached or lacks the workers' resources, a worker cannot
    import agentrt or open what ``config`` asks for (or what it was given
    does not pickle), or the Runtime was given ``backends`` as objects
    (they cannot reach a worker)."""
    placement = config.placement
    if placement.in_process:
        yield LocalPlacement()
        return
    if backends:
        raise ConfigError(
            f"the {_named(placement)} opens every backend on its workers from [models]; "
            f"backends given as objects ({', '.join(sorted(backends))}) cannot be placed there",
            where="placement.kind" if placement.kind == "ray" else "placement.workers",
        )
    spec = WorkerSpec(
        config=config.model_copy(update={"placement": type(placement)()}),
        tools=list(tools),
        agents=dict(agents or {}),
        prices=prices,
    )
    if placement.kind == "local":
        # Imported here: a worker process hosts a Runtime (which imports this module).
        from agentrt.runtime.placement._process_driver import ProcessPlacement

        async with ProcessPlacement(placement, spec, bank=bank) as processes:
            yield processes
        return
    try:
        from agentrt.runtime.placement._ray_driver import RayPlacement
    except ImportError as error:
        raise ConfigError(
            f"the ray placement needs Ray ({error}); install it: pip install 'agentrt[ray]'",
            where="placement.kind",
        ) from None
    async with RayPlacement(placement, spec, bank=bank) as ray_placement:
        yield ray_placement


def _named(placement: PlacementConfig) -> str:
    return "ray placement" if placement.kind == "ray" else "local placement with workers"


__all__ = [
    "LocalPlacement",
    "PlacedRun",
    "Placement",
    "PlacementLost",
    "RolloutGaveUp",
    "RolloutJob",
    "WorkerSpec",
    "open_placement",
]
