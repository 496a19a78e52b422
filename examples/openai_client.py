"""Ask an agentrt daemon through the official ``openai`` client: every agent
is a model named ``agentrt/<agent>`` (here ``solver``, the agent of
``examples/agentrt.toml``); scaling goes in ``extra_body``.  Start the daemon
first (``agentrt serve --config examples/agentrt.toml``); ``AGENTRT_URL``
overrides its address and ``AGENTRT_TOKEN`` is its bearer token, if it has one.
"""

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("AGENTRT_URL", "http://127.0.0.1:8765/v1"),
    api_key=os.environ.get("AGENTRT_TOKEN", "no-token"),
)
reply = client.chat.completions.create(
    model="agentrt/solver",
    messages=[{"role": "user", "content": "What is 17 * 23?"}],
    extra_body={"rollouts": 4, "aggregate": "majority"},
)
print(reply.choices[0].message.content)
print(reply.usage)
