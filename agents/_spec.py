"""Agent hierarchies as YAML: the models of a spec file (``AgentSpec``,
``PipelineSpec``, ``MultiFile``, limits and budget slices).

Pure configuration: reading files is ``agents.spec_loader``'s, building
``agents.hierarchy``'s.  May import the agents' configuration, routing and
MCP configuration models; never aggregators or the roof.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, field_validator, model_validator

from agentrt.agents._agent_config import (
    DEFAULT_STOP_ON,
    AgentConfig,
    AgentLimits,
    ContextConfig,
    SignalConfig,
    SignalName,
)
from agentrt.agents._spec_tools import (
    FILE_TOOLS,
    NAME_PATTERN,
    Approval,
    BuiltinName,
    BuiltinTool,
    McpServers,
    McpTools,
    PromptStartSpec,
    PythonTool,
    ResourceAttachment,
    SpecModel,
    ToolBinding,
    check_keys,
)
from agentrt.agents._spec_yaml import Loc, SpecError, SpecProblem
from agentrt.protocols._run import Budget
from agentrt.runtime.routing._routing_config import RoutingConfig

DEFAULT_INSTRUCTIONS = "You are a helpful assistant. Use the tools when they help."


# -- limits and budget slices ----------------------------------------------------


class BudgetCaps(SpecModel):
    """Absolute caps on what one call of a sub-agent (or one run of the
    entry agent) may spend; ``None`` = no cap of that kind."""

    max_tokens: int | None = Field(default=None, ge=0)
    """Prompt plus completion tokens."""
    max_usd: float | None = Field(default=None, ge=0)
    """Money, by the run's price table."""
    max_model_calls: int | None = Field(default=None, ge=0)
    """Model calls."""
    max_wall_seconds: float | None = Field(default=None, gt=0)
    """Wall-clock seconds."""


class SpecLimits(AgentLimits):
    """An agent's limits (``AgentLimits``) plus its slice of the budget."""

    budget_share: float | None = Field(default=None, gt=0.0, le=1.0)
    """Share of its caller's remaining budget (every capped kind: tokens,
    money, calls, seconds) one call of this agent may spend; a share of an
    uncapped budget is uncapped.  ``None``: no slice of its own (it draws
    on what its caller has left, like its caller's other calls)."""
    budget: BudgetCaps = BudgetCaps()
    """Absolute caps on top of the share (the tighter one wins)."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        check_keys(cls, data)
        return data

    def agent_limits(self) -> AgentLimits:
        return AgentLimits.model_validate(self.model_dump(include=set(AgentLimits.model_fields)))


class PipelineLimits(SpecModel):
    """A pipeline's slice of its caller's budget (see ``SpecLimits``)."""

    budget_share: float | None = Field(default=None, gt=0.0, le=1.0)
    """Share of the caller's remaining budget one run of the pipeline may spend."""
    budget: BudgetCaps = BudgetCaps()
    """Absolute caps on top of the share."""


BudgetLimits = SpecLimits | PipelineLimits


def budget_slice(limits: BudgetLimits, headroom: Budget) -> Budget:
    """The caps of one call: ``budget_share`` of the caller's ``headroom``
    (what it has left, as a ``Budget``), tightened by ``budget``."""
    share, caps = limits.budget_share, limits.budget

    def part(left: float | None, cap: float | None) -> float | None:
        scaled = None if share is None or left is None else left * share
        found = [v for v in (scaled, cap) if v is not None]
        return min(found) if found else None

    def whole(left: int | None, cap: int | None) -> int | None:
        value = part(left, cap)
        return None if value is None else int(value)

    return Budget(
        max_tokens=whole(headroom.max_tokens, caps.max_tokens),
        max_usd=part(headroom.max_usd, caps.max_usd),
        max_model_calls=whole(headroom.max_model_calls, caps.max_model_calls),
        max_wall_seconds=part(headroom.max_wall_seconds, caps.max_wall_seconds),
    )


# -- agents and pipelines ------------------------------------------------------------


