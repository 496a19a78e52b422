"""The shared memory bank on a workload where it can fail: a model that uses
the notes it sees only sometimes, and notes that are sometimes wrong.

    python bench/memory.py [--tasks 30] [--rollouts 5] [--flaky 0.15] [--seed 3]
                           [--use 1 0.5 0.2] [--corroborate 1 2] [--smoke]

The workload (a scripted model, no server): every task asks for the weights
of three items (new weights per task).  Each rollout looks them up in its
own order, each by two tool steps: ``search(topic)`` gives a document id,
``fetch(doc)`` the fact.  The source is flaky: a fetch returns a wrong
weight with probability ``--flaky``, and nothing says so.  With the bank,
each step shows the rollout the shared keys (the loop offers every tool
result to the bank); when a key gives a fact the rollout still needs, the
model fetches it with ``memory_get`` with probability ``use`` at that step
(of a fact's versions, the one the most rollouts agree on), and otherwise
looks it up itself.  ``--corroborate k``: a result is shared once ``k``
calls got it (1: the first result is shared at once, so a wrong one
spreads; 2: the runtime's default).  Both tools are read-only, so with
``k >= 2`` the loop also makes a call whose result the bank does not share
yet a second time, alongside the first (``recheck``, the default): two
calls that agree share the result at once.  Each such ``k`` has a row with
and one without the recheck.

Rows: without the bank, then per ``k``, recheck and ``use``: model and tool
calls per task (the rechecks counted), rollouts with every weight right,
and tasks whose majority answer (over the rollouts) is right.

``--smoke`` (what CI runs): 10 tasks, ``use`` 100%, then checks, exiting 1
when one fails: without the bank every rollout makes exactly 7 model calls
and 6 tool calls (three searches, three fetches, the answer); every row ran
every rollout; and with ``k = 2`` and the recheck the bank keeps at least
60% of the model calls ``k = 1`` saves, makes at most 0.9x the tool calls,
and the majority is right within 2 points of no bank.  Seeds 1-6 of the
full run (``use`` 100%): no bank 35.0 model calls per task, majority right
92% on average; ``k = 1`` 22.1, 63%; ``k = 2`` with the recheck 24.4 (82%
of the saving kept), 24.9 tool calls, 93%; without it 31.9 (24%), 97%.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import _smoke
import anyio

from agentrt.agents import Agent, AgentConfig, RolloutContext
from agentrt.protocols import ModelRequest, ToolMessage, ToolSpec, UserMessage
from agentrt.runtime.memory._bank import MemoryBank
from agentrt.runtime.memory._view import NOTE_HEADER, MemoryView
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools._memory_tools import memory_tools
from agentrt.tools._tool import Tool, ToolContext, ToolOutput

TOPICS = ("alpha", "beta", "gamma")
FACT = re.compile(r"^fact (\w+): \w+ weighs (\d+) kg", re.MULTILINE)
DOC = re.compile(r"^doc-(\w+)$")
KEY = re.compile(
    r"^- \[(\d+)\] fetch\(.*\) -> fact (\w+):.*?(?: \((\d+)(?: of \d+)? calls agree\))?$",
    re.MULTILINE,
)
TASK = re.compile(r"^task (\d+):")
SMOKE_TASKS = 10
SMOKE_SAVING_KEPT = 0.6
"""``--smoke``: model calls saved with the bank (k = 2, recheck, use 100%)
over those saved with k = 1 (no corroboration), at least."""
SMOKE_TOOL_BOUND = 0.9
"""``--smoke``: tool calls with the bank (k = 2, use 100%) over those without, at most."""
SMOKE_MAJORITY_POINTS = 2
"""``--smoke``: majority right with the bank (k = 2) at most this many points below none."""
DEFAULT_K = 2
"""The runtime's default: a tool result is shared once two rollouts got it."""


class Lookup:
    """``search`` or ``fetch``; counts its calls."""

    def __init__(self, name: str, param: str, world: World) -> None:
        self._spec = ToolSpec(
            name=name,
            description=f"the {name} lookup",
            parameters={
                "type": "object",
                "properties": {param: {"type": "string"}, "task": {"type": "integer"}},
                "required": [param, "task"],
            },
            # Calling it has no effect: the loop may call it again to check it.
            annotations={"readOnlyHint": True},
        )
        self.name, self.param, self.world = name, param, world
        self.calls = 0

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        self.calls += 1
        arg = str(arguments[self.param])
        if self.name == "search":
            return ToolOutput.of_text(f"doc-{arg}")
        topic = arg.removeprefix("doc-")
        weight = self.world.weights[int(arguments["task"])][topic]
        if self.world.rng.random() < self.world.flaky:
            weight += self.world.rng.choice((-3, -2, -1, 1, 2, 3))
        return ToolOutput.of_text(
            f"fact {topic}: {topic} weighs {weight} kg (source: registry entry {topic})"
        )


