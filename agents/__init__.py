"""Agents: the tool-calling loop, hierarchy specs, delegation, context folding,
trajectory summaries and behaviour signals.

May import the runtime floor and tools; never aggregators or the roof.
"""
