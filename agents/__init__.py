"""Agents: the tool-calling loop, hierarchy specs, delegation, context folding,
trajectory summaries and behaviour signals.

May import the runtime floor and tools; never aggregators or the roof.
"""

from agentrt.agents.agent import Agent
from agentrt.agents.branching import (
    BranchingConfig,
    BranchingResult,
    BranchPoint,
    PartialRolloutBrancher,
)
from agentrt.agents.config import (
    AgentConfig,
    AgentLimits,
    ContextConfig,
    SignalConfig,
    SignalName,
)
from agentrt.agents.context import CharEstimator, ContextWindow, TokenEstimator
from agentrt.agents.control import RolloutControl, RolloutResult
from agentrt.agents.delegation import AgentNode, SubAgentTool
from agentrt.agents.hierarchy import Hierarchy, build_hierarchy
from agentrt.agents.pipeline import PipelineNode, PipelineResult
from agentrt.agents.recording import EventEmitter, EventLog, EventSink, stream_sink
from agentrt.agents.signals import Fired, SignalTracker
from agentrt.agents.spec import AgentSpec, PipelineSpec, SpecError
from agentrt.agents.spec_loader import SpecSet, load_spec
from agentrt.agents.summary import ModelSummarizer, RuleBasedSummarizer, Summarizer
from agentrt.agents.token_stream import TokenBuffer, TokenPacer
from agentrt.agents.toolbox import CallsOutcome, Toolbox
from agentrt.agents.uncertainty import StepUncertainty, step_uncertainty

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentLimits",
    "AgentNode",
    "AgentSpec",
    "BranchPoint",
    "BranchingConfig",
    "BranchingResult",
    "CallsOutcome",
    "CharEstimator",
    "ContextConfig",
    "ContextWindow",
    "EventEmitter",
    "EventLog",
    "EventSink",
    "Fired",
    "Hierarchy",
    "ModelSummarizer",
    "PartialRolloutBrancher",
    "PipelineNode",
    "PipelineResult",
    "PipelineSpec",
    "RolloutControl",
    "RolloutResult",
    "RuleBasedSummarizer",
    "SignalConfig",
    "SignalName",
    "SignalTracker",
    "SpecError",
    "SpecSet",
    "StepUncertainty",
    "SubAgentTool",
    "Summarizer",
    "TokenBuffer",
    "TokenEstimator",
    "TokenPacer",
    "Toolbox",
    "build_hierarchy",
    "load_spec",
    "step_uncertainty",
    "stream_sink",
]
