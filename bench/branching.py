"""Partial-rollout branching (ParallelMuse) against plain sampling, on a
population where branching can fail.

    python bench/branching.py [--tasks 40] [--seed 7] [--steps 4] [--budget 8] [--smoke]

The workload (a scripted model, no server): each task takes ``--steps`` tool
steps and an answer.  At every step the model picks an option; it is wrong
with the task's error rate (drawn per task from 5 % to 35 %), and one wrong
step makes the final answer wrong (one of three wrong answers).  The model
cannot see its mistakes.  Its token logprobs carry real but imperfect
uncertainty: a step's mean logprob is about -0.3 when its choice is right and
-0.8 when it is wrong, each with a standard deviation of 0.3 (so some right
steps look unsure and some wrong ones sure); the answer step is confident
unless the answer is wrong (-0.6), and re-sampling it cannot repair an
earlier mistake.  A control row gives every step logprobs that carry no
information (the same distribution right or wrong).

Each strategy gets ``--budget`` rollouts per task and answers by majority
vote: plain sampling (``budget`` fresh rollouts) and
``PartialRolloutBrancher`` (defaults: 2 fresh rollouts, then 3 continuations
from each of the 2 most uncertain steps; once more with ``answer_steps=False``,
never from a step that only answers).  Rows: accuracy of the voted
answer, oracle (some rollout right), model calls, completion and prompt
tokens per task (the scripted backend counts every token; no prefix cache,
so prompt tokens of a continuation's replayed prefix are counted again).

``--smoke`` (what CI runs): 10 tasks (seconds), then checks, exiting 1 when
one fails: every strategy ran its budget of rollouts on every task; plain
sampling made exactly (steps + 1) calls per rollout; accuracy never exceeds
the oracle; and branching (informative logprobs) spent at most 0.8x plain
sampling's completion tokens (a loose bound: the full run shows about 0.6x).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import _smoke
import anyio

from agentrt.agents import Agent, AgentConfig
from agentrt.agents._branching import BranchingConfig, PartialRolloutBrancher
from agentrt.aggregators._vote import answer_key
from agentrt.protocols import (
    AssistantMessage,
    ModelRequest,
    TokenLogprob,
    ToolSpec,
    Trajectory,
    UserMessage,
)
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput

RIGHT = "42"
WRONG = ("41", "43", "24")
TASK = re.compile(r"task (\d+): error rate ([0-9.]+)")
SMOKE_TASKS = 10
SMOKE_TOKEN_BOUND = 0.8
"""``--smoke``: branching's completion tokens over plain sampling's at most this
(loose: 10 tasks are noisy; 400 tasks give about 0.6)."""


class Work:
    """The tool every step calls: it records the choice and says nothing
    about whether it was right."""

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="work",
            description="carry out one step",
            parameters={
                "type": "object",
                "properties": {"step": {"type": "integer"}, "choice": {"type": "string"}},
                "required": ["step", "choice"],
            },
        )

    async def call(self, arguments: Any, context: ToolContext) -> ToolOutput:
        return ToolOutput.of_text(f"step {arguments['step']} done")


@dataclass
class Population:
    """The scripted model (see the module docstring)."""

    rng: random.Random
    steps: int
    informative: bool
    words: int = 8

    def logprobs(self, mean: float) -> list[TokenLogprob]:
        centre = mean + self.rng.gauss(0.0, 0.3)
        return [
            TokenLogprob(token=f" w{i}", logprob=min(centre + self.rng.gauss(0.0, 0.2), 0.0))
            for i in range(self.words)
        ]

    def mean(self, right: bool, when_right: float, when_wrong: float) -> float:
        if not self.informative:  # the control: the same mixture either way
            return when_right if self.rng.random() < 0.5 else when_wrong
        return when_right if right else when_wrong

    def __call__(self, request: ModelRequest) -> ReplySpec:
        task = next(m for m in request.messages if isinstance(m, UserMessage))
        assert isinstance(task.content, str)
        found = TASK.search(task.content)
        assert found is not None, task.content
        error_rate = float(found.group(2))
        choices = [
            json.loads(call.function.arguments)["choice"]
            for m in request.messages
            if isinstance(m, AssistantMessage)
            for call in m.tool_calls
        ]
        if len(choices) < self.steps:
            right = self.rng.random() >= error_rate
            return ScriptedReply(
                content=f"step {len(choices)}: I will take option {'A' if right else 'B'}",
                tool_calls=[
                    ScriptedToolCall(
                        "work", {"step": len(choices), "choice": "right" if right else "wrong"}
                    )
                ],
                logprobs=self.logprobs(self.mean(right, -0.3, -0.8)),
            )
        wrong_at = next((i for i, c in enumerate(choices) if c == "wrong"), None)
        answer = RIGHT if wrong_at is None else WRONG[wrong_at % len(WRONG)]
        return ScriptedReply(
            content=f"answer: {answer}",
            logprobs=self.logprobs(self.mean(wrong_at is None, -0.3, -0.6)),
        )


@dataclass
class Tally:
    """One strategy's totals over the tasks."""

    right: int = 0
    oracle: int = 0
    calls: int = 0
    completion: int = 0
    prompt: int = 0
    tasks: int = 0
    rollouts: list[int] = field(default_factory=list)

    def add(self, trajectories: Sequence[Trajectory]) -> None:
        answers = [answer_key(t.answer) for t in trajectories if t.answer is not None]
        voted = Counter(answers).most_common(1)[0][0] if answers else None
        self.tasks += 1
        self.right += voted == RIGHT
        self.oracle += RIGHT in answers
        self.rollouts.append(len(trajectories))
        for t in trajectories:
            self.calls += t.cost.model_calls
            self.completion += t.cost.usage.completion_tokens
            self.prompt += t.cost.usage.prompt_tokens


