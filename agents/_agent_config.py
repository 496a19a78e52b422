"""What an agent is, as configuration: ``AgentConfig`` and its parts.

Owns the user-facing (pydantic) description of one agent: its name and
instructions, which tools it may use, which model or routing policy serves
it, its limits, how its context is managed and which behaviour signals stop
it early, and what it takes from MCP servers (attached resources, the prompt
a rollout starts from).  A hierarchy spec (YAML), an agent of
``agentrt.toml`` and one built in Python all become an ``AgentConfig``; the
runtime dependencies (backends, tool objects, budget ledger, event sink, the
open MCP servers) are handed to ``agentrt.agents._agent.Agent`` separately.

Pure configuration: no I/O.  May import the runtime floor's configuration
types and the spec models of MCP context (``agents._spec_tools``); never
tools' implementations, aggregators or the roof.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentrt.agents._spec_tools import PromptStartSpec, ResourceAttachment
from agentrt.runtime.routing._routing_config import RoutingConfig

SignalName = Literal["loop", "stagnation", "tool_failure_rate", "exhaustion", "give_up"]
"""The behaviour signals computed per trajectory (see ``agents.signals``)."""

SIGNAL_NAMES: tuple[SignalName, ...] = (
    "loop",
    "stagnation",
    "tool_failure_rate",
    "exhaustion",
    "give_up",
)

#: Signals that end a rollout early unless configured otherwise.
DEFAULT_STOP_ON: tuple[SignalName, ...] = ("loop", "give_up")

#: Phrases by which a model says it cannot do the task (case-insensitive
#: regular expressions, searched in the assistant's text).
DEFAULT_GIVE_UP_PATTERNS: tuple[str, ...] = (
    r"\bI (?:can ?not|can't|am unable to|'m unable to|am not able to|'m not able to)"
    r" (?:do|complete|solve|answer|finish|perform|help with|accomplish|find a way)\b",
    r"\bI give up\b",
    r"\b(?:this|the) task (?:is|seems) (?:impossible|not possible|beyond)\b",
    r"\bI (?:don't|do not) know how to\b",
    r"\bunable to (?:complete|solve|answer|finish) (?:this|the)\b",
)


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class AgentLimits(_Config):
    """Hard limits of one rollout."""

    max_steps: int = Field(default=20, ge=1)
    """Model calls per rollout; reaching it ends the rollout as ``exhausted``."""
    max_tokens_per_step: int = Field(default=1024, ge=1)
    """Completion cap of each model call (``max_tokens``); also what the
    budget ledger reserves as the call's worst case."""
    min_tokens_per_step: int | None = Field(default=32, ge=1)
    """When the budget cannot fund a step's ``max_tokens_per_step``, the
    call still runs with ``max_tokens`` lowered to its share of what is
    left, but never below this: a step that cannot get it ends the rollout
    as ``exhausted`` (``budget: ...``).  ``None``: never lowered (a step
    whose worst case does not fit ends the rollout)."""
    max_rollout_tokens: int | None = Field(default=None, ge=1)
    """Tokens (prompt + completion, as the servers reported) one rollout may
    use; once used, the rollout ends as ``exhausted``.  ``None``: no limit
    beyond the budget ledger's caps."""
    tool_timeout_s: float = Field(default=60.0, gt=0)
    """Deadline of each tool call; a call past it is cancelled and the model
    is told it timed out."""
    model_timeout_s: float = Field(default=300.0, gt=0)
    """Deadline of each model call, retries included (on top of the
    backend's own per-request timeouts)."""


class ContextConfig(_Config):
    """How the prompt is kept within a context budget (``agents.context``)."""

    budget_tokens: int = Field(default=32_000, ge=64)
    """Estimated prompt tokens (messages plus tool definitions) a request may
    hold; past it the history is compacted."""
    compact_to: float = Field(default=0.6, gt=0.0, le=1.0)
    """Compaction shrinks the estimate to this share of the budget, so that
    it happens rarely (each compaction changes the history after the shared
    prefix, which the server then re-reads once)."""
    keep_recent_turns: int = Field(default=4, ge=1)
    """Most recent turns (assistant message plus its tool results) that are
    never folded."""
    max_tool_result_tokens: int = Field(default=2_000, ge=16)
    """A longer tool result is clipped (head and tail kept) before it enters
    the prompt; the step record keeps it whole."""
    note_chars: int = Field(default=160, ge=16)
    """Characters kept of each argument list, result or remark in a folded
    note."""
    chars_per_token: float = Field(default=3.0, gt=0.0)
    """The token estimate's divisor.  Deliberately generous (most tokenizers
    average about 4 characters per token in English) because the ledger
    reserves on this estimate."""


