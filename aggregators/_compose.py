"""Building aggregators from configuration, and composing them: one pydantic
model per aggregator (``MajorityConfig``, ``RTVConfig``, ``PDRConfig``...),
their union ``AggregatorConfig``, and ``build_aggregator``.

May import the other aggregators and the runtime floor; never the roof.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentrt.aggregators._aggagent import MAX_AGENT_TOKENS, MAX_TURNS, AggregationAgent
from agentrt.aggregators._aggregator import Aggregator
from agentrt.aggregators._compressed import MAX_REPORT_CHARS, CompressedReasoning
from agentrt.aggregators._judge import MAX_JUDGE_TOKENS, MAX_RETRIES, BestOfN, Judge, ModelJudge
from agentrt.aggregators._pdr import MAX_K, MAX_M, MAX_ROUNDS, ParallelDistillRefine
from agentrt.aggregators._rtv import MAX_GROUP, MAX_VOTES, RecursiveTournament
from agentrt.aggregators._verified import VerifiedFirst
from agentrt.aggregators._vote import NORMALIZERS, MajorityVote, Normalizer, WeightedVote, chain
from agentrt.protocols._codec import whole_numbers
from agentrt.runtime.kernel._errors import ConfigError


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class JudgeConfig(_Config):
    """The model judge best-of-N, RTV and PDR ask (unless the ``Runtime``
    was given a judge object, which then decides)."""

    max_tokens: int = Field(default=1024, ge=1, le=MAX_JUDGE_TOKENS)
    """Each reply's bound: room to reason before the verdict, 1..32,768."""
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    """Sampling temperature (> 0: repeated votes differ)."""
    retries: int = Field(default=1, ge=0, le=MAX_RETRIES)
    """Asks again after a reply with no readable verdict, 0..5."""
    structured: bool = True
    """Offer a ``verdict(reasoning, verdict)`` tool the model must call (the
    reply's text is still read when it does not; a backend that refuses
    tools is asked in text)."""
    seed: int = 0
    """Seeds the order candidates are shown in."""

    def build(self) -> ModelJudge:
        return ModelJudge(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            retries=self.retries,
            structured=self.structured,
            seed=self.seed,
        )


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
    seed: int = 0
    """Seeds the coin that breaks a tie of scores."""
    judge: JudgeConfig = JudgeConfig()
    """The model judge."""


class RTVConfig(_Config):
    """Recursive Tournament Voting: (N - 1) * v judge calls for g = 2."""

    name: Literal["rtv"]
    g: int = Field(default=2, ge=2, le=MAX_GROUP)
    """Group size, 2..16."""
    v: int = Field(default=8, ge=1, le=MAX_VOTES)
    """Judge votes per comparison, 1..64."""
    tie: Literal["coin", "first", "cheapest"] = "coin"
    """Who wins a tied comparison: a seeded coin, the first in bracket order,
    or the cheapest rollout (then the coin)."""
    seed: int = 0
    """Seeds the bracket order and the coin."""
    shuffle: bool = True
    """Shuffle the bracket (byes fall on no rollout in particular)."""
    skip_agreeing: bool = True
    """Decide a group whose answers agree without a judge call."""
    judge: JudgeConfig = JudgeConfig()
    """The model judge."""


class PDRConfig(_Config):
    """Parallel-Distill-Refine: rounds * m rollouts plus the judges' calls."""

    name: Literal["pdr"]
    rounds: int = Field(default=2, ge=1, le=MAX_ROUNDS)
    """Rounds of rollouts, 1..8."""
    m: int = Field(default=8, ge=1, le=MAX_M)
    """Rollouts per round, 1..64."""
    k: int = Field(default=3, ge=1, le=MAX_K)
    """Summaries kept in the workspace, 1..16."""
    select: Literal["rtv", "judge"] = "rtv"
    """How the K best are chosen."""
    g: int = Field(default=2, ge=2, le=MAX_GROUP)
    """Group size of the selecting tournament, 2..16."""
    v: int = Field(default=4, ge=1, le=MAX_VOTES)
    """Votes per comparison of the selecting tournament, 1..64."""
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_M)
    """Rollouts running at once, 1..64 (default: m)."""
    stop_on_agreement: bool = True
    """Start no further round once a round's answers all agree."""
    judge: JudgeConfig = JudgeConfig()
    """The model judge."""


class AggAgentConfig(_Config):
    """The aggregation agent."""

    name: Literal["aggagent"]
    max_turns: int = Field(default=12, ge=1, le=MAX_TURNS)
    """Model calls before the forced ``finish``, 1..100."""
    max_tokens: int = Field(default=20_000, ge=256, le=MAX_AGENT_TOKENS)
    """Token cap (about one rollout), 256..1,000,000."""


class CompressedConfig(_Config):
    """ParallelMuse compressed reasoning aggregation: a model-written report
    per trajectory, then one call picks: N + 1 model calls."""

    name: Literal["compressed"]
    report_chars: int = Field(default=1_200, ge=100, le=MAX_REPORT_CHARS)
    """Characters per report, 100..20,000."""


class VerifiedConfig(_Config):
    """Verified best-of-N: the candidates whose tests passed first, then
    ``then`` chooses among them (among all when none passed)."""

    name: Literal["verified"]
    then: str | dict[str, Any] = "majority"
    """The aggregator among the passing candidates: a name (``rtv``) or its
    configuration (``{"name": "rtv", "v": 8}``); not ``pdr`` (it runs new
    rollouts, which no test has run on)."""
    require: bool = False
    """No passing candidate: answer nothing (else ``then`` chooses among all)."""


