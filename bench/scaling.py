"""Simulation benchmark of the aggregators: measured success against prediction.

A population with known ground truth: each rollout is right with probability
``p`` (a wrong one answers one of ``W`` wrong values uniformly); each judge
comparison picks the right candidate with probability ``q``
(``SimulatedJudge``).  For a grid of (p, q, N), N = 3..8 (byes at 3, 5, 6
and 7), it runs the real aggregators (``MajorityVote``,
``RecursiveTournament`` G=2 with an even V, so vote ties happen) over ``T``
populations and prints, side by side, the measured success rate (with a 95%
Wilson interval) and the prediction:

- oracle@N: exact, 1 - (1-p)^N (some rollout right);
- majority@N: exact, from the multinomial (ties split uniformly, which is
  what "first seen wins" gives over exchangeable rollouts);
- RTV: exact, a recursion over the bracket (a mixed comparison is won by the
  right candidate with P(Bin(V, q) > V/2) + P(Bin(V, q) = V/2)/2: ties go to
  a seeded coin; a lone candidate advances on a bye);
- ``picked``: of the populations with some right rollout, the share the
  aggregator got right (predicted: aggregator / oracle);
- PDR (N = 4, 8): an independent Monte Carlo over answers only (no
  summaries, no judge objects, no anyio) of the same process: round 1 of N
  rollouts; a round whose answers all agree ends the rounds (early stop);
  else the K best by the level reached in an RTV bracket form the
  workspace; a conditioned rollout is right with probability
  p + (1-p)·beta·c/K (c right answers in it); a final RTV.

A row says ``agree`` when |measured - predicted| < 3.29 standard errors
(two-sided 0.1%); ``resolves`` is the error that would just fail (3.29
standard errors): with 16,000 populations (4,000 for RTV) every
closed-form row resolves an error under 3 points (``--shift 0.03`` moves
every prediction by 3 points to show the rows failing).

Then early stopping, measured: RTV's judge calls against the full bracket's
(N-1)·V (groups whose answers agree need no judge); PDR's refinement
rollouts with and without its converged-round stop; and the engine's early
stop of a majority vote (``Runtime`` + ``ScriptedBackend``, two rollouts in
flight) and its adaptive N (``ScalingSpec.confidence``): rollouts run with
and without them, and how many answers changed (the early stop must change
none; the adaptive one is a probabilistic stop).
Then the aggregation cost, in model calls and tokens relative to one
rollout, of each aggregator on a real population: eight rollouts of the
agent loop (``Agent`` + ``ScriptedBackend``, tokens as that backend counts
them) summarized by ``RuleBasedSummarizer``; judges and the aggregation
agent on ``ScriptedBackend`` too.

    python bench/scaling.py               # full grid (about a minute)
    python bench/scaling.py --quick       # fewer trials: rows resolve ~5 points
    python bench/scaling.py --smoke       # fewest trials, looser rows (CI, seconds)
    python bench/scaling.py --shift 0.03  # predictions 3 points off: rows fail

``--smoke`` (what CI runs): 1,000 populations per grid row (250 for RTV), 100
PDR runs, 10 early-stop tasks; a row then resolves only an error of about 6
points, and it disagrees beyond 4 standard errors (two-sided 0.006%) rather
than 3.29, since small samples are noisy.  The rest is checked as in the
full run: the engine's early stop changes no answer and the run without it
skips no rollout; and in every form a figure that cannot be (early stopping
spending more than the work without it, a rollout of no model calls) counts
as a disagreement.  Exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any

import anyio
import msgspec

from agentrt.agents import Agent, AgentConfig, RolloutContext
from agentrt.agents._summary import RuleBasedSummarizer
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
from agentrt.protocols import ModelRequest, ScalingSpec, ToolSpec, Trajectory, TrajectorySummary
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.evaluation._estimators import wilson_interval
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.observe._log import configure_logging
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContext, ToolOutput

WRONG = 3  # distinct wrong answers
TRUTH = "42"
BETA = 0.5  # how much a right answer in the workspace helps a conditioned rollout
Z = 3.29
RESOLVE = 0.03  # a closed-form row must detect an error this large


@dataclass(frozen=True)
class Sizes:
    """How many trials each section runs, and how far a row may be off."""

    trials: int
    """Populations per closed-form row."""
    rtv_trials: int
    """Of those, the ones RTV runs on (its judge calls are the slow part)."""
    pdr_trials: int
    mc_trials: int
    """Runs of PDR's independent Monte Carlo per row."""
    tasks: int
    """Tasks of the engine's early stop."""
    z: float = Z
    """A row disagrees beyond this many standard errors."""
    must_resolve: bool = False
    """Every closed-form row must resolve a ``RESOLVE`` error (else it counts as a failure)."""


