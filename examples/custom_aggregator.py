"""A custom aggregator passed to the runtime as a Python object.

``MostSupported`` picks the answer whose rollouts cite the most verified
facts (ties: the most rollouts); any object with a ``name`` and an async
``aggregate(task, summaries, context)`` is an aggregator.  The context gives
it the run's id, events, trajectories and a model backend metered on the
run's budget ledger (its only model access; this one needs none).  Runs on
``agentrt.testing.ScriptedBackend``.
"""

import re
from collections import Counter
from collections.abc import Sequence

import agentrt
from agentrt import configure_logging
from agentrt.aggregators import AggregationContext, AggregationResult, usable
from agentrt.protocols import ModelRequest, ScalingSpec, TrajectorySummary
from agentrt.testing import ScriptedBackend


class MostSupported:
    name = "most-supported"

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        score: Counter[str] = Counter()
        for s in kept:
            score[s.answer or ""] += 1 + 10 * sum(f.verified for f in s.facts)
        best, points = score.most_common(1)[0]
        winner = next(s.rollout_id for s in kept if s.answer == best)
        why = f"{best!r} scored {points} over {len(kept)} answered rollouts"
        return AggregationResult(answer=best, winner=winner, rationale=why, excluded=excluded)


def model(request: ModelRequest) -> str:
    found = re.search(r"-r(\d+)-", request.request_id or "")
    return "Lyon" if found and int(found.group(1)) % 2 else "Paris"


if __name__ == "__main__":
    configure_logging("WARNING")
    result = agentrt.run(
        "What is the capital of France?",
        backends=[ScriptedBackend(model)],
        scaling=ScalingSpec(rollouts=3),
        aggregator=MostSupported(),
        config={"warm_prefix": False},
    )
    print(f"answer: {result.answer}")
    print(f"why: {result.rationale}")
