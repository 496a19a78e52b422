"""Wire types: pure data and codecs, shared by every layer.

This package owns the shapes that cross boundaries: chat messages, tool calls
and results (OpenAI shape), model requests and replies, steps, trajectories,
summaries, events and run records.  It imports nothing from the rest of
agentrt and does no I/O; everything here is a frozen ``msgspec.Struct`` that
round-trips through JSON.  Types that are persisted carry ``schema_version``.
"""

from agentrt.protocols.codec import decode, decode_event, encode, to_builtins
from agentrt.protocols.events import (
    BudgetUpdated,
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutQueued,
    RolloutRestarted,
    RolloutStarted,
    RunFinished,
    RunStarted,
    SignalRaised,
    StepRecorded,
    SummaryWritten,
    TokenDelta,
    ToolCalled,
    ToolProgress,
    VoteCast,
)
from agentrt.protocols.ids import RolloutId, sub_rollout_id
from agentrt.protocols.messages import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols.model import (
    Choice,
    FinishReason,
    ModelReply,
    ModelRequest,
    SamplingParams,
    TokenLogprob,
    TopLogprob,
)
from agentrt.protocols.run import (
    Budget,
    RunOptions,
    RunRequest,
    RunResult,
    RunStatus,
    ScalingSpec,
)
from agentrt.protocols.tools import ToolResult, ToolSpec
from agentrt.protocols.trajectory import (
    SCHEMA_VERSION,
    Fact,
    RoutingDecision,
    Step,
    Trajectory,
    TrajectoryStatus,
    TrajectorySummary,
)
from agentrt.protocols.usage import Cost, Usage

__all__ = [
    "SCHEMA_VERSION",
    "AssistantMessage",
    "Budget",
    "BudgetUpdated",
    "ChatMessage",
    "Choice",
    "Cost",
    "ErrorRaised",
    "Event",
    "Fact",
    "FinishReason",
    "FunctionCall",
    "ImagePart",
    "ModelReply",
    "ModelRequest",
    "RolloutFinished",
    "RolloutId",
    "RolloutQueued",
    "RolloutRestarted",
    "RolloutStarted",
    "RoutingDecision",
    "RunFinished",
    "RunOptions",
    "RunRequest",
    "RunResult",
    "RunStarted",
    "RunStatus",
    "SamplingParams",
    "ScalingSpec",
    "SignalRaised",
    "Step",
    "StepRecorded",
    "SummaryWritten",
    "SystemMessage",
    "TextPart",
    "TokenDelta",
    "TokenLogprob",
    "ToolCall",
    "ToolCalled",
    "ToolMessage",
    "ToolProgress",
    "ToolResult",
    "ToolSpec",
    "TopLogprob",
    "Trajectory",
    "TrajectoryStatus",
    "TrajectorySummary",
    "Usage",
    "UserMessage",
    "VoteCast",
    "decode",
    "decode_event",
    "encode",
    "sub_rollout_id",
    "to_builtins",
]
