"""Ask the embedded default model one question: no server, no network, no GPU."""

import anyio

from agentrt.models import EmbeddedBackend
from agentrt.protocols import ModelRequest, SamplingParams, UserMessage


async def main() -> None:
    async with EmbeddedBackend() as model:  # SmolLM2-135M through llama.cpp, in-process
        request = ModelRequest(
            messages=[UserMessage(content="Name a colour.")], sampling=SamplingParams(max_tokens=32)
        )
        reply = await model.complete(request)
        print(reply.message.content, reply.usage)


anyio.run(main)
