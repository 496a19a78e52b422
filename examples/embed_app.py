"""An application embedding agentrt: 4 rollouts, a tournament (RTV), live events.

Runs on ``agentrt.testing.ScriptedBackend`` (deterministic, no model needed):
three rollouts answer 42, one answers 41, and the scripted judge prefers the
attempt that says 42 (it is asked only where answers differ: 4 rollouts and
one judge call).  Swap ``backends=[...]`` for a ``RuntimeConfig`` with a
``models`` section to run it on a real model.
"""

import re

import anyio

import agentrt
from agentrt import configure_logging
from agentrt.protocols import ModelRequest, RunFinished, SummaryWritten, VoteCast
from agentrt.testing import ScriptedBackend

ANSWERS = {"0": "42", "1": "41", "2": "42", "3": "42"}


def model(request: ModelRequest) -> str:
    rollout = re.search(r"-r(\d+)-\d+$", request.request_id or "")
    if rollout:  # a rollout's step: its answer
        return ANSWERS[rollout.group(1)]
    if (request.request_id or "").endswith("-warm"):  # the prefix warm-up
        return "ok"
    prompt = str(request.messages[-1].content)  # a judge comparison
    attempts = re.split(r"Attempt (\d+):", prompt)[1:]
    return next(
        (n for n, text in zip(attempts[::2], attempts[1::2], strict=True) if "42" in text), "1"
    )


async def main() -> None:
    configure_logging("WARNING")
    config = agentrt.RuntimeConfig(rollouts=4, aggregate="rtv", aggregate_options={"g": 2, "v": 1})
    async with (
        agentrt.Runtime(config, backends=[ScriptedBackend(model)]) as rt,
        rt.stream("What is 6 x 7?") as events,
    ):
        async for event in events:
            match event:
                case SummaryWritten(summary=s):
                    print(f"rollout {s.rollout_id.rsplit('-', 1)[-1]} answered {s.answer}")
                case VoteCast(round=r, winner=w):
                    print(f"round {r}: winner {w.rsplit('-', 1)[-1] if w else None}")
                case RunFinished(answer=answer, cost=cost):
                    tokens = cost.usage.total_tokens
                    print(f"answer: {answer} ({cost.model_calls} model calls, {tokens} tokens)")


if __name__ == "__main__":
    anyio.run(main)