FULL = Sizes(16_000, 4000, 800, 20_000, 100, must_resolve=True)
QUICK = Sizes(4000, 1000, 300, 20_000, 40)
SMOKE = Sizes(1000, 250, 100, 5000, 10, z=4.0)

# -- exact predictions ------------------------------------------------------------


def majority_exact(p: float, n: int, wrong: int = WRONG) -> float:
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
    """P(the winner of a G=2 RTV over n iid rollouts is right): a mixed
    comparison goes to the right candidate with win + tie/2 (the coin)."""
    win, tie = vote_win(v, q)
    beats = win + tie / 2
    pool = [p] * n
    while len(pool) > 1:
        nxt = []
        for i in range(0, len(pool), 2):
            if i + 1 == len(pool):
                nxt.append(pool[i])  # bye
                continue
            a, b = pool[i], pool[i + 1]
            nxt.append(a * b + (a * (1 - b) + (1 - a) * b) * beats)
        pool = nxt
    return pool[0]


def oracle_exact(p: float, n: int) -> float:
    return 1 - (1 - p) ** n


# -- independent Monte Carlo of PDR (answers only) ----------------------------------


def _bracket_bits(bits: list[bool], beats: float, rng: random.Random) -> list[int]:
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
            else:
                right, wrong = (a, b) if bits[a] else (b, a)
                nxt.append(right if rng.random() < beats else wrong)
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
    win, tie = vote_win(v_sel, q)
    sel = win + tie / 2
    win, tie = vote_win(v, q)
    fin = win + tie / 2
    ok = 0
    for _ in range(trials):
        prob = p
        answers: list[int] = []  # 0 is the right answer, 1..W the wrong ones
        for r in range(rounds):
            answers = [0 if rng.random() < prob else 1 + rng.randrange(WRONG) for _ in range(n)]
            if r + 1 < rounds:
                if len(set(answers)) == 1:
                    break  # the round converged: no further round
                bits = [a == 0 for a in answers]
                reached = _bracket_bits(bits, sel, rng)
                order = sorted(range(n), key=lambda i: -reached[i])[:k]
                c = sum(bits[i] for i in order)
                prob = p + (1 - p) * BETA * c / len(order)
        bits = [a == 0 for a in answers]
        reached = _bracket_bits(bits, fin, rng)
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


async def measure(
    p: float, q: float, n: int, *, v: int, trials: int, rtv_trials: int, seed: int
) -> dict[str, int]:
    """Over ``trials`` populations (RTV: the first ``rtv_trials``, its judge
    calls being the slow part): wins of majority and RTV, populations with
    some right rollout (oracle), the wins among those (picked), and RTV's
    judge calls."""
    rng = random.Random(seed)
    keys = ("majority", "rtv", "oracle", "rtv oracle", "majority picked", "rtv picked")
    out = dict.fromkeys((*keys, "rtv calls"), 0)
    majority = MajorityVote()
    for t in range(trials):
        pop = population(p, n, rng, f"t{t}")
        some = any(s.answer == TRUTH for s in pop)
        maj = (await majority.aggregate("task", pop, simulated())).answer == TRUTH
        out["majority"] += maj
        out["oracle"] += some
        out["majority picked"] += maj and some
        if t >= rtv_trials:
            continue
        judge = SimulatedJudge(TRUTH, q, seed=rng.randrange(1 << 30))
        rtv = RTV(judge, g=2, v=v, seed=rng.randrange(1 << 30))
        tv = (await rtv.aggregate("task", pop, simulated())).answer == TRUTH
        out["rtv"] += tv
        out["rtv oracle"] += some
        out["rtv picked"] += tv and some
        out["rtv calls"] = out["rtv calls"] + judge.calls
    return out


