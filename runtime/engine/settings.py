"""``RuntimeConfig``: what a ``Runtime`` is configured with (the runtime
part of ``agentrt.toml``).  Plain validated data; must not know how runs
execute.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrt.agents import AgentConfig
from agentrt.runtime.models.registry import ModelsConfig


class RuntimeConfig(BaseModel):
    """agentrt's configuration for an embedding application."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    models: ModelsConfig = ModelsConfig()
    """Model backends by name (the same section as ``agentrt.toml``)."""
    agents: dict[str, AgentConfig | str] = Field(default_factory=dict)
    """Agents by name, each a configuration or the path of a YAML agent spec
    (a hierarchy; MCP tools need the CLI); ``Runtime.run(agent="name")``."""
    default_agent: str = "default"
    """The agent a run uses when it names none (a plain assistant if unset)."""
    rollouts: int = Field(default=1, ge=1)
    """Rollouts per run when a run passes no ``scaling``."""
    aggregate: str = "majority"
    """The aggregator when a run passes no ``scaling`` (``majority``, ``rtv``...)."""
    aggregate_options: dict[str, Any] = Field(default_factory=dict)
    """That aggregator's options, e.g. ``{"g": 2, "v": 8}`` for RTV."""
    concurrency: dict[str, int] = Field(default_factory=dict)
    """The most rollouts in flight per backend name."""
    default_concurrency: int = Field(default=8, ge=1)
    """The most rollouts in flight on a backend not in ``concurrency``."""
    warm_prefix: bool = True
    """Send one request with the shared prefix before fanning out (N > 1)."""
    early_stop: bool = True
    """Stop a majority vote's rollouts once the vote can no longer change."""
    summarizer: Literal["rule", "model"] = "rule"
    """Trajectory summaries: rule-based (no model call) or by the agent's model."""
    memory: bool = False
    """Give every run a shared memory bank (``run`` scope) its rollouts share."""
    memory_path: str | None = None
    """The bank's SQLite file (kept across runs); ``None``: in memory."""
    warm_timeout_s: float = Field(default=60.0, gt=0)
    """Deadline of the prefix-warming request."""


__all__ = ["RuntimeConfig"]
