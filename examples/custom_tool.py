"""A custom tool: a Python function the agent calls, passed as an object.

The scripted model asks the ``unit_price`` tool for the price of apples,
then answers with what the tool returned.  Runs on
``agentrt.testing.ScriptedBackend``.
"""

import agentrt
from agentrt import configure_logging
from agentrt.agents import AgentConfig
from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools import tool

PRICES = {"apple": 0.5, "pear": 0.75}


@tool
def unit_price(item: str) -> str:
    """The price of one ``item`` in euros."""
    return f"{PRICES[item]:.2f} EUR"


def model(request: ModelRequest) -> str | ScriptedToolCall:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):  # the tool answered: report it
        return f"One apple costs {last.content}."
    return ScriptedToolCall(name="unit_price", arguments={"item": "apple"})


if __name__ == "__main__":
    configure_logging("WARNING")
    result = agentrt.run(
        "How much does an apple cost?",
        backends=[ScriptedBackend(model)],
        tools=[unit_price],
        agent=AgentConfig(name="shopper", tools=["unit_price"]),
    )
    print(f"answer: {result.answer}")
    print(f"model calls: {result.cost.model_calls}")