class SubAgentRef(SpecModel):
    """A sub-agent: the name of a unit in the same file, or a spec file path
    (``workers/x.yaml``, ``workers/team.yaml#name``); a plain string is
    short for ``{agent: REF}``."""

    agent: str = Field(min_length=1)
    """Name or file path."""
    description: str | None = None
    """What the caller's model is told the tool does (default: the sub-agent's)."""
    budget_share: float | None = Field(default=None, gt=0.0, le=1.0)
    """Overrides the sub-agent's own ``limits.budget_share`` for this caller."""
    approval: Approval = None
    """Every call of the sub-agent waits for the approval of the person
    behind the run: ``true``, or ``{timeout_s: 600, message: ...}`` (as
    ``[approvals.TOOL]``); a denied or unanswered call does not run it."""

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"agent": data} if isinstance(data, str) else data


class AgentSpec(SpecModel):
    """One agent of a hierarchy (``kind: agent``)."""

    kind: Literal["agent"] = "agent"
    """An agent (the default)."""
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    """Its name (default: its key under ``agents``, or the file's stem); a
    caller offers it as a tool of this name."""
    description: str | None = None
    """What a caller's model is told it does (default from its name)."""
    instructions: str = DEFAULT_INSTRUCTIONS
    """Its system prompt."""
    model: str | None = None
    """The model serving it (default: the run's default model)."""
    routing: RoutingConfig | None = None
    """A per-step routing policy instead of ``model``."""
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    """Sampling temperature."""
    logprobs: bool = False
    """Ask for token log-probabilities (routing's ``low_confidence`` reads them)."""
    tools: list[ToolBinding] = Field(default_factory=list)
    """Its tools: built-in names (``calculator``, ``python``, ``shell``,
    ``editor``, ``read_file``, ``list_directory``), Python bindings
    ``"pkg.mod:fn"``, or MCP servers (``{mcp: NAME}`` from ``mcp_servers``,
    or inline ``{mcp: {...}}``)."""
    sub_agents: list[SubAgentRef] = Field(default_factory=list)
    """Agents (or pipelines) it may call as tools, each with its own budget slice."""
    resources: list[ResourceAttachment] = Field(default_factory=list)
    """MCP resources shown to it at every step, kept current (``{mcp: NAME,
    uri: ...}`` or ``{mcp: NAME, template: ..., arguments: {...}}``); as
    ``AgentConfig.resources``."""
    prompt: PromptStartSpec | None = None
    """An MCP prompt each rollout starts from, after the instructions and
    before the task (``{mcp: NAME, name: PROMPT, arguments: {...},
    complete: [...]}``); as ``AgentConfig.prompt``."""
    limits: SpecLimits = SpecLimits()
    """Steps, tokens, timeouts and its budget slice."""
    context: ContextConfig = ContextConfig()
    """Context budget and compaction."""
    signals: SignalConfig = SignalConfig()
    """Behaviour-signal thresholds."""
    stop_on: list[SignalName] = Field(default_factory=lambda: list(DEFAULT_STOP_ON))
    """Signals that end a rollout early."""
    finish_tool: str | None = Field(default=None, pattern=NAME_PATTERN)
    """A built-in finish tool (``final_answer``) whose call ends the rollout."""

    def problems(self) -> list[tuple[Loc, str]]:
        """What is inconsistent, by key (the loader places it in the file)."""
        if self.model is not None and self.routing is not None:
            return [(("routing",), "set `model` or `routing`, not both")]
        return []

    def mcp_context_servers(self) -> list[str]:
        """The MCP servers its ``resources`` and ``prompt`` read from."""
        names = [a.mcp for a in self.resources]
        return names if self.prompt is None else [*names, self.prompt.mcp]

    def agent_config(self, name: str, *, model: str | None) -> AgentConfig:
        """The loop's configuration (``tools=None``: every tool it is handed)."""
        return AgentConfig(
            name=name,
            instructions=self.instructions,
            model=self.model or (None if self.routing is not None else model),
            routing=self.routing,
            temperature=self.temperature,
            logprobs=self.logprobs,
            resources=self.resources,
            prompt=self.prompt,
            limits=self.limits.agent_limits(),
            context=self.context,
            signals=self.signals,
            stop_on=self.stop_on,
            finish_tool=self.finish_tool,
        )