async def measure_pdr(
    p: float, q: float, n: int, *, v: int, trials: int, seed: int, stop: bool = True
) -> tuple[int, int]:
    """PDR's wins and its refinement rollouts over ``trials`` runs."""
    rng = random.Random(seed)
    wins = refined = 0
    for t in range(trials):
        judge = SimulatedJudge(TRUTH, q, seed=rng.randrange(1 << 30))
        rollout = simulated_rollout(p, rng, f"t{t}")
        pdr = PDR(
            judge, rounds=2, m=n, k=3, v=4, final=RTV(judge, g=2, v=v), stop_on_agreement=stop
        )
        wins += (await pdr.run("task", simulated(rollout))).answer == TRUTH
        refined += sum(len(r.summaries) for r in pdr.history[1:])
    return wins, refined


def verdict(
    k: int, trials: int, pred: float, pred_trials: int | None, bound: float = Z
) -> tuple[str, float]:
    """``agree`` or ``DISAGREE`` (beyond ``bound`` standard errors), and the
    error that would just fail."""
    var = pred * (1 - pred) / trials + (pred * (1 - pred) / pred_trials if pred_trials else 0)
    se = math.sqrt(var)
    z = abs(k / trials - pred) / se if se > 0 else (0.0 if k / trials == pred else 9)
    return ("agree" if z < bound else "DISAGREE"), bound * se


# -- early stop of the engine's majority vote ---------------------------------------

_ROLLOUT = re.compile(r"-r(\d+)-\d+$")


class EngineStop(msgspec.Struct, frozen=True):
    """One setting of the engine's early stop over the same tasks."""

    label: str
    calls: int
    """Rollouts' model calls (one per rollout)."""
    changed: int
    """Answers that differ from the full vote's."""
    right: int


async def engine_early_stop(p: float, n: int, tasks: int, seed: int) -> list[EngineStop]:
    """The same ``tasks`` populations of ``n`` rollouts (each answer fixed
    by the rollout's index) run with early stop off (the full vote), on
    (two rollouts in flight), and adaptive (``confidence`` 0.9, two at a
    time, up to ``n``)."""
    rng = random.Random(seed)
    answers = [
        [TRUTH if rng.random() < p else f"wrong{rng.randrange(WRONG)}" for _ in range(n)]
        for _ in range(tasks)
    ]
    current: list[str] = []  # the answers of the task being run, by rollout

    def reply(request: ModelRequest) -> str:
        found = _ROLLOUT.search(request.request_id or "")
        assert found is not None, request.request_id
        return current[int(found.group(1))]

    settings = [
        ("off", False, ScalingSpec(rollouts=n)),
        ("on", True, ScalingSpec(rollouts=n)),
        ("adaptive", False, ScalingSpec(rollouts=n, confidence=0.9, min_rollouts=2)),
    ]
    out: list[EngineStop] = []
    full: list[str | None] = []
    for label, early, scaling in settings:
        backend = ScriptedBackend(reply)
        config = {"early_stop": early, "concurrency": {"scripted": 2}}
        results: list[str | None] = []
        async with Runtime(config, backends=[backend]) as rt:
            for task_answers in answers:
                current[:] = task_answers
                results.append((await rt.run("What is it?", scaling=scaling)).answer)
        full = full or results
        out.append(
            EngineStop(
                label=label,
                calls=len(backend.requests),
                changed=sum(a != b for a, b in zip(results, full, strict=True)),
                right=sum(a == TRUTH for a in results),
            )
        )
    return out


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
        trajs.append(
            (
                await agent.run(
                    "What is the figure?", RolloutContext.new(run_id="run-fig", index=i)
                )
            ).trajectory
        )
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
    # N reports, then the picking call (every reply the same text).
    reports = ScriptedBackend(["Report 1"], on_exhausted="repeat_last")
    await spend("compressed", CompressedReasoning(), reports)
    agg_backend = ScriptedBackend(
        [
            ScriptedToolCall("get_solution", {}),
            ScriptedToolCall("search_trajectory", {"id": "r0", "query": "figure 42", "k": 2}),
            ScriptedToolCall("finish", {"solution": TRUTH, "reason": "r0 records it"}),
        ]
    )
    one_rollout = rows[0][2]
    agent = AggregationAgent(max_turns=8, max_tokens=one_rollout)
    why = await spend("aggagent", agent, agg_backend, trajectories)
    if "majority fallback" in why:
        rows[-1] = ("aggagent (capped)", *rows[-1][1:])
    return rows


