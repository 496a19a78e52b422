"""agentrt: a multi-agent orchestration runtime with inference-time scaling.

The repository root is this package; its folders are the subpackages:

- ``agentrt.protocols``   pure data: messages, tool calls, trajectories, events
- ``agentrt.runtime``     the actor kernel, model backends, budgets (floor) and
                          the facade, CLI and daemon (roof)
- ``agentrt.tools``       tools and MCP connections
- ``agentrt.agents``      the agent loop and hierarchies
- ``agentrt.aggregators`` voting, tournaments, distill-refine

Importing ``agentrt`` has no side effects: no logging set-up, no directories,
no event loop.  ``Runtime``, ``RuntimeConfig`` and ``run`` (the embedding
facade, ``agentrt.runtime.engine``) load on first use.
"""

from typing import TYPE_CHECKING, Any

from agentrt._version import __version__

if TYPE_CHECKING:
    from agentrt.runtime.engine import Runtime, RuntimeConfig, run

_FACADE = frozenset({"Runtime", "RuntimeConfig", "run"})


def __getattr__(name: str) -> Any:
    # The facade pulls in every layer; importing it on first use keeps
    # ``import agentrt.protocols`` (and the CLI's start) light.
    if name in _FACADE:
        from agentrt.runtime import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'agentrt' has no attribute {name!r}")


__all__ = ["Runtime", "RuntimeConfig", "__version__", "run"]
