"""Agents: the tool-calling loop, hierarchy specs, delegation, context folding,
trajectory summaries and behaviour signals.

May import the runtime floor and tools; never aggregators or the roof.
"""

from agentrt.agents.actor import AgentActor, AgentHandle, AgentMessage, RunRollout, spawn_agent
from agentrt.agents.agent import Agent
from agentrt.agents.config import (
    AgentConfig,
    AgentLimits,
    ContextConfig,
    SignalConfig,
    SignalName,
)
from agentrt.agents.context import CharEstimator, ContextWindow, TokenEstimator
from agentrt.agents.control import RolloutControl, RolloutResult
from agentrt.agents.recording import EventEmitter, EventLog, EventSink, stream_sink
from agentrt.agents.signals import Fired, SignalTracker
from agentrt.agents.toolbox import CallsOutcome, Toolbox

__all__ = [
    "Agent",
    "AgentActor",
    "AgentConfig",
    "AgentHandle",
    "AgentLimits",
    "AgentMessage",
    "CallsOutcome",
    "CharEstimator",
    "ContextConfig",
    "ContextWindow",
    "EventEmitter",
    "EventLog",
    "EventSink",
    "Fired",
    "RolloutControl",
    "RolloutResult",
    "RunRollout",
    "SignalConfig",
    "SignalName",
    "SignalTracker",
    "TokenEstimator",
    "Toolbox",
    "spawn_agent",
    "stream_sink",
]
