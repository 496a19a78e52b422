"""Simulation benchmark of the aggregators: measured success against prediction.

A population with known ground truth: each rollout is right with probability
``p`` (a wrong one answers one of ``W`` wrong values uniformly); each judge
comparison picks the right candidate with probability ``q``
(``SimulatedJudge``).  For a grid of (p, q, N) it runs the real aggregators
(``MajorityVote``, ``RecursiveTournament`` G=2, ``ParallelDistillRefine``)
over ``T`` populations and prints, side by side, the measured success rate
(with a 95% Wilson interval) and the prediction:

- majority@N: exact, from the multinomial (ties split uniformly, which is
  what "first seen wins" gives over exchangeable rollouts);
- RTV: exact, a recursion over the bracket (a mixed comparison is won by the
  right candidate with P(Bin(V, q) > V/2), plus P(= V/2) when it sits first),
  with the knockout-tournament bound 1 - (1-p)^N - ceil(log2 N)·exp(-2V(q-1/2)^2)
  printed for reference;
- PDR: an independent Monte Carlo over correctness bits only (no summaries,
  no judge objects, no anyio) of the same process: round 1 of N rollouts;
  the K best by the level reached in an RTV bracket form the workspace; a
  conditioned rollout is right with probability p + (1-p)·beta·c/K (c right
  answers in the workspace); a final RTV.

A row says ``agree`` when |measured - predicted| < 3.29 standard errors
(two-sided 0.1%).  Then the aggregation cost, in model calls and tokens
relative to one rollout, of each aggregator on a real population: eight
rollouts of the agent loop (``Agent`` + ``ScriptedBackend``, tokens as that
backend counts them) summarized by ``RuleBasedSummarizer``; judges and the
aggregation agent on ``ScriptedBackend`` too.

    python bench/scaling.py            # full grid (< 60 s)
    python bench/scaling.py --quick    # a smaller grid, fewer trials
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Mapping
from itertools import product
from typing import Any

import anyio

from agentrt.agents import Agent, AgentConfig
from agentrt.agents.summary import RuleBasedSummarizer
from agentrt.aggregators import (
    PDR,
    RTV,
    AggregationAgent,
    AggregationContext,
    Aggregator,
    CompressedReasoning,
    MajorityVote,
    ModelJudge,
    Rollout,
    SimulatedJudge,
    Workspace,
)
from agentrt.protocols import ToolSpec, Trajectory, TrajectorySummary
from agentrt.runtime.budget import BudgetLedger
from agentrt.runtime.log import configure_logging
from agentrt.runtime.models.base import ModelBackend
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.base import ToolContext, ToolOutput

WRONG = 3  # distinct wrong answers
TRUTH = "42"
BETA = 0.5  # how much a right answer in the workspace helps a conditioned rollout
Z = 3.29

# -- exact predictions ------------------------------------------------------------


def majority_exact(p: int | float, n: int, wrong: int = WRONG) -> float:
    """P(the right answer wins a plurality vote of n), ties split uniformly."""
    q = (1 - p) / wrong
    total = 0.0

    def parts(left: int, k: int) -> Any:
        if k == 1:
            yield (left,)
            return
        for first in range(left + 1):
            for rest in parts(left - first, k - 1):
                yield (first, *rest)

    for counts in parts(n, wrong + 1):
        right, others = counts[0], counts[1:]
        top = max(counts)
        if right != top:
            continue
        coef = math.factorial(n)
        for c in counts:
            coef //= math.factorial(c)
        prob = coef * p**right * math.prod(q**c for c in others)
        total += prob / sum(1 for c in counts if c == top)
    return total


def vote_win(v: int, q: float) -> tuple[float, float]:
    """P(Bin(v, q) > v/2), P(Bin(v, q) = v/2)."""
    pmf = [math.comb(v, i) * q**i * (1 - q) ** (v - i) for i in range(v + 1)]
    win = sum(pmf[i] for i in range(v + 1) if 2 * i > v)
    tie = sum(pmf[i] for i in range(v + 1) if 2 * i == v)
    return win, tie


def rtv_exact(p: float, q: float, n: int, v: int) -> float:
    """P(the winner of a G=2 RTV over n iid rollouts is right)."""
    win, tie = vote_win(v, q)
    pool = [p] * n
    while len(pool) > 1:
        nxt = []
        for i in range(0, len(pool), 2):
            if i + 1 == len(pool):
                nxt.append(pool[i])  # bye
                continue
            a, b = pool[i], pool[i + 1]
            nxt.append(a * b + a * (1 - b) * (win + tie) + (1 - a) * b * win)
        pool = nxt
    return pool[0]


def knockout_bound(p: float, q: float, n: int, v: int) -> float:
    return 1 - (1 - p) ** n - math.ceil(math.log2(n)) * math.exp(-2 * v * (q - 0.5) ** 2)


# -- independent Monte Carlo of PDR (correctness bits only) -----------------------


def _bracket_bits(bits: list[bool], win: float, tie: float, rng: random.Random) -> list[int]:
    """Play a G=2 bracket on correctness bits; returns the level each reached."""
    reached = [0] * len(bits)
    pool = list(range(len(bits)))
    level = 0
    while len(pool) > 1:
        level += 1
        for i in pool:
            reached[i] = level
        nxt = []
        for j in range(0, len(pool), 2):
            if j + 1 == len(pool):
                nxt.append(pool[j])
                continue
            a, b = pool[j], pool[j + 1]
            if bits[a] == bits[b]:
                nxt.append(a if rng.random() < 0.5 else b)  # same correctness either way
            elif bits[a]:
                nxt.append(a if rng.random() < win + tie else b)
            else:
                nxt.append(b if rng.random() < win else a)
        pool = nxt
    reached[pool[0]] = level + 1
    return reached


def pdr_monte_carlo(
    p: float,
    q: float,
    n: int,
    *,
    rounds: int,
    k: int,
    v_sel: int,
    v: int,
    trials: int,
    seed: int,
) -> float:
    rng = random.Random(seed)
    sel = vote_win(v_sel, q)
    fin = vote_win(v, q)
    ok = 0
    for _ in range(trials):
        prob = p
        bits: list[bool] = []
        for r in range(rounds):
            bits = [rng.random() < prob for _ in range(n)]
            if r + 1 < rounds:
                reached = _bracket_bits(bits, *sel, rng)
                order = sorted(range(n), key=lambda i: -reached[i])[:k]
                c = sum(bits[i] for i in order)
                prob = p + (1 - p) * BETA * c / len(order)
        reached = _bracket_bits(bits, *fin, rng)
        ok += bits[max(range(n), key=lambda i: reached[i])]
    return ok / trials


# -- the measured side: real aggregators ------------------------------------------


def population(p: float, n: int, rng: random.Random, tag: str) -> list[TrajectorySummary]:
    return [
        TrajectorySummary(
            rollout_id=f"{tag}-{i}",
            answer=TRUTH if rng.random() < p else f"wrong{rng.randrange(WRONG)}",
        )
        for i in range(n)
    ]


def simulated_rollout(p: float, rng: random.Random, tag: str) -> Rollout:
    """A rollout right with p + (1-p)·beta·c/|workspace| (c right answers in it)."""
    counter = iter(range(1 << 30))

    async def rollout(task: str, workspace: Workspace) -> TrajectorySummary:
        c = sum(s.answer == TRUTH for s in workspace.summaries)
        size = len(workspace.summaries)
        prob = p + (1 - p) * BETA * c / size if size else p
        return population(prob, 1, rng, f"{tag}-{next(counter)}")[0]

    return rollout


def simulated(rollout: Rollout | None = None) -> AggregationContext:
    """A context on a fresh uncapped ledger; its backend is never asked (the
    simulated judge books its calls on the ledger directly)."""
    return AggregationContext.metered(
        ScriptedBackend([]), BudgetLedger("simulated"), rollout=rollout
    )


async def measure(p: float, q: float, n: int, *, v: int, trials: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    wins = {"majority": 0, "rtv": 0, "pdr": 0}
    majority = MajorityVote()
    for t in range(trials):
        pop = population(p, n, rng, f"t{t}")
        judge = SimulatedJudge(TRUTH, q, seed=rng.randrange(1 << 30))
        wins["majority"] += (await majority.aggregate("task", pop, simulated())).answer == TRUTH
        rtv = RTV(judge, g=2, v=v)
        wins["rtv"] += (await rtv.aggregate("task", pop, simulated())).answer == TRUTH

        rollout = simulated_rollout(p, rng, f"t{t}")
        pdr = PDR(judge, rounds=2, m=n, k=3, v=4, final=RTV(judge, g=2, v=v))
        wins["pdr"] += (await pdr.run("task", simulated(rollout))).answer == TRUTH
    return wins


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    phat = k / n
    d = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / d
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / d
    return centre - half, centre + half


def verdict(k: int, trials: int, pred: float, pred_trials: int | None) -> str:
    var = pred * (1 - pred) / trials + (pred * (1 - pred) / pred_trials if pred_trials else 0)
    z = abs(k / trials - pred) / math.sqrt(var) if var > 0 else (0.0 if k / trials == pred else 9)
    return "agree" if z < Z else "DISAGREE"


# -- cost on a real population ----------------------------------------------------


class Search:
    spec = ToolSpec(
        name="search",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    )

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        q = arguments["q"]
        body = " ".join(f"record {j} about {q} mentions figure {j * 7}." for j in range(12))
        return ToolOutput.of_text(body)


async def real_population(n: int) -> tuple[list[TrajectorySummary], dict[str, Trajectory]]:
    trajs = []
    for i in range(n):
        answer = TRUTH if i % 2 == 0 else f"wrong{i % WRONG}"
        script: list[Any] = [
            ScriptedToolCall("search", {"q": f"topic {i} part {j}"}) for j in range(8)
        ]
        script.append(f"From the records, the answer is {answer}. ANSWER: {answer}")
        agent = Agent(
            AgentConfig(name="worker"), backends=[ScriptedBackend(script)], tools=[Search()]
        )
        trajs.append((await agent.run("What is the figure?", rollout_id=f"r{i}")).trajectory)
    rule = RuleBasedSummarizer()
    return [rule.summarize_now(t) for t in trajs], {t.rollout_id: t for t in trajs}


async def costs(n: int, v: int) -> list[tuple[str, int, int]]:
    summaries, trajectories = await real_population(n)
    rows = [
        (
            "one rollout (mean)",
            round(sum(s.cost.model_calls for s in summaries) / n),
            round(sum(s.cost.usage.total_tokens for s in summaries) / n),
        )
    ]

    async def spend(
        name: str,
        aggregator: Aggregator,
        backend: ModelBackend,
        trajectories: Mapping[str, Trajectory] | None = None,
    ) -> str:
        """Run ``aggregator`` on its own ledger and add what the ledger spent."""
        ledger = BudgetLedger(name)
        context = AggregationContext.metered(backend, ledger, trajectories=trajectories)
        result = await aggregator.aggregate("What is the figure?", summaries, context)
        rows.append((name, ledger.spent.model_calls, ledger.spent.usage.total_tokens))
        return result.rationale

    judge_backend = ScriptedBackend(["1"], on_exhausted="repeat_last")
    await spend("majority", MajorityVote(), judge_backend)
    await spend(f"rtv g=2 v={v}", RTV(ModelJudge(), g=2, v=v), judge_backend)
    await spend("compressed", CompressedReasoning(), ScriptedBackend(["Report 1"]))
    agg_backend = ScriptedBackend(
        [
            ScriptedToolCall("get_solution", {}),
            ScriptedToolCall("search_trajectory", {"id": "r0", "query": "figure 42", "k": 2}),
            ScriptedToolCall("finish", {"answer": TRUTH}),
        ]
    )
    one_rollout = rows[0][2]
    agent = AggregationAgent(max_turns=8, max_tokens=one_rollout)
    why = await spend("aggagent", agent, agg_backend, trajectories)
    if "majority fallback" in why:
        rows[-1] = ("aggagent (capped)", *rows[-1][1:])
    return rows


async def main(quick: bool) -> int:
    started = time.perf_counter()
    ps = [0.3, 0.5] if quick else [0.25, 0.4, 0.6]
    qs = [0.7] if quick else [0.6, 0.8]
    ns = [4, 8]
    v = 8
    trials = 120 if quick else 200
    mc_trials = 10_000
    print(
        f"# aggregator success, measured over {trials} populations vs predicted "
        f"(W={WRONG} wrong answers, RTV g=2 v={v}, PDR rounds=2 m=N k=3 beta={BETA})"
    )
    head = (
        f"{'p':>5} {'q':>4} {'N':>2} | {'method':<8} {'measured':>8} {'95% CI':>13} "
        f"{'predicted':>9} {'how':<16} {'bound':>7} | result"
    )
    print(head)
    print("-" * len(head))
    disagree = 0
    for seed, (p, q, n) in enumerate(product(ps, qs, ns)):
        wins = await measure(p, q, n, v=v, trials=trials, seed=seed)
        preds = {
            "majority": (majority_exact(p, n), None, "exact multinomial"),
            "rtv": (rtv_exact(p, q, n, v), None, "exact bracket"),
            "pdr": (
                pdr_monte_carlo(
                    p, q, n, rounds=2, k=3, v_sel=4, v=v, trials=mc_trials, seed=10_000 + seed
                ),
                mc_trials,
                f"MC x{mc_trials}",
            ),
        }
        for method, (pred, mc, how) in preds.items():
            k = wins[method]
            lo, hi = wilson(k, trials)
            b = knockout_bound(p, q, n, v)
            bound = ("vacuous" if b <= 0 else f"{b:.3f}") if method == "rtv" else ""
            result = verdict(k, trials, pred, mc)
            disagree += result != "agree"
            print(
                f"{p:>5.2f} {q:>4.2f} {n:>2} | {method:<8} {k / trials:>8.3f} "
                f"[{lo:.3f},{hi:.3f}] {pred:>9.3f} {how:<16} {bound:>7} | {result}"
            )
    print()
    print(
        "# aggregation cost on 8 real rollouts (agent loop + ScriptedBackend), "
        "relative to one rollout"
    )
    rows = await costs(8, v)
    base_calls, base_tokens = rows[0][1], rows[0][2]
    print(
        f"{'aggregator':<20} {'calls':>6} {'tokens':>8} {'x rollout calls':>16} "
        f"{'x rollout tokens':>17}"
    )
    for name, calls, tokens in rows:
        print(
            f"{name:<20} {calls:>6} {tokens:>8} {calls / base_calls:>16.2f} "
            f"{tokens / base_tokens:>17.2f}"
        )
    print(f"\n{disagree} disagreement(s); {time.perf_counter() - started:.1f} s")
    return 1 if disagree else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grid, fewer trials")
    args = parser.parse_args()
    configure_logging("WARNING")
    sys.exit(anyio.run(main, args.quick, backend_options={"use_uvloop": True}))
