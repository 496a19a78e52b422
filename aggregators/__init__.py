"""Aggregators: majority vote, judges, recursive tournament voting,
parallel-distill-refine and the aggregation agent, all over trajectory
summaries.

Every aggregator implements ``Aggregator.aggregate(task, summaries) ->
AggregationResult``; ``build_aggregator`` makes one from configuration, and
``PDR(..., final=RTV(...))`` composes them from Python.

May import agents, tools and the runtime floor; never the roof.
"""

from agentrt.aggregators.aggagent import AggregationAgent, TrajectoryStore
from agentrt.aggregators.base import AggregationResult, Aggregator, usable
from agentrt.aggregators.compose import AggregatorConfig, build_aggregator, parse_config
from agentrt.aggregators.compressed import CompressedReasoning, compress
from agentrt.aggregators.judge import BestOfN, Judge, ModelJudge, Score, SimulatedJudge, Verdict
from agentrt.aggregators.pdr import ParallelDistillRefine, Workspace
from agentrt.aggregators.rouge import lcs_length, rouge_l
from agentrt.aggregators.rtv import Bracket, RecursiveTournament
from agentrt.aggregators.vote import (
    NORMALIZERS,
    MajorityVote,
    Normalizer,
    WeightedVote,
    answer_key,
)

PDR = ParallelDistillRefine
RTV = RecursiveTournament

__all__ = [
    "NORMALIZERS",
    "PDR",
    "RTV",
    "AggregationAgent",
    "AggregationResult",
    "Aggregator",
    "AggregatorConfig",
    "BestOfN",
    "Bracket",
    "CompressedReasoning",
    "Judge",
    "MajorityVote",
    "ModelJudge",
    "Normalizer",
    "ParallelDistillRefine",
    "RecursiveTournament",
    "Score",
    "SimulatedJudge",
    "TrajectoryStore",
    "Verdict",
    "WeightedVote",
    "Workspace",
    "answer_key",
    "build_aggregator",
    "compress",
    "lcs_length",
    "parse_config",
    "rouge_l",
    "usable",
]