_PIPELINE_VARIABLES = ("task", "previous")


class StageSpec(SpecModel):
    """One stage of a pipeline: a unit run on a task built from the
    pipeline's task and earlier stages' outputs."""

    agent: str = Field(min_length=1)
    """The unit that runs the stage: a name in this file or a file path."""
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    """The stage's name (default: the agent's name); unique in the pipeline."""
    task: str = "{previous}"
    """A template of the stage's task: ``{task}`` is the pipeline's task,
    ``{previous}`` the last stage's output, ``{VAR}`` an earlier stage's
    ``output``; ``{{``/``}}`` are literal braces."""
    output: str | None = Field(default=None, pattern=r"^[A-Za-z_]\w*$")
    """The variable the stage's answer is stored in (default: the stage's
    name).  Stages may share one: a corrector overwriting ``solution``."""
    stop_if: str | None = None
    """A regular expression (searched, case-insensitive): when the stage's
    answer matches, the pipeline ends there with its ``answer`` variable."""
    budget_share: float | None = Field(default=None, gt=0.0, le=1.0)
    """Overrides the unit's own ``limits.budget_share`` for this stage."""

    @property
    def stage_name(self) -> str:
        return self.name or self.agent.rsplit("/", 1)[-1].split("#")[-1].split(".")[0]

    @property
    def variable(self) -> str:
        return self.output or self.stage_name.replace("-", "_")

    @field_validator("stop_if")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


def template_fields(template: str) -> list[str]:
    """The ``{names}`` a stage template uses (``ValueError`` if malformed)."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


class PipelineSpec(SpecModel):
    """Stages run in order, each on a task built from earlier outputs
    (``kind: pipeline``), optionally repeating its tail: a Solver ->
    Verifier -> Corrector loop is ``repeat_from: verify`` with
    ``max_rounds``.  A stage that does not finish ends the pipeline with
    its status."""

    kind: Literal["pipeline"]
    """A pipeline."""
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    """Its name (as for agents)."""
    description: str | None = None
    """What a caller's model is told it does."""
    stages: list[StageSpec] = Field(min_length=1)
    """The stages, in order."""
    answer: str | None = None
    """The variable holding the pipeline's answer (default: the last stage's ``output``)."""
    repeat_from: str | None = None
    """After the last stage, go back to this stage while rounds remain."""
    max_rounds: int = Field(default=1, ge=1)
    """Passes through the stages from ``repeat_from`` to the end."""
    limits: PipelineLimits = PipelineLimits()
    """Its budget slice."""

    def problems(self) -> list[tuple[Loc, str]]:
        """What is inconsistent, by key (the loader places it in the file):
        repeated stage names, template variables no earlier stage defines,
        an ``answer`` or ``repeat_from`` naming nothing."""
        found: list[tuple[Loc, str]] = []
        names = [s.stage_name for s in self.stages]
        defined = set(_PIPELINE_VARIABLES)
        for index, stage in enumerate(self.stages):
            if stage.stage_name in names[:index]:
                found.append(
                    (("stages", index), f"a second stage named {stage.stage_name!r}; set `name`")
                )
            try:
                unknown = [f for f in template_fields(stage.task) if f not in defined]
            except ValueError as exc:
                found.append((("stages", index, "task"), f"bad task template: {exc}"))
            else:
                if unknown:
                    found.append(
                        (
                            ("stages", index, "task"),
                            f"uses {{{unknown[0]}}}, which no earlier stage defines "
                            f"(defined: {', '.join(sorted(defined))})",
                        )
                    )
            defined.add(stage.variable)
        outputs = defined - set(_PIPELINE_VARIABLES)
        if self.answer is not None and self.answer not in outputs:
            found.append(
                (
                    ("answer",),
                    f"names {self.answer!r}, which no stage outputs "
                    f"(outputs: {', '.join(sorted(outputs))})",
                )
            )
        if self.repeat_from is not None and self.repeat_from not in names:
            found.append(
                (
                    ("repeat_from",),
                    f"names {self.repeat_from!r}, which is not a stage "
                    f"(stages: {', '.join(names)})",
                )
            )
        if self.max_rounds > 1 and self.repeat_from is None:
            found.append((("max_rounds",), "more than one round needs `repeat_from`"))
        return found

    @property
    def answer_variable(self) -> str:
        return self.answer or self.stages[-1].variable


