"""Aggregators: majority vote, judges, recursive tournament voting,
parallel-distill-refine and the aggregation agent, all over trajectory
summaries.

May import agents, tools and the runtime floor; never the roof.
"""
