"""Embed agentrt in an application: 4 rollouts of the default agent on the
embedded model, majority vote, a hard token budget (the README's example)."""

import anyio

import agentrt
from agentrt.protocols import Budget, ScalingSpec


async def main() -> None:
    async with agentrt.Runtime(agentrt.RuntimeConfig()) as rt:  # no models: embedded SmolLM2
        result = await rt.run(
            "What is 6 x 7?",
            scaling=ScalingSpec(rollouts=4, aggregate="majority"),
            budget=Budget(max_tokens=20_000),
        )
    print(result.status, result.answer)
    print(f"{result.cost.model_calls} model calls, {result.cost.usage.total_tokens} tokens")


anyio.run(main)
