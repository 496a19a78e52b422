"""``agentrt.testing``: the fakes agentrt ships for tests (public API).

A scripted in-process model backend, a recording notification sink and a
simulated OpenAI/SGLang model server; see ``agentrt.runtime.testing`` for
the details.  This module only re-exports.
"""

from agentrt.runtime.testing._notifications import RecordingSink
from agentrt.runtime.testing._scripted import (
    ReplySpec,
    Script,
    ScriptedBackend,
    ScriptedReply,
    ScriptedToolCall,
    ScriptExhausted,
)
from agentrt.runtime.testing.sim._radix import RadixCache
from agentrt.runtime.testing.sim._sim_config import FaultKind, SimServerConfig
from agentrt.runtime.testing.sim._sim_runner import (
    SimServer,
    spawn_sim_server,
    start_sim_server_process,
)

__all__ = [
    "FaultKind",
    "RadixCache",
    "RecordingSink",
    "ReplySpec",
    "Script",
    "ScriptExhausted",
    "ScriptedBackend",
    "ScriptedReply",
    "ScriptedToolCall",
    "SimServer",
    "SimServerConfig",
    "spawn_sim_server",
    "start_sim_server_process",
]
