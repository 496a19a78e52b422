"""Wire types both OpenAI APIs share: stream options, OpenAI's error shape,
agentrt's own request object (``ScalingIn``) and reply extension
(``Extension``), and the model list.

Pure data: no I/O.  Imports only msgspec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "ErrorBody",
    "ErrorDetail",
    "Extension",
    "ModelCard",
    "ModelList",
    "ReplyModel",
    "ReplyModelList",
    "RolloutOut",
    "ScalingIn",
    "StreamOptions",
    "encoder",
]


# One type for every side (no docstring: it would become the OpenAPI
# document's description).  Strict, as the daemon validates it: a field
# OpenAI does not define is refused, by the daemon and the sim-server alike.
# The client sends ``StreamOptions(include_usage=True)``; ``omit_defaults``
# leaves out what it does not set.
class StreamOptions(
    msgspec.Struct, gc=False, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    param: str | None
    code: str | None
    run_id: str | None = None
    """agentrt's addition: the run the error is about, when there is one."""


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorDetail


class ScalingIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``agentrt`` object of a request (``extra_body={"agentrt": {...}}``)."""

    rollouts: Annotated[int, msgspec.Meta(ge=1)] | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None


class RolloutOut(msgspec.Struct, frozen=True, kw_only=True):
    rollout_id: str
    status: str
    steps: int
    answer: str | None


class Extension(msgspec.Struct, frozen=True, kw_only=True):
    """The ``agentrt`` field of a completion: the run behind the answer."""

    run_id: str
    status: str
    agent: str
    rollouts: int
    aggregate: str
    cost_usd: float
    model_calls: int
    rollout_details: list[RolloutOut] = []


class ModelCard(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "agentrt"


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ReplyModel(msgspec.Struct):
    """A model of ``GET /models`` as the model client reads it (any server)."""

    id: str


class ReplyModelList(msgspec.Struct):
    """``GET /models`` as the model client reads it: the ids, nothing else."""

    data: list[ReplyModel]


encoder = msgspec.json.Encoder()
"""The model client's encoder (requests, tool arguments)."""
