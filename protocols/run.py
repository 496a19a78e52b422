"""What a caller asks for (``RunRequest``) and gets back (``RunResult``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from agentrt.protocols.trajectory import SCHEMA_VERSION, TrajectorySummary
from agentrt.protocols.usage import Cost

RunStatus = Literal["pending", "running", "succeeded", "failed", "cancelled"]


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Hard caps for a run; ``None`` means uncapped."""

    max_tokens: Annotated[int, Meta(ge=0)] | None = None
    max_usd: Annotated[float, Meta(ge=0)] | None = None
    max_model_calls: Annotated[int, Meta(ge=0)] | None = None
    max_wall_seconds: Annotated[float, Meta(ge=0)] | None = None


class ScalingSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How to scale at inference time: how many rollouts, which aggregator
    and its options (for example ``{"g": 2, "v": 8}`` for RTV)."""

    rollouts: Annotated[int, Meta(ge=1)] = 1
    aggregate: str = "majority"
    options: dict[str, Any] = {}


class RunRequest(msgspec.Struct, frozen=True, kw_only=True):
    task: str
    agent: str = "default"
    scaling: ScalingSpec = ScalingSpec()
    budget: Budget = Budget()
    metadata: dict[str, str] = {}
    schema_version: int = SCHEMA_VERSION


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    status: RunStatus
    answer: str | None = None
    rationale: str = ""
    summaries: list[TrajectorySummary] = []
    aggregation_trace: list[dict[str, Any]] = []
    cost: Cost = Cost()
    error: str | None = None
    schema_version: int = SCHEMA_VERSION
