"""The workload the placement tests place: a calculator-using solver
against sim-server (model ``sim``), priced so that placements compare."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import anyio

from agentrt import Runtime, RuntimeConfig
from agentrt.agents import EventLog
from agentrt.protocols import Event, RunResult, StepRecorded
from agentrt.protocols._ids import is_top_level
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.testing import SimServer, SimServerConfig
from agentrt.tools import Calculator

#: The cached prompt priced as a fresh one: the cache's hits depend on timing.
PRICES = PriceTable(
    models={
        "sim": ModelPrice(
            prompt_usd_per_mtok=Decimal(1),
            completion_usd_per_mtok=Decimal(4),
            cached_prompt_usd_per_mtok=Decimal(1),
        )
    }
)


def solver_config(url: str, placement: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An ``agentrt.toml`` as a dict: the ``solver`` agent (the calculator,
    temperature 0) on sim-server at ``url``, no early stop, placed by
    ``placement``; ``extra`` adds top-level tables."""
    sim = {"kind": "openai", "base_url": f"{url}/v1", "models": ["sim"]}
    solver = {
        "name": "solver",
        "instructions": "Solve the task; use the calculator.",
        "tools": ["calculator"],
        "model": "sim",
        "temperature": 0.0,
    }
    return {
        "models": {"default": "sim", "backends": {"sim": sim}},
        "agents": {"solver": solver},
        "default_agent": "solver",
        "early_stop": False,
        "placement": placement,
        **extra,
    }


@asynccontextmanager
async def solver_runtime(
    sim: SimServerConfig, placement: dict[str, Any]
) -> AsyncIterator[tuple[SimServer, Runtime]]:
    """sim-server as ``sim`` says, and a ``Runtime`` of ``solver_config``
    on it (the calculator, ``PRICES``) placed by ``placement``."""
    async with SimServer(sim) as server:
        config = RuntimeConfig.model_validate(solver_config(server.url, placement))
        async with Runtime(config, tools=[Calculator()], prices=PRICES) as rt:
            yield server, rt


class CommittedSteps:
    """A run's event sink for tests that kill a worker mid-run: it logs every
    event in ``log`` and keeps each ``StepRecorded`` in ``before`` until
    ``stopped`` is set (the kill); ``under_way`` is set once ``enough`` are
    kept."""

    def __init__(self, enough: int) -> None:
        self.log = EventLog()
        self.before: list[StepRecorded] = []
        self.under_way = anyio.Event()
        self.stopped = anyio.Event()
        self._enough = enough

    async def __call__(self, event: Event) -> None:
        await self.log(event)
        if isinstance(event, StepRecorded) and not self.stopped.is_set():
            self.before.append(event)
            if len(self.before) >= self._enough:
                self.under_way.set()

    async def run_and_kill(
        self, rt: Runtime, task: str, kill: Callable[[], object], **options: Any
    ) -> RunResult:
        """``rt.run(task, events=self, **options)``, calling ``kill`` (and
        setting ``stopped``) once ``under_way`` is set."""

        async def kill_when_under_way() -> None:
            await self.under_way.wait()
            kill()
            self.stopped.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_when_under_way)
            result = await rt.run(task, events=self, **options)
        return result

    def assert_none_repeated_or_lost(self, attempts: dict[str, int]) -> None:
        """No step kept in ``before`` was requested again (``attempts``:
        the sim-server's, by request id) nor lost: the final trajectory in
        ``log`` holds it as it was."""
        for event in self.before:
            if is_top_level(event.rollout_id):
                assert attempts[f"{event.rollout_id}-{event.step.index}"] == 1, event.rollout_id
        final = {(e.rollout_id, e.step.index): e.step for e in self.log.of_type(StepRecorded)}
        for event in self.before:
            assert final[(event.rollout_id, event.step.index)] == event.step
