"""agentrt: a multi-agent orchestration runtime with inference-time scaling.

The repository root is this package; its folders are the subpackages:

- ``agentrt.protocols``   pure data: messages, tool calls, trajectories, events
- ``agentrt.runtime``     the actor kernel, model backends, budgets (floor) and
                          the facade, CLI and daemon (roof)
- ``agentrt.tools``       tools and MCP connections
- ``agentrt.agents``      the agent loop and hierarchies
- ``agentrt.aggregators`` voting, tournaments, distill-refine

Importing ``agentrt`` has no side effects: no logging set-up, no directories,
no event loop.
"""

from agentrt._version import __version__

__all__ = ["__version__"]
