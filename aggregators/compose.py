"""Building aggregators from configuration, and composing them.

Owns one pydantic model per aggregator (``MajorityConfig``, ``RTVConfig``,
``PDRConfig``...; a docstring per field), ``AggregatorConfig`` (their union,
picked by ``name``) and ``build_aggregator``: a dict such as
``{"name": "rtv", "g": 2, "v": 8}`` -- or a list, read as "the first, then
the next": ``[{"name": "pdr", "rounds": 2, "m": 8, "k": 3}, {"name": "rtv",
"g": 2, "v": 8}]`` is PDR whose final step is that RTV -- becomes an
``Aggregator``.  The runtime objects a strategy needs (a judge or a model
backend to build one, PDR's rollout callable) are passed in; a missing one,
an unknown name or a bad field is a ``ConfigError`` saying which and where.

From Python the same composition is
``ParallelDistillRefine(rollout, judge, rounds=2, m=8, k=3,
final=RecursiveTournament(judge, g=2, v=8))``.

May import the other aggregators and the runtime floor; never the roof.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentrt.aggregators.aggagent import AggregationAgent
from agentrt.aggregators.base import Aggregator
from agentrt.aggregators.compressed import CompressedReasoning
from agentrt.aggregators.judge import BestOfN, Judge, ModelJudge
from agentrt.aggregators.pdr import ParallelDistillRefine, Rollout
from agentrt.aggregators.rtv import RecursiveTournament
from agentrt.aggregators.vote import NORMALIZERS, MajorityVote, Normalizer, WeightedVote, chain
from agentrt.runtime.errors import ConfigError
from agentrt.runtime.models.base import ModelBackend


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class MajorityConfig(_Config):
    """Majority vote."""

    name: Literal["majority"]
    normalize: list[str] = ["default"]
    """Normalizers applied in order (strip, casefold, number, extract, default, none)."""


class WeightedConfig(_Config):
    """Weighted vote (weight: verified facts)."""

    name: Literal["weighted"]
    normalize: list[str] = ["default"]
    """Normalizers applied in order."""


class BestOfNConfig(_Config):
    """Best-of-N by a judge."""

    name: Literal["best_of_n"]
    mode: Literal["pointwise", "pairwise"] = "pointwise"
    """Score each summary, or let a champion meet each challenger."""


class RTVConfig(_Config):
    """Recursive Tournament Voting."""

    name: Literal["rtv"]
    g: int = Field(default=2, ge=2)
    """Group size."""
    v: int = Field(default=8, ge=1)
    """Judge votes per comparison."""
    tie: Literal["first", "cheapest"] = "first"
    """Who wins a tied comparison."""


class PDRConfig(_Config):
    """Parallel-Distill-Refine."""

    name: Literal["pdr"]
    rounds: int = Field(default=2, ge=1)
    """Rounds of rollouts."""
    m: int = Field(default=8, ge=1)
    """Rollouts per round."""
    k: int = Field(default=3, ge=1)
    """Summaries kept in the workspace."""
    select: Literal["rtv", "judge"] = "rtv"
    """How the K best are chosen."""
    g: int = Field(default=2, ge=2)
    """Group size of the selecting tournament."""
    v: int = Field(default=4, ge=1)
    """Votes per comparison of the selecting tournament."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Rollouts running at once (default: m)."""


class AggAgentConfig(_Config):
    """The aggregation agent."""

    name: Literal["aggagent"]
    max_turns: int = Field(default=12, ge=1)
    """Model calls."""
    max_tokens: int = Field(default=20_000, ge=256)
    """Token cap (about one rollout)."""


class CompressedConfig(_Config):
    """ParallelMuse compressed reasoning aggregation."""

    name: Literal["compressed"]
    report_chars: int = Field(default=1_200, ge=100)
    """Characters per report."""


AggregatorConfig = Annotated[
    MajorityConfig
    | WeightedConfig
    | BestOfNConfig
    | RTVConfig
    | PDRConfig
    | AggAgentConfig
    | CompressedConfig,
    Field(discriminator="name"),
]
_adapter: TypeAdapter[AggregatorConfig] = TypeAdapter(AggregatorConfig)
NAMES = ("aggagent", "best_of_n", "compressed", "majority", "pdr", "rtv", "weighted")