async def run_task(
    agent: Agent, task: str, budget: int, *, branch: bool, concurrency: int, answer_steps: bool
) -> list[Trajectory]:
    config = BranchingConfig(budget=budget, concurrency=concurrency, answer_steps=answer_steps)
    if branch:
        return (await PartialRolloutBrancher(agent, config).run(task)).trajectories
    done: list[Trajectory] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def fresh() -> None:
        async with limiter:
            done.append((await agent.run(task)).trajectory)

    async with anyio.create_task_group() as tg:
        for _ in range(budget):
            tg.start_soon(fresh)
    return done


async def measure(
    args: argparse.Namespace,
    *,
    informative: bool,
    branch: bool,
    budget: int | None = None,
    answer_steps: bool = True,
) -> Tally:
    population = Population(random.Random(args.seed), args.steps, informative)
    agent = Agent(
        AgentConfig(name="worker", logprobs=True, stop_on=[], limits={"max_steps": 20}),
        backends=[ScriptedBackend(population)],
        tools=[Work()],
    )
    rates = random.Random(args.seed + 1)
    tally = Tally()
    for i in range(args.tasks):
        task = f"task {i}: error rate {rates.uniform(0.05, 0.35):.3f}"
        rollouts = budget or args.budget
        tally.add(
            await run_task(
                agent,
                task,
                rollouts,
                branch=branch,
                concurrency=args.concurrency,
                answer_steps=answer_steps,
            )
        )
    return tally


def row(name: str, t: Tally) -> str:
    n = max(t.tasks, 1)
    return (
        f"| {name} | {t.right / n:.0%} | {t.oracle / n:.0%} | {t.calls / n:.1f} | "
        f"{t.completion / n:,.0f} | {t.prompt / n:,.0f} |"
    )