def _unit_kind(value: Any) -> str | None:
    if isinstance(value, Mapping):
        kinds = {"agent": "agent-spec", "pipeline": "pipeline-spec"}
        return kinds.get(str(value.get("kind", "agent")))
    tags: dict[type[BaseModel], str] = {AgentSpec: "agent-spec", PipelineSpec: "pipeline-spec"}
    return tags.get(type(value))


UnitSpec = Annotated[
    Annotated[AgentSpec, Tag("agent-spec")] | Annotated[PipelineSpec, Tag("pipeline-spec")],
    Discriminator(
        _unit_kind,
        custom_error_type="unit_kind",
        custom_error_message=(
            "an agent spec is a mapping; `kind` is `agent` (default) or `pipeline`"
        ),
    ),
]
"""An agent or a pipeline."""

#: The ``Tag`` names of the unions above: never keys of a spec (the error
#: mapper skips them in a location).
UNION_TAGS = frozenset(
    {
        "agent-spec",
        "pipeline-spec",
        "builtin-tool",
        "python-tool",
        "mcp-tool",
        "server-name",
        "inline-server",
    }
)


class MultiFile(SpecModel):
    """A file of several units (it has an ``agents`` key); a file without
    one holds a single agent, its keys at the top level.  See
    ``examples/planner_workers.yaml``."""

    entry: str | None = None
    """The unit a run of this file starts with (default: the first)."""
    agents: dict[str, UnitSpec] = Field(min_length=1)
    """The units by name."""
    mcp_servers: McpServers = Field(default_factory=dict)
    """MCP servers its agents may use, by name."""

    def problems(self) -> list[tuple[Loc, str]]:
        """Names that do not fit, by key (the loader places them in the file)."""
        found: list[tuple[Loc, str]] = []
        for key, unit in self.agents.items():
            if not re.match(NAME_PATTERN, key):
                found.append(
                    (
                        ("agents", key),
                        f"agent name {key!r} must be 1-64 letters, digits, '_' or '-'",
                    )
                )
            if unit.name is not None and unit.name != key:
                found.append(
                    (("agents", key, "name"), f"differs from its key {key!r}; drop it or match it")
                )
        if self.entry is not None and self.entry not in self.agents:
            found.append(
                (("entry",), f"names {self.entry!r}; the agents are {', '.join(self.agents)}")
            )
        return found


def default_agent(**limits: Any) -> AgentSpec:
    """The agent ``agentrt run`` uses without ``--agent``: short instructions
    and the calculator; ``limits`` override its (small) limits."""
    base: dict[str, Any] = {"max_steps": 4, "max_tokens_per_step": 256, "tool_timeout_s": 30.0}
    return AgentSpec(
        name="assistant",
        description="A general assistant with a calculator.",
        instructions=(
            "You are a helpful assistant. Answer concisely. Use the calculator for arithmetic."
        ),
        tools=[BuiltinTool(builtin="calculator")],
        limits=SpecLimits.model_validate(base | limits),
    )


__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "FILE_TOOLS",
    "NAME_PATTERN",
    "UNION_TAGS",
    "AgentSpec",
    "BudgetCaps",
    "BudgetLimits",
    "BuiltinName",
    "BuiltinTool",
    "McpServers",
    "McpTools",
    "MultiFile",
    "PipelineLimits",
    "PipelineSpec",
    "PythonTool",
    "SpecError",
    "SpecLimits",
    "SpecProblem",
    "StageSpec",
    "SubAgentRef",
    "ToolBinding",
    "UnitSpec",
    "budget_slice",
    "default_agent",
    "template_fields",
]
