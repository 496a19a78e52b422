"""Agents: the tool-calling loop, hierarchy specs, delegation, context folding,
trajectory summaries and behaviour signals.

May import the runtime floor and tools; never aggregators or the roof.
"""

from agentrt.agents._agent import Agent
from agentrt.agents._agent_config import (
    AgentConfig,
    AgentLimits,
    ContextConfig,
    SignalConfig,
    SignalName,
)
from agentrt.agents._behaviour_signals import Fired, SignalTracker
from agentrt.agents._branching import (
    BranchingConfig,
    BranchingResult,
    BranchPoint,
    PartialRolloutBrancher,
)
from agentrt.agents._context import CharEstimator, ContextWindow, TokenEstimator
from agentrt.agents._control import RolloutContext, RolloutControl, RolloutResult, Runnable
from agentrt.agents._delegation import AgentNode, SubAgentTool
from agentrt.agents._hierarchy import Hierarchy, build_hierarchy
from agentrt.agents._pipeline import PipelineNode, PipelineResult
from agentrt.agents._recording import EventEmitter, EventLog, EventSink, stream_sink
from agentrt.agents._spec import AgentSpec, PipelineSpec, SpecError
from agentrt.agents._spec_loader import SpecSet, load_spec
from agentrt.agents._spec_tools import PromptStartSpec, ResourceAttachment
from agentrt.agents._summary import ModelSummarizer, RuleBasedSummarizer, Summarizer
from agentrt.agents._token_stream import TokenBuffer, TokenPacer
from agentrt.agents._toolbox import CallsOutcome, Toolbox
from agentrt.agents._uncertainty import StepUncertainty, step_uncertainty

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
    "PromptStartSpec",
    "ResourceAttachment",
    "RolloutContext",
    "RolloutControl",
    "RolloutResult",
    "RuleBasedSummarizer",
    "Runnable",
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
