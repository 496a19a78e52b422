"""agentrt: a multi-agent orchestration runtime with inference-time scaling.

This module is the application surface: ``Runtime`` (the engine, an async
context manager), ``RuntimeConfig``, the synchronous ``run``, what a run
returns (``RunResult``), what it is asked for (``ScalingSpec``, ``Budget``),
``configure_logging`` for applications that want agentrt's log format, and the
error tree.  Extension surfaces: ``agentrt.protocols`` (the data types),
``agentrt.agents``, ``agentrt.tools``, ``agentrt.aggregators``,
``agentrt.models``, ``agentrt.actors`` and ``agentrt.testing``.  Every other
module is private (``_name.py``, or anything under ``agentrt.runtime``).

Importing ``agentrt`` has no side effects: no logging set-up, no directories,
no event loop; the engine and the data types load on first use.
"""

from typing import TYPE_CHECKING, Any

from agentrt._version import __version__
from agentrt.runtime.kernel import _lazy_exports
from agentrt.runtime.kernel._actor_errors import ActorError
from agentrt.runtime.kernel._errors import (
    AgentrtError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    BudgetExceeded,
    ConfigError,
    ControlSignal,
    InvalidRequestError,
    MalformedReply,
    RateLimited,
    RuntimeFailure,
    ToolCrashed,
    ToolError,
    UnknownModelError,
    UserError,
)

if TYPE_CHECKING:
    from agentrt.protocols._run import Budget, RunResult, ScalingSpec
    from agentrt.runtime.config._runtime_config import RuntimeConfig
    from agentrt.runtime.engine._runtime import Runtime, run
    from agentrt.runtime.observe._log import configure_logging

# The engine pulls in every layer; loading it on first use keeps
# ``import agentrt.protocols`` (and the command line's start) light.
_LAZY = {
    "Budget": "agentrt.protocols._run",
    "RunResult": "agentrt.protocols._run",
    "ScalingSpec": "agentrt.protocols._run",
    "RuntimeConfig": "agentrt.runtime.config._runtime_config",
    "Runtime": "agentrt.runtime.engine._runtime",
    "run": "agentrt.runtime.engine._runtime",
    "configure_logging": "agentrt.runtime.observe._log",
}


def __getattr__(name: str) -> Any:
    return _lazy_exports.load(globals(), _LAZY, name)


__all__ = [
    "ActorError",
    "AgentrtError",
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "Budget",
    "BudgetExceeded",
    "ConfigError",
    "ControlSignal",
    "InvalidRequestError",
    "MalformedReply",
    "RateLimited",
    "RunResult",
    "Runtime",
    "RuntimeConfig",
    "RuntimeFailure",
    "ScalingSpec",
    "ToolCrashed",
    "ToolError",
    "UnknownModelError",
    "UserError",
    "__version__",
    "configure_logging",
    "run",
]