AggregatorConfig = Annotated[
    MajorityConfig
    | WeightedConfig
    | BestOfNConfig
    | RTVConfig
    | PDRConfig
    | AggAgentConfig
    | CompressedConfig
    | VerifiedConfig,
    Field(discriminator="name"),
]
_adapter: TypeAdapter[AggregatorConfig] = TypeAdapter(AggregatorConfig)
NAMES = ("aggagent", "best_of_n", "compressed", "majority", "pdr", "rtv", "verified", "weighted")


def _normalizer(names: list[str], where: str) -> Normalizer:
    unknown = [n for n in names if n not in NORMALIZERS]
    if unknown:
        raise ConfigError(
            f"unknown normalizers {unknown}; known: {', '.join(sorted(NORMALIZERS))}",
            where=f"{where}.normalize",
        )
    return chain(*(NORMALIZERS[n] for n in names))


def parse_config(
    raw: Mapping[str, Any], where: str = "aggregate", *, strict: bool = False
) -> AggregatorConfig:
    """Validate one aggregator's configuration (``strict``: no type coercion,
    so ``"2"`` is not an integer: what a published schema promises; as in
    JSON Schema, a number with no fractional part, ``59.0``, is one)."""
    name = raw.get("name")
    if name not in NAMES:
        raise ConfigError(
            f"unknown aggregator {name!r}; known: {', '.join(NAMES)}", where=f"{where}.name"
        )
    try:
        given = whole_numbers(dict(raw)) if strict else dict(raw)
        return _adapter.validate_python(given, strict=strict)
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise ConfigError(problems, where=f"{where} ({name})") from None


def _problem(error: Any) -> str:
    """One validation error as ``key: message (got value)``."""
    key = ".".join(str(p) for p in error["loc"][1:]) or "name"
    got = (
        f" (got {error['input']!r})" if error["type"] not in ("missing", "extra_forbidden") else ""
    )
    return f"{key}: {error['msg']}{got}"


def build_aggregator(
    config: Mapping[str, Any] | Sequence[Mapping[str, Any]] | AggregatorConfig,
    *,
    judge: Judge | None = None,
    where: str = "aggregate",
) -> Aggregator:
    """An aggregator from configuration: a dict picked by ``name``
    (``{"name": "rtv", "g": 2, "v": 8}``) or a list read as "the first, then
    the next" (``[{"name": "pdr", ...}, {"name": "rtv", ...}]`` is PDR whose
    final step is that RTV).  ``judge``: what best-of-N, RTV and PDR judge
    with (default: a ``ModelJudge`` built from the configuration's
    ``judge`` options, on the context's backend).  Raises
    ``ConfigError`` naming the key and ``where`` for an unknown name, a bad
    field or an option past its bounds (a ``v=100000`` tournament), before
    any model call."""
    if isinstance(config, Sequence):
        if not config:
            raise ConfigError("an empty list of aggregators", where=where)
        *stages, last = list(config)
        final = build_aggregator(last, judge=judge, where=f"{where}[{len(stages)}]")
        for i in reversed(range(len(stages))):
            final = _build(stages[i], judge=judge, where=f"{where}[{i}]", then=final)
        return final
    return _build(config, judge=judge, where=where, then=None)


def _build(  # noqa: PLR0911 - one return per aggregator kind
    raw: Mapping[str, Any] | AggregatorConfig,
    *,
    judge: Judge | None,
    where: str,
    then: Aggregator | None,
) -> Aggregator:
    cfg = raw if isinstance(raw, BaseModel) else parse_config(raw, where)
    if then is not None and not isinstance(cfg, PDRConfig):
        raise ConfigError(
            f"only pdr can be followed by another aggregator, not {cfg.name!r}", where=where
        )
    match cfg:
        case MajorityConfig():
            return MajorityVote(_normalizer(cfg.normalize, where))
        case WeightedConfig():
            return WeightedVote(normalize=_normalizer(cfg.normalize, where))
        case BestOfNConfig():
            return BestOfN(judge or cfg.judge.build(), mode=cfg.mode, seed=cfg.seed)
        case RTVConfig():
            return RecursiveTournament(
                judge or cfg.judge.build(),
                g=cfg.g,
                v=cfg.v,
                tie=cfg.tie,
                seed=cfg.seed,
                shuffle=cfg.shuffle,
                skip_agreeing=cfg.skip_agreeing,
            )
        case PDRConfig():
            return ParallelDistillRefine(
                judge or cfg.judge.build(),
                rounds=cfg.rounds,
                m=cfg.m,
                k=cfg.k,
                select=cfg.select,
                g=cfg.g,
                v=cfg.v,
                final=then,
                max_concurrency=cfg.max_concurrency,
                stop_on_agreement=cfg.stop_on_agreement,
            )
        case AggAgentConfig():
            return AggregationAgent(max_turns=cfg.max_turns, max_tokens=cfg.max_tokens)
        case CompressedConfig():
            return CompressedReasoning(report_chars=cfg.report_chars)
        case VerifiedConfig():
            inner = {"name": cfg.then} if isinstance(cfg.then, str) else cfg.then
            if inner.get("name") in ("pdr", "verified"):
                raise ConfigError(
                    f"verified cannot choose with {inner.get('name')!r}; use majority, "
                    "weighted, best_of_n, rtv, aggagent or compressed",
                    where=f"{where}.then",
                )
            then_agg = _build(inner, judge=judge, where=f"{where}.then", then=None)
            return VerifiedFirst(then_agg, require=cfg.require)
    raise ConfigError(f"unhandled aggregator {cfg!r}", where=where)  # pragma: no cover


__all__ = [
    "AggAgentConfig",
    "AggregatorConfig",
    "BestOfNConfig",
    "CompressedConfig",
    "JudgeConfig",
    "MajorityConfig",
    "PDRConfig",
    "RTVConfig",
    "VerifiedConfig",
    "WeightedConfig",
    "build_aggregator",
    "parse_config",
]