@dataclass
class World:
    """The tasks' true weights, the flaky source and the model's habits."""

    weights: list[dict[str, int]]
    flaky: float
    use: float
    rng: random.Random

    def model(self, request: ModelRequest) -> ReplySpec:
        """The scripted model: it reads everything off the request."""
        task_message = request.messages[1]
        assert isinstance(task_message, UserMessage)
        assert isinstance(task_message.content, str)
        found = TASK.match(task_message.content)
        assert found is not None
        task = int(found.group(1))
        rollout = int((request.request_id or "").rsplit("-", 1)[0].rsplit("r", 1)[1])
        order = TOPICS[rollout % 3 :] + TOPICS[: rollout % 3]
        facts: dict[str, str] = {}
        docs: set[str] = set()
        for message in request.messages:
            if isinstance(message, ToolMessage):
                facts.update(FACT.findall(message.content))
                if doc := DOC.match(message.content):
                    docs.add(doc.group(1))
        last = request.messages[-1]
        visible: dict[str, int] = {}
        if isinstance(last, UserMessage) and str(last.content).startswith(NOTE_HEADER):
            # Of a topic's versions, the one the most rollouts agree on.
            best: dict[str, tuple[int, int]] = {}
            for i, topic, agree in KEY.findall(str(last.content)):
                support = int(agree or 1)
                if topic not in best or support > best[topic][0]:
                    best[topic] = (support, int(i))
            visible = {topic: i for topic, (_, i) in best.items()}
        needed = [t for t in order if t not in facts]
        if not needed:
            return "answer: " + ", ".join(f"{t}={facts[t]}kg" for t in TOPICS)
        reuse = [
            ScriptedToolCall("memory_get", {"id": visible[t]})
            for t in needed
            if t in visible and self.rng.random() < self.use
        ]
        if reuse:
            return reuse
        topic = needed[0]
        if topic in docs:
            return ScriptedToolCall("fetch", {"doc": f"doc-{topic}", "task": task})
        return ScriptedToolCall("search", {"topic": topic, "task": task})


@dataclass
class Tally:
    model_calls: int = 0
    tool_calls: int = 0
    rollouts_right: int = 0
    rollouts: int = 0
    voted_right: int = 0
    tasks: int = 0


async def run_task(agent: Agent, task: int, run_id: str, rollouts: int) -> list[str | None]:
    """The task's rollouts, all at once; their answers."""
    prompt = f"task {task}: report the weights of alpha, beta and gamma."
    answers: list[str | None] = []

    async def one(rollout: int) -> None:
        result = await agent.run(prompt, RolloutContext.new(run_id=run_id, index=rollout))
        answers.append(result.trajectory.answer)

    async with anyio.create_task_group() as tg:
        for rollout in range(rollouts):
            tg.start_soon(one, rollout)
    return answers


async def measure(
    args: argparse.Namespace,
    use: float,
    *,
    bank_on: bool,
    corroborate: int = 2,
    recheck: bool = True,
) -> Tally:
    rng = random.Random(args.seed)
    weights = [{t: rng.randint(10, 99) for t in TOPICS} for _ in range(args.tasks)]
    world = World(weights, args.flaky, use, random.Random(args.seed + 1))
    backend = ScriptedBackend(world.model)
    search, fetch = Lookup("search", "topic", world), Lookup("fetch", "doc", world)
    tally = Tally()
    async with MemoryBank() as bank:
        for task in range(args.tasks):
            run_id = f"task{task}"
            view = (
                MemoryView(bank, run_id=run_id, k=6, corroborate=corroborate, recheck=recheck)
                if bank_on
                else None
            )
            tools: list[Tool] = [search, fetch, *(memory_tools(view) if view else [])]
            agent = Agent(
                AgentConfig(name="weigher", limits={"max_steps": 20}),
                backends=[backend],
                tools=tools,
                memory=view,
            )
            truth = "answer: " + ", ".join(f"{t}={weights[task][t]}kg" for t in TOPICS)
            answers = await run_task(agent, task, run_id, args.rollouts)
            expected = truth.removeprefix("answer: ")
            normalized = [(a or "").removeprefix("answer: ") for a in answers]
            tally.rollouts += len(answers)
            tally.rollouts_right += sum(a == expected for a in normalized)
            voted = Counter(normalized).most_common(1)[0][0]
            tally.voted_right += voted == expected
            tally.tasks += 1
    tally.model_calls = len(backend.requests)
    tally.tool_calls = search.calls + fetch.calls
    return tally


def row_name(k: int | None, use: float, recheck: bool) -> str:
    """A row's name in ``main_async``'s table (and for ``smoke_checks``)."""
    if k is None:
        return "no bank"
    return f"bank k={k}{'' if recheck or k == 1 else ' no recheck'}, use {use:.0%}"