class SignalConfig(_Config):
    """Thresholds of the behaviour signals (``agents.signals``)."""

    loop_repeats: int = Field(default=3, ge=2)
    """``loop`` fires when the same set of tool calls (name and arguments)
    returns the same results this many times within ``loop_window`` steps
    (a call whose result changes, such as tests re-run between edits, is
    not a loop)."""
    loop_window: int = Field(default=6, ge=2)
    """Steps looked back over for repeated tool calls."""
    stagnation_steps: int = Field(default=3, ge=1)
    """``stagnation`` fires after this many consecutive tool-calling steps
    whose results all repeat earlier ones (no new information)."""
    failure_rate: float = Field(default=0.5, gt=0.0, le=1.0)
    """``tool_failure_rate`` fires when this share of tool calls failed..."""
    failure_min_calls: int = Field(default=4, ge=1)
    """...over at least this many calls."""
    exhaustion_fraction: float = Field(default=0.8, gt=0.0, le=1.0)
    """``exhaustion`` fires once this share of ``max_steps`` is used, or when
    the budget has less than ``budget_fraction_left`` left (and when either
    runs out)."""
    budget_fraction_left: float = Field(default=0.1, ge=0.0, le=1.0)
    """Budget share left under which ``exhaustion`` fires."""
    give_up_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_GIVE_UP_PATTERNS))
    """Regular expressions (case-insensitive) that mark the model's text as
    giving up."""


class AgentConfig(_Config):
    """One agent: who it is, what it may call, what serves it, its limits."""

    name: str = Field(min_length=1)
    """The agent's name (in events, trajectories and ledger names)."""
    instructions: str = "You are a helpful assistant. Use the tools when they help."
    """The system prompt.  Keep it free of per-rollout details (ids, times):
    it is the start of the prefix the model servers cache across rollouts."""
    tools: list[str] | None = None
    """Names of the tools it may call, from those handed to the agent;
    ``None``: all of them."""
    model: str | None = None
    """The model serving every step when no ``routing`` is given; ``None``
    with a single backend: that backend's first model."""
    routing: RoutingConfig | None = None
    """A per-step routing policy (tiers of models, cascade, threshold...);
    overrides ``model``."""
    temperature: float = Field(default=0.7, ge=0.0)
    """Sampling temperature of every model call."""
    logprobs: bool = False
    """Ask for token log-probabilities: routing's ``low_confidence`` signal
    reads their mean, and uncertainty-based branching needs them."""
    resources: list[ResourceAttachment] = Field(default_factory=list)
    """MCP resources shown to it at every step, after the history, kept
    current by subscription: each ``{mcp: SERVER, uri: ...}`` or ``{mcp:
    SERVER, template: ..., arguments: {...}}`` (``ResourceAttachment``)."""
    prompt: PromptStartSpec | None = None
    """An MCP prompt each rollout starts from, after the instructions and
    before the task: ``{mcp: SERVER, name: PROMPT, arguments: {...},
    complete: [ARG, ...]}`` (``PromptStartSpec``)."""
    limits: AgentLimits = AgentLimits()
    """Step, token and time limits."""
    context: ContextConfig = ContextConfig()
    """Context budget and compaction."""
    signals: SignalConfig = SignalConfig()
    """Signal thresholds."""
    stop_on: list[SignalName] = Field(default_factory=lambda: list(DEFAULT_STOP_ON))
    """Signals that end the rollout early (status ``failed``, stop reason
    ``signal: <name>``).  Every signal is emitted as an event regardless."""
    finish_tool: str | None = None
    """Name of a built-in tool (``final_answer``, ``finish``) whose call,
    with an ``answer`` string, ends the rollout with that answer.  A reply
    without tool calls always ends it too."""

    @model_validator(mode="after")
    def _distinct_tools(self) -> Self:
        if self.tools is not None:
            duplicates = sorted({t for t in self.tools if self.tools.count(t) > 1})
            if duplicates:
                raise ValueError(f"tools listed more than once: {', '.join(duplicates)}")
            if self.finish_tool is not None and self.finish_tool in self.tools:
                raise ValueError(
                    f"finish_tool {self.finish_tool!r} is built in; do not list it under tools"
                )
        return self


__all__ = [
    "DEFAULT_GIVE_UP_PATTERNS",
    "DEFAULT_STOP_ON",
    "SIGNAL_NAMES",
    "AgentConfig",
    "AgentLimits",
    "ContextConfig",
    "SignalConfig",
    "SignalName",
]