async def closed_forms(
    sizes: Sizes, v: int, shift: float
) -> tuple[int, list[tuple[str, float, float]]]:
    """The closed-form grid; returns the disagreements and, per row, RTV's
    mean judge calls against the full bracket's."""
    ps = [0.35, 0.6]
    q = 0.7
    ns = [3, 4, 5, 6, 7, 8]
    trials, rtv_trials = sizes.trials, sizes.rtv_trials
    print(
        f"# oracle, majority and RTV at N = 3..8 (byes at 3, 5, 6, 7), {trials} populations "
        f"each ({rtv_trials} for RTV), vs exact predictions (W={WRONG} wrong answers, judge "
        f"accuracy q={q}, RTV g=2 v={v}: vote ties go to the coin)"
    )
    head = (
        f"{'p':>5} {'N':>2} | {'method':<8} {'measured':>8} {'95% CI':>13} {'predicted':>9} "
        f"{'resolves':>8} {'picked':>6} {'pred':>6} | result"
    )
    print(head)
    print("-" * len(head))
    disagree = unresolved = 0
    savings: list[tuple[str, float, float]] = []
    for seed, (p, n) in enumerate(product(ps, ns)):
        got = await measure(p, q, n, v=v, trials=trials, rtv_trials=rtv_trials, seed=seed)
        oracle = oracle_exact(p, n)
        preds = {
            "oracle": oracle,
            "majority": majority_exact(p, n),
            "rtv": rtv_exact(p, q, n, v),
        }
        # --shift: a deliberately wrong prediction, to see the rows fail
        preds = {m: min(1.0, max(0.0, x + shift)) for m, x in preds.items()}
        for method, pred in preds.items():
            k = got[method]
            runs = rtv_trials if method == "rtv" else trials
            lo, hi = wilson_interval(k, runs)
            result, resolves = verdict(k, runs, pred, None, sizes.z)
            disagree += result != "agree"
            unresolved += resolves >= RESOLVE
            picked = pred_picked = ""
            reach = got["rtv oracle" if method == "rtv" else "oracle"]
            if method != "oracle" and reach:
                picked = f"{got[f'{method} picked'] / reach:.3f}"
                pred_picked = f"{pred / oracle:.3f}"
            print(
                f"{p:>5.2f} {n:>2} | {method:<8} {k / runs:>8.3f} [{lo:.3f},{hi:.3f}] "
                f"{pred:>9.3f} {resolves:>8.3f} {picked:>6} {pred_picked:>6} | {result}"
            )
        savings.append((f"rtv p={p:.2f} N={n}", got["rtv calls"] / rtv_trials, float((n - 1) * v)))
    if unresolved and sizes.must_resolve:
        print(f"{unresolved} row(s) cannot resolve a {RESOLVE:.0%} error: more trials needed")
        disagree += unresolved
    return disagree, savings


async def pdr_rows(sizes: Sizes, v: int) -> tuple[int, list[tuple[str, float, float, str]]]:
    trials, mc_trials = sizes.pdr_trials, sizes.mc_trials
    q = 0.7
    print(
        f"\n# PDR (rounds=2 m=N k=3 beta={BETA}, converged rounds stop) over {trials} runs vs "
        f"an independent Monte Carlo x{mc_trials}"
    )
    disagree = 0
    rows: list[tuple[str, float, float, str]] = []
    for seed, (p, n) in enumerate(product([0.35, 0.6], [4, 8])):
        wins, refined = await measure_pdr(p, q, n, v=v, trials=trials, seed=100 + seed)
        pred = pdr_monte_carlo(
            p, q, n, rounds=2, k=3, v_sel=4, v=v, trials=mc_trials, seed=10_000 + seed
        )
        lo, hi = wilson_interval(wins, trials)
        result, resolves = verdict(wins, trials, pred, mc_trials, sizes.z)
        disagree += result != "agree"
        print(
            f"p={p:.2f} N={n} | pdr {wins / trials:.3f} [{lo:.3f},{hi:.3f}] predicted "
            f"{pred:.3f} (resolves {resolves:.3f}) | {result}"
        )
        if p == 0.6:
            no_stop_wins, no_stop = await measure_pdr(
                p, q, n, v=v, trials=trials, seed=100 + seed, stop=False
            )
            rows.append(
                (
                    f"pdr p={p:.2f} N={n}: refinement rollouts",
                    refined / trials,
                    no_stop / trials,
                    f"accuracy {wins / trials:.3f} vs {no_stop_wins / trials:.3f} without",
                )
            )
    return disagree, rows