def smoke_checks(
    args: argparse.Namespace, rows: dict[str, tuple[Tally, int]], plain: Tally, branched: Tally
) -> int:
    """``--smoke``: every row sane, and branching saving completion tokens."""
    checks: list[tuple[str, str, bool]] = []
    for name, (t, budget) in rows.items():
        ran = t.tasks == args.tasks and all(n == budget for n in t.rollouts)
        sane = t.right <= t.oracle and min(t.calls, t.completion, t.prompt) > 0
        checks.append((f"{name}: {budget} rollouts x {args.tasks} tasks, right <= oracle",
                       f"{sum(t.rollouts)}, {t.right} <= {t.oracle}", ran and sane))  # fmt: skip
    expected = args.tasks * args.budget * (args.steps + 1)
    checks.append((f"plain sampling: (steps + 1) x rollouts = {expected} calls", str(plain.calls),
                   plain.calls == expected))  # fmt: skip
    ratio = branched.completion / max(plain.completion, 1)
    checks.append((f"branching / plain completion tokens <= {SMOKE_TOKEN_BOUND}", f"{ratio:.2f}",
                   ratio <= SMOKE_TOKEN_BOUND))  # fmt: skip
    print("\nsmoke checks (loose token bound: a few tasks are noisy; the full run shows ~0.6x)")
    return _smoke.verdict(checks, 70, 12)


async def main_async(args: argparse.Namespace) -> int:
    print(
        f"# branching vs plain sampling: {args.tasks} tasks, {args.steps} steps, "
        f"{args.budget} rollouts per task, majority vote (seed {args.seed})"
    )
    print(
        "| logprobs / strategy | accuracy | oracle | calls/task | completion tok/task "
        "| prompt tok/task |"
    )
    print("|---|---|---|---|---|---|")
    results: dict[tuple[bool, bool], Tally] = {}
    rows: dict[str, tuple[Tally, int]] = {}
    for informative in (True, False):
        for branch in (False, True):
            tally = await measure(args, informative=informative, branch=branch)
            results[informative, branch] = tally
            label = f"{'informative' if informative else 'uninformative'} / "
            label += "branching" if branch else "plain"
            rows[label.replace(" /", "")] = (tally, args.budget)
            print(row(label, tally))
    plain, branched = results[True, False], results[True, True]
    # Plain sampling at about branching's cost: as many rollouts as its calls buy.
    matched = max(round(branched.calls / max(branched.tasks, 1) / (args.steps + 1)), 1)
    same_cost = await measure(args, informative=True, branch=False, budget=matched)
    rows["plain at branching's cost"] = (same_cost, matched)
    print(row(f"informative / plain, {matched} rollouts (branching's calls)", same_cost))
    tools_only = await measure(args, informative=True, branch=True, answer_steps=False)
    rows["branching from tool steps only"] = (tools_only, args.budget)
    print(row("informative / branching from tool steps only (answer_steps=False)", tools_only))
    saved = 1 - branched.completion / max(plain.completion, 1)
    delta = (branched.right - plain.right) / max(plain.tasks, 1)
    matched_delta = (branched.right - same_cost.right) / max(plain.tasks, 1)
    print(
        f"\nbranching (informative logprobs): {saved:.0%} fewer completion tokens, "
        f"accuracy {delta * 100:+.0f} points vs plain sampling with {args.budget} rollouts, "
        f"{matched_delta * 100:+.0f} points vs plain sampling with {matched}"
    )
    return smoke_checks(args, rows, plain, branched) if args.smoke else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tasks", type=int, default=40, help="tasks per strategy")
    parser.add_argument("--steps", type=int, default=4, help="tool steps before the answer")
    parser.add_argument("--budget", type=int, default=8, help="rollouts per task")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts at once")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's short form: {SMOKE_TASKS} tasks; exits 1 when a row did not run its "
        f"rollouts, or branching spent more than {SMOKE_TOKEN_BOUND}x plain sampling's "
        "completion tokens (loose: the full run shows ~0.6x)",
    )
    if parser.parse_known_args(argv)[0].smoke:
        parser.set_defaults(tasks=SMOKE_TASKS)  # an explicit --tasks still wins
    return anyio.run(main_async, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
