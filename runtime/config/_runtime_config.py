"""``RuntimeConfig``: what a ``Runtime`` is configured with (the runtime
part of ``agentrt.toml``).  Plain validated data; must not know how runs
execute.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentrt.agents._agent_config import AgentConfig
from agentrt.agents._spec import McpServers
from agentrt.runtime.budget._pricing import ModelPrice
from agentrt.runtime.memory._admission import AdmissionConfig
from agentrt.runtime.models._model_registry import ModelsConfig
from agentrt.runtime.observe._tracing_config import TracingConfig
from agentrt.tools._approval import ApprovalPolicy
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig


class WorkerResources(BaseModel):
    """What one rollout worker asks of the Ray cluster (``[placement.worker]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    num_cpus: float = Field(default=1.0, ge=0)
    """CPUs reserved per worker (Ray's ``num_cpus``)."""
    memory_mb: int | None = Field(default=None, ge=1)
    """Memory reserved per worker, in MiB (Ray's ``memory``); ``None``: none."""
    resources: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    """Custom Ray resources per worker, e.g. ``{sandbox = 1}``: a worker is
    placed only on a node that advertises them."""


_RAY_ONLY = frozenset({"address", "worker"})
_WORKERS_ONLY = frozenset({"affinity_slack", "connect_timeout_s"})


class PlacementConfig(BaseModel):
    """``[placement]``: where rollouts run: this process (``local``),
    worker processes of this host (``local`` with ``workers``), or rollout
    workers on a Ray cluster (``ray``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["local", "ray"] = "local"
    """``local``: rollouts on this host: in this process's actor system,
    or spread over ``workers`` worker processes; ``ray``: rollouts spread
    over ``workers`` Ray actors (the ``ray`` extra)."""
    address: str = "local"
    """The Ray cluster: ``local`` (start a private one-node cluster in this
    process), ``auto`` (the cluster this machine belongs to), ``HOST:PORT``
    (its GCS) or ``ray://HOST:PORT`` (Ray Client)."""
    workers: int | None = Field(default=None, ge=1)
    """Rollout worker processes; each hosts an actor system, the agents,
    its own MCP stdio servers and backends, and many rollouts.  ``local``:
    unset runs every rollout in this process, a number starts that many
    worker processes on this host (at most one per core is useful: the
    run's ledger and events stay in this process, the driver); ``ray``:
    unset means 2."""
    worker: WorkerResources = WorkerResources()
    """What each worker reserves on the cluster."""
    affinity_slack: int = Field(default=4, ge=0)
    """A run's rollouts stay on the worker its first one went to (so they
    share a model replica's prefix cache) while that worker has at most
    this many more rollouts in flight than the least loaded one."""
    connect_timeout_s: float = Field(default=30.0, gt=0)
    """Deadline for reaching the cluster and for every worker (a Ray actor
    or a worker process) to be ready."""

    @model_validator(mode="after")
    def _keys_fit_the_kind(self) -> PlacementConfig:
        stray = sorted(self.model_fields_set & _RAY_ONLY)
        if self.kind == "local" and stray:
            raise ValueError(
                f"{', '.join(stray)} only apply to kind = 'ray' (this placement is 'local')"
            )
        idle = sorted(self.model_fields_set & _WORKERS_ONLY)
        if self.kind == "local" and self.workers is None and idle:
            raise ValueError(
                f"{', '.join(idle)} only apply with workers (this placement runs every "
                "rollout in this process)"
            )
        return self

    @property
    def in_process(self) -> bool:
        """Whether every rollout runs in this process (``local``, no ``workers``)."""
        return self.kind == "local" and self.workers is None


class RuntimeConfig(BaseModel):
    """agentrt's configuration for an embedding application."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    models: ModelsConfig = ModelsConfig()
    """Model backends by name (the same section as ``agentrt.toml``)."""
    agents: dict[str, AgentConfig | str] = Field(default_factory=dict)
    """Agents by name, each a configuration or the path of a YAML agent spec
    (a hierarchy; ``file.yaml#name`` picks its entry); ``Runtime.run(agent="name")``."""
    mcp: McpServers = Field(default_factory=dict)
    """MCP servers agents may use, by name (``[mcp.<name>]`` in ``agentrt.toml``):
    a subprocess over stdio (``command``, ``args``, ``env``, ``cwd``) or a
    streamable HTTP endpoint (``url``, ``headers``, ``bearer_token_env``),
    with timeouts, restart backoff and approved tool hashes
    (``agentrt.tools.mcp.StdioServerConfig`` / ``HttpServerConfig``).  The
    ``Runtime`` owns one connection per server, shared by its runs; a
    server's tools are named ``<name>__<tool>``."""
    approvals: dict[str, ApprovalPolicy] = Field(default_factory=dict)
    """Tools whose every call waits for the person behind the run to approve
    it (``[approvals.shell]``, ``[approvals.github__delete_repo]``), by tool
    name: a built-in, a function tool or an MCP server's.  The run is
    ``waiting`` meanwhile (across daemon restarts); the question reaches the
    embedding's ``on_elicitation`` callback, or (the daemon) the run's
    ``elicitation`` event, the web page, ``GET /v1/elicitations`` and an IDE
    connected over ``/mcp``; a denial or the deadline is the tool's result."""
    default_agent: str = "default"
    """The agent a run uses when it names none (a plain assistant if unset)."""
    rollouts: int = Field(default=1, ge=1)
    """Rollouts per run when a run passes no ``scaling``."""
    aggregate: str = "majority"
    """The aggregator when a run passes no ``scaling`` (``majority``, ``rtv``...)."""
    aggregate_options: dict[str, Any] = Field(default_factory=dict)
    """That aggregator's options, e.g. ``{"g": 2, "v": 8}`` for RTV."""
    concurrency: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """The most rollouts in flight per backend name, overriding what the
    backend takes (an HTTP backend: its connection pool; the embedded model:
    one at a time; others: unbounded).  Rollouts past it wait as ``queued``."""
    rollout_restarts: int = Field(default=3, ge=0)
    """How often a crashed rollout (a bug: a tool raising an unexpected
    exception) is restarted from its committed steps before it is recorded
    failed and the run goes on without it."""
    warm_prefix: bool = False
    """Send one request with the shared prefix before fanning out (N > 1), so
    a prefix-caching server computes it once; charged to the run's budget."""
    early_stop: bool = True
    """Stop a majority vote's rollouts once the vote can no longer change."""
    summarizer: Literal["rule", "model"] = "rule"
    """Trajectory summaries: rule-based (no model call) or by the agent's model."""
    memory: bool = False
    """Give every run a shared memory bank (``run`` scope) its rollouts share."""
    memory_path: str | None = None
    """The bank's SQLite file (kept across runs); ``None``: in memory."""
    memory_admission: AdmissionConfig = AdmissionConfig()
    """What the bank admits (``ScoredAdmission``: gates, weights, threshold)."""
    warm_timeout_s: float = Field(default=60.0, gt=0)
    """Deadline of the prefix-warming request."""
    placement: PlacementConfig = PlacementConfig()
    """Where rollouts run (``[placement]``): this process, or a Ray cluster."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Model prices in USD per million tokens, by model name (``[prices."gpt-4o"]``
    with ``prompt_usd_per_mtok``, ``completion_usd_per_mtok`` and optionally
    ``cached_prompt_usd_per_mtok``): what ``max_usd`` caps and costs count."""
    price_database: bool = True
    """Price models not in ``prices`` from the ``genai-prices`` database (the
    ``prices`` extra) when it knows their name.  A model priced nowhere costs
    nothing in runs without a ``max_usd`` cap and is refused by one."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry export of runs as traces (``[tracing]``; the ``otel`` extra)."""
    keep_workspaces: bool = False
    """Keep a run's sandbox workspaces (those of the ``shell``, ``editor``
    and ``python`` tools) when the run ends, for debugging: the log
    (``workspaces.kept``) and ``agentrt run`` say where.  By default they
    are deleted when the run ends, on every placement."""

    @field_validator("mcp")
    @classmethod
    def _servers_named_by_their_keys(
        cls, servers: dict[str, StdioServerConfig | HttpServerConfig]
    ) -> dict[str, StdioServerConfig | HttpServerConfig]:
        for key, server in servers.items():
            if server.name != key:
                raise ValueError(
                    f"server {key!r} is named {server.name!r}; drop `name` or match the key"
                )
        return servers


__all__ = ["PlacementConfig", "RuntimeConfig", "WorkerResources"]