def _normalizer(names: list[str], where: str) -> Normalizer:
    unknown = [n for n in names if n not in NORMALIZERS]
    if unknown:
        raise ConfigError(
            f"unknown normalizers {unknown}; known: {', '.join(sorted(NORMALIZERS))}",
            where=f"{where}.normalize",
        )
    return chain(*(NORMALIZERS[n] for n in names))


def parse_config(raw: Mapping[str, Any], where: str = "aggregate") -> AggregatorConfig:
    """Validate one aggregator's configuration."""
    name = raw.get("name")
    if name not in NAMES:
        raise ConfigError(
            f"unknown aggregator {name!r}; known: {', '.join(NAMES)}", where=f"{where}.name"
        )
    try:
        return _adapter.validate_python(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'name'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(problems, where=f"{where} ({name})") from None


def build_aggregator(
    config: Mapping[str, Any] | Sequence[Mapping[str, Any]] | AggregatorConfig,
    *,
    judge: Judge | None = None,
    backend: ModelBackend | None = None,
    rollout: Rollout | None = None,
    where: str = "aggregate",
) -> Aggregator:
    """An aggregator from configuration (see the module docstring)."""
    if isinstance(config, Sequence):
        if not config:
            raise ConfigError("an empty list of aggregators", where=where)
        *stages, last = list(config)
        final = build_aggregator(
            last, judge=judge, backend=backend, rollout=rollout, where=f"{where}[{len(stages)}]"
        )
        for i in reversed(range(len(stages))):
            final = _build(
                stages[i],
                judge=judge,
                backend=backend,
                rollout=rollout,
                where=f"{where}[{i}]",
                then=final,
            )
        return final
    return _build(config, judge=judge, backend=backend, rollout=rollout, where=where, then=None)


def _build(  # noqa: PLR0911 - one return per aggregator kind
    raw: Mapping[str, Any] | AggregatorConfig,
    *,
    judge: Judge | None,
    backend: ModelBackend | None,
    rollout: Rollout | None,
    where: str,
    then: Aggregator | None,
) -> Aggregator:
    cfg = raw if isinstance(raw, BaseModel) else parse_config(raw, where)
    if then is not None and not isinstance(cfg, PDRConfig):
        raise ConfigError(
            f"only pdr can be followed by another aggregator, not {cfg.name!r}", where=where
        )

    def need_judge() -> Judge:
        if judge is not None:
            return judge
        if backend is not None:
            return ModelJudge(backend)
        raise ConfigError(f"{cfg.name} needs a judge or a model backend", where=where)

    def need_backend() -> ModelBackend:
        if backend is None:
            raise ConfigError(f"{cfg.name} needs a model backend", where=where)
        return backend

    match cfg:
        case MajorityConfig():
            return MajorityVote(_normalizer(cfg.normalize, where))
        case WeightedConfig():
            return WeightedVote(normalize=_normalizer(cfg.normalize, where))
        case BestOfNConfig():
            return BestOfN(need_judge(), mode=cfg.mode)
        case RTVConfig():
            return RecursiveTournament(need_judge(), g=cfg.g, v=cfg.v, tie=cfg.tie)
        case PDRConfig():
            if rollout is None:
                raise ConfigError("pdr needs a rollout callable", where=where)
            return ParallelDistillRefine(
                rollout,
                need_judge(),
                rounds=cfg.rounds,
                m=cfg.m,
                k=cfg.k,
                select=cfg.select,
                g=cfg.g,
                v=cfg.v,
                final=then,
                max_concurrency=cfg.max_concurrency,
            )
        case AggAgentConfig():
            return AggregationAgent(
                need_backend(), max_turns=cfg.max_turns, max_tokens=cfg.max_tokens
            )
        case CompressedConfig():
            return CompressedReasoning(need_backend(), report_chars=cfg.report_chars)
    raise ConfigError(f"unhandled aggregator {cfg!r}", where=where)  # pragma: no cover


__all__ = [
    "AggAgentConfig",
    "AggregatorConfig",
    "BestOfNConfig",
    "CompressedConfig",
    "MajorityConfig",
    "PDRConfig",
    "RTVConfig",
    "WeightedConfig",
    "build_aggregator",
    "parse_config",
]
