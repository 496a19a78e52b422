"""Evaluation (runtime roof): ``agentrt eval`` from one pool of rollouts,
its estimators and plots, trajectories as data, and the coding-task /
SWE-bench application.
"""
