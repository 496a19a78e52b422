"""Ask the embedded default model one question: no server, no network, no GPU."""

import anyio

from agentrt.protocols import ModelRequest, UserMessage
from agentrt.runtime.models.embedded import EmbeddedBackend


async def main() -> None:
    async with EmbeddedBackend() as model:  # SmolLM2-135M through llama.cpp, in-process
        reply = await model.complete(ModelRequest(messages=[UserMessage(content="Name a colour.")]))
        print(reply.message.content, reply.usage)


anyio.run(main)