async def main(sizes: Sizes, shift: float) -> int:
    started = time.perf_counter()
    v = 8
    disagree, rtv_savings = await closed_forms(sizes, v, shift)
    more, pdr_savings = await pdr_rows(sizes, v)
    disagree += more
    impossible: list[str] = []

    print("\n# early stopping: what was spent with it, against the same work without it")
    print(f"{'where':<42} {'with':>8} {'without':>8} {'saved':>6}  note")
    for name, spent, full in rtv_savings:
        print(
            f"{name + ': judge calls':<42} {spent:>8.1f} {full:>8.1f} "
            f"{1 - spent / full:>6.0%}  groups whose answers agree need no judge"
        )
        if not 0 < spent <= full:
            impossible.append(f"{name}: {spent:.1f} judge calls, the full bracket {full:.0f}")
    for name, spent, full, note in pdr_savings:
        print(f"{name:<42} {spent:>8.2f} {full:>8.2f} {1 - spent / full:>6.0%}  {note}")
        if not 0 < spent <= full:
            impossible.append(f"{name}: {spent:.2f} with the stop, {full:.2f} without")
    tasks = sizes.tasks
    off, on, adaptive = await engine_early_stop(0.7, 8, tasks, seed=7)
    print(
        f"{'majority p=0.70 N=8: rollout model calls':<42} {on.calls:>8} {off.calls:>8} "
        f"{1 - on.calls / off.calls:>6.0%}  engine early stop, 2 in flight; "
        f"{on.changed} of {tasks} answers changed"
    )
    print(
        f"{'  adaptive N (confidence 0.9, 2 at a time)':<42} {adaptive.calls:>8} "
        f"{off.calls:>8} {1 - adaptive.calls / off.calls:>6.0%}  {adaptive.changed} of {tasks} "
        f"answers changed; right {adaptive.right} vs {off.right} with all {8}"
    )
    if off.calls != tasks * 8 or on.changed:
        print("early stop changed an answer, or the run without it skipped rollouts: DISAGREE")
        disagree += 1
    if not (0 < on.calls <= off.calls and 0 < adaptive.calls <= off.calls):
        impossible.append("the engine's early stop made more rollout calls than the full vote")

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
    if base_calls <= 0 or base_tokens <= 0:
        impossible.append(f"one rollout made {base_calls} model calls of {base_tokens} tokens")
        base_calls, base_tokens = max(base_calls, 1), max(base_tokens, 1)
    for name, calls, tokens in rows:
        print(
            f"{name:<20} {calls:>6} {tokens:>8} {calls / base_calls:>16.2f} "
            f"{tokens / base_tokens:>17.2f}"
        )
    for what in impossible:
        print(f"impossible figure: {what}: DISAGREE")
    disagree += len(impossible)
    if sizes is SMOKE:
        print(
            f"\nsmoke: rows checked at {sizes.z:g} standard errors, not {Z} "
            "(loose: small samples are noisy); the full run checks the real bound"
        )
    print(f"\n{disagree} disagreement(s); {time.perf_counter() - started:.1f} s")
    return 1 if disagree else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer trials")
    size.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's short form: {SMOKE.trials:,} populations per row ({SMOKE.rtv_trials} for "
        f"RTV), {SMOKE.pdr_trials} PDR runs, {SMOKE.tasks} early-stop tasks; rows disagree "
        f"beyond {SMOKE.z:g} standard errors (not {Z}); exits 1 on a disagreement",
    )
    parser.add_argument(
        "--shift",
        type=float,
        default=0.0,
        help="add this to every closed-form prediction (0.03: the rows must disagree)",
    )
    args = parser.parse_args()
    configure_logging("WARNING")
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    sys.exit(anyio.run(main, sizes, args.shift, backend_options={"use_uvloop": True}))