def smoke_checks(args: argparse.Namespace, rows: dict[str, Tally]) -> int:
    """``--smoke``: every row sane; with corroboration (the default policy,
    notes used always) the majority as right as without the bank (within
    ``SMOKE_MAJORITY_POINTS``) on fewer model and tool calls."""
    checks: list[tuple[str, str, bool]] = []
    for name, t in rows.items():
        sane = (
            t.tasks == args.tasks
            and t.rollouts == args.tasks * args.rollouts
            and t.rollouts_right <= t.rollouts
            and t.voted_right <= t.tasks
            and t.model_calls > 0
        )
        checks.append((f"{name}: {args.rollouts} rollouts x {args.tasks} tasks ran",
                       f"{t.rollouts}", sane))  # fmt: skip
    off = rows["no bank"]
    # Without notes a rollout searches and fetches each topic, then answers.
    tools, per = 2 * len(TOPICS), args.tasks * args.rollouts
    exact = (off.model_calls, off.tool_calls) == ((tools + 1) * per, tools * per)
    checks.append((f"no bank: {tools + 1} model + {tools} tool calls per rollout",
                   f"{off.model_calls} + {off.tool_calls}", exact))  # fmt: skip
    if (on := rows.get(f"bank k={DEFAULT_K}, use 100%")) is not None:
        model = on.model_calls / max(off.model_calls, 1)
        first = rows.get("bank k=1, use 100%")
        saved = off.model_calls - (first.model_calls if first is not None else 0)
        kept = (off.model_calls - on.model_calls) / max(saved, 1)
        tool = on.tool_calls / max(off.tool_calls, 1)
        points = 100 * (off.voted_right - on.voted_right) / max(off.tasks, 1)
        checks += [
            (f"bank k={DEFAULT_K} (use 100%) / no bank: model calls < 1", f"{model:.2f}",
             model < 1),
            (f"bank k={DEFAULT_K} (use 100%): share of k=1's saving kept >= "
             f"{SMOKE_SAVING_KEPT}", f"{kept:.2f}", kept >= SMOKE_SAVING_KEPT),
            (f"bank k={DEFAULT_K} (use 100%) / no bank: tool calls <= {SMOKE_TOOL_BOUND}",
             f"{tool:.2f}", tool <= SMOKE_TOOL_BOUND),
            (f"bank k={DEFAULT_K} (use 100%): majority right within "
             f"{SMOKE_MAJORITY_POINTS} points of no bank", f"{-points:+.0f}",
             points <= SMOKE_MAJORITY_POINTS),
        ]  # fmt: skip
    print("\nsmoke checks")
    return _smoke.verdict(checks, 66, 12)


async def main_async(args: argparse.Namespace) -> int:
    print(
        f"# shared memory bank: {args.tasks} tasks x {args.rollouts} rollouts, "
        f"flaky source {args.flaky:.0%} (seed {args.seed})"
    )
    print(
        "| notes used when seen | bank (k: rollouts that must agree) | recheck "
        "| model calls/task | tool calls/task | rollouts right | majority right |"
    )
    print("|---|---|---|---|---|---|---|")
    rows: dict[str, Tally] = {}
    runs: list[tuple[float, int | None, bool]] = [(args.use[0], None, False)]
    for k in args.corroborate:
        # With k = 1 every result is shared at once: nothing to recheck.
        runs += [(use, k, recheck) for recheck in ((False,) if k == 1 else (True, False))
                 for use in args.use]  # fmt: skip
    for use, k, recheck in runs:
        t = await measure(args, use, bank_on=k is not None, corroborate=k or 1, recheck=recheck)
        rows[row_name(k, use, recheck)] = t
        n = max(t.tasks, 1)
        print(
            f"| {f'{use:.0%}' if k is not None else '-'} | "
            f"{f'k={k}' + (' (default)' if k == DEFAULT_K else '') if k else 'no'} | "
            f"{('yes (default)' if recheck else 'no') if k and k > 1 else '-'} | "
            f"{t.model_calls / n:.1f} | {t.tool_calls / n:.1f} | "
            f"{t.rollouts_right / max(t.rollouts, 1):.0%} | {t.voted_right / n:.0%} |"
        )
    return smoke_checks(args, rows) if args.smoke else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--rollouts", type=int, default=5, help="rollouts per task")
    parser.add_argument("--flaky", type=float, default=0.15, help="chance a fetch is wrong")
    parser.add_argument(
        "--use",
        type=float,
        nargs="+",
        default=[1.0, 0.5, 0.2],
        help="chances the model uses a note it sees (one row each)",
    )
    parser.add_argument(
        "--corroborate",
        type=int,
        nargs="+",
        default=[1, DEFAULT_K],
        help="calls that must get the same result before it is shared (rows each per "
        "--use, with and without the recheck; 1: the first result is shared at once)",
    )
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's short form: {SMOKE_TASKS} tasks, notes used always; exits 1 when a row "
        "did not run, the calls without the bank are not 7 + 6 per rollout, or the bank "
        f"with k={DEFAULT_K} does not keep {SMOKE_SAVING_KEPT:.0%} of k=1's model-call "
        f"saving, at most {SMOKE_TOOL_BOUND}x "
        f"the tool calls, with the majority within {SMOKE_MAJORITY_POINTS} points",
    )
    if parser.parse_known_args(argv)[0].smoke:
        # An explicit --tasks, --use or --corroborate still wins.
        parser.set_defaults(tasks=SMOKE_TASKS, use=[1.0], corroborate=[1, DEFAULT_K])
    return anyio.run(main_async, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
