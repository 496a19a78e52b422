"""An offline task simulator for routing policies (no model, no network):
``SimTask``, ``SimProfile``, ``SimulatedTaskRunner`` and ``simulated_tasks``,
used by ``agentrt frontier --simulate``.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Sequence
from typing import final

import anyio
import msgspec

from agentrt.protocols._run import Budget
from agentrt.protocols._usage import Cost, Usage
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError
from agentrt.runtime.routing._policies import RolloutRouter, RoutingPolicy
from agentrt.runtime.routing._step_signals import Signals
from agentrt.runtime.routing._tiers import Tier


class SimTask(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a frontier evaluation."""

    id: str
    difficulty: float
    """How hard the task is, in [0, 1]."""
    reference: dict[str, bool] = {}
    """Tier name -> whether that tier solved the task in a real run; tiers
    not listed are simulated from the difficulty."""


class SimProfile(msgspec.Struct, frozen=True, kw_only=True):
    """How the simulated agent and models behave."""

    skills: dict[str, float] = msgspec.field(default_factory=lambda: {"small": 0.4, "large": 0.8})
    """Tier name -> skill on the difficulty scale; higher solves harder tasks."""
    spread: float = 0.12
    """Width of the logistic from difficulty to solve probability."""
    solve_rate: float = 0.6
    """Per-step chance that a capable tier finishes the task."""
    silent_failure: float = 0.2
    """Per-step chance that an incapable tier stops with a wrong answer."""
    difficulty_noise: float = 0.1
    """Standard deviation of the difficulty signal around the truth."""
    max_steps: int = 8
    prompt_tokens: int = 1200
    """Prompt size of the first step."""
    prompt_growth: int = 400
    """Prompt tokens added per step (the transcript grows)."""
    max_tokens: int = 512
    """Completion cap per call."""


SIM_TIERS = (Tier("small", "sim-small"), Tier("large", "sim-large"))
"""The default two tiers of the simulation."""

SIM_PRICES = PriceTable(
    models={
        "sim-small": ModelPrice.model_validate(
            {
                "prompt_usd_per_mtok": "0.10",
                "completion_usd_per_mtok": "0.40",
                "cached_prompt_usd_per_mtok": "0.025",
            }
        ),
        "sim-large": ModelPrice.model_validate(
            {
                "prompt_usd_per_mtok": "2.50",
                "completion_usd_per_mtok": "10.00",
                "cached_prompt_usd_per_mtok": "1.25",
            }
        ),
    }
)
"""Prices of the simulated models (USD per 1M tokens)."""


def _task_seed(seed: int, task_id: str) -> int:
    return zlib.crc32(f"{seed}:{task_id}".encode())


def simulated_tasks(count: int, *, seed: int = 0) -> list[SimTask]:
    """``count`` tasks with difficulties spread over [0, 1], reproducibly."""
    rng = random.Random(seed)
    return [SimTask(id=f"sim-{i:04d}", difficulty=rng.betavariate(2.0, 2.0)) for i in range(count)]


@final
class SimulatedTaskRunner:
    """``await runner(task, policy) -> (success, cost)``: one task, one policy.

    Each task gets a fresh ledger with ``budget`` (default: $0.25); running out of it ends the
    task as a failure.  Results are reproducible from ``seed`` and the same
    task draws the same latent ``u`` under every policy (common random
    numbers), so policies are compared on equal footing.

    A task's latent ``u`` decides which tiers can solve it (``u < p_t(d)``,
    the logistic of ``(skill - d) / spread``, so a stronger tier solves
    whatever a weaker one does), unless it has a reference result for the
    tier.  A capable tier finishes each step with ``solve_rate``; an
    incapable one either stops with a wrong answer (``silent_failure``) or
    shows the cascade's signals.  Every call is reserved and charged on the
    ledger, the prompt growing per step and cached when the previous step
    used the same model."""

    def __init__(
        self,
        *,
        profile: SimProfile | None = None,
        prices: PriceTable = SIM_PRICES,
        budget: Budget | None = None,
        seed: int = 0,
    ) -> None:
        self.profile = profile if profile is not None else SimProfile()
        self.prices = prices
        self.budget = budget if budget is not None else Budget(max_usd=0.25)
        self.seed = seed

    def capable(self, task: SimTask, tier: str, u: float) -> bool:
        """Whether ``tier`` can solve ``task`` given its latent draw ``u``."""
        known = task.reference.get(tier)
        if known is not None:
            return known
        skill = self.profile.skills.get(tier)
        if skill is None:
            known_tiers = ", ".join(sorted(self.profile.skills))
            raise ConfigError(
                f"no skill for tier {tier!r} (known: {known_tiers})", where="simulation.skills"
            )
        z = (skill - task.difficulty) / self.profile.spread
        return u < 1.0 / (1.0 + math.exp(-z))

    async def __call__(self, task: SimTask, policy: RoutingPolicy) -> tuple[bool, Cost]:
        p = self.profile
        rng = random.Random(_task_seed(self.seed, task.id))
        u = rng.random()
        noisy = min(max(task.difficulty + rng.gauss(0.0, p.difficulty_noise), 0.0), 1.0)
        ledger = BudgetLedger(task.id, self.budget, self.prices, clock=lambda: 0.0)
        router = RolloutRouter(policy)
        signals = Signals(difficulty=noisy)
        previous_model: str | None = None
        previous_prompt = 0
        success = False
        for step in range(p.max_steps):
            await anyio.lowlevel.checkpoint()
            prompt = p.prompt_tokens + step * p.prompt_growth
            try:
                decision, reservation = router.reserve(
                    ledger, step, signals, prompt_tokens=prompt, max_tokens=p.max_tokens
                )
            except BudgetExceeded:
                break
            completion = rng.randint(p.max_tokens // 4, p.max_tokens)
            cached = previous_prompt if decision.model == previous_model else 0
            reservation.charge(
                Usage(
                    prompt_tokens=prompt, completion_tokens=completion, cached_prompt_tokens=cached
                )
            )
            previous_model, previous_prompt = decision.model, prompt
            if self.capable(task, decision.tier, u):
                if rng.random() < p.solve_rate:
                    success = True
                    break
                signals = Signals(difficulty=noisy, mean_logprob=-0.2 - 0.3 * rng.random())
            else:
                if rng.random() < p.silent_failure:
                    break
                failed = rng.random() < 0.6
                signals = Signals(
                    difficulty=noisy,
                    last_tool_failed=failed,
                    repeated_action=not failed and rng.random() < 0.5,
                    mean_logprob=-1.2 - rng.random(),
                )
        ledger.finish()
        return success, ledger.spent


def load_tasks_jsonl(lines: Sequence[str], *, source: str = "tasks") -> list[SimTask]:
    """Tasks from JSON lines (``{"id", "difficulty", "reference"?}``).

    Raises ``ValueError`` naming ``source`` and the line of the first bad one."""
    decoder = msgspec.json.Decoder(SimTask)
    tasks: list[SimTask] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            task = decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ValueError(f"{source}:{number}: {exc}") from None
        if not 0.0 <= task.difficulty <= 1.0:
            raise ValueError(
                f"{source}:{number}: difficulty must be in [0, 1], got {task.difficulty}"
            )
        if task.id in seen:
            raise ValueError(f"{source}:{number}: duplicate task id {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{source}: no tasks")
    return tasks


__all__ = [
    "SIM_PRICES",
    "SIM_TIERS",
    "SimProfile",
    "SimTask",
    "SimulatedTaskRunner",
    "load_tasks_jsonl",
    "simulated_tasks",
]
