"""Aggregators: majority vote, judges, recursive tournament voting,
parallel-distill-refine and the aggregation agent, all over trajectory
summaries.

Every aggregator implements ``Aggregator.aggregate(task, summaries,
context) -> AggregationResult``; the ``AggregationContext`` carries the
run's ledger and a backend metered on it (an aggregator's only model
access), events, trajectories and PDR's rollout callable.
``build_aggregator`` makes one from configuration, and
``PDR(judge, final=RTV(judge))`` composes them from Python.

May import agents, tools and the runtime floor; never the roof.
"""

from agentrt.aggregators._aggagent import AggregationAgent, TrajectoryStore
from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    Aggregator,
    BudgetStop,
    usable,
)
from agentrt.aggregators._compose import AggregatorConfig, build_aggregator, parse_config
from agentrt.aggregators._compressed import CompressedReasoning
from agentrt.aggregators._judge import BestOfN, Judge, ModelJudge, Score, SimulatedJudge, Verdict
from agentrt.aggregators._pdr import ParallelDistillRefine
from agentrt.aggregators._rouge import lcs_length, rouge_l
from agentrt.aggregators._rtv import Bracket, RecursiveTournament
from agentrt.aggregators._verdict import VerdictUnparseable, parse_score, parse_verdict
from agentrt.aggregators._verified import VerifiedFirst
from agentrt.aggregators._vote import (
    NORMALIZERS,
    MajorityVote,
    Normalizer,
    WeightedVote,
    answer_key,
    plurality,
)
from agentrt.aggregators._workspace import Rollout, Workspace, render_summary

PDR = ParallelDistillRefine
RTV = RecursiveTournament

__all__ = [
    "NORMALIZERS",
    "PDR",
    "RTV",
    "AggregationAgent",
    "AggregationContext",
    "AggregationResult",
    "Aggregator",
    "AggregatorConfig",
    "BestOfN",
    "Bracket",
    "BudgetStop",
    "CompressedReasoning",
    "Judge",
    "MajorityVote",
    "ModelJudge",
    "Normalizer",
    "ParallelDistillRefine",
    "RecursiveTournament",
    "Rollout",
    "Score",
    "SimulatedJudge",
    "TrajectoryStore",
    "Verdict",
    "VerdictUnparseable",
    "VerifiedFirst",
    "WeightedVote",
    "Workspace",
    "answer_key",
    "build_aggregator",
    "lcs_length",
    "parse_config",
    "parse_score",
    "parse_verdict",
    "plurality",
    "render_summary",
    "rouge_l",
    "usable",
]
