"""Placement (runtime roof): where a run's rollouts run, in this process
(``LocalPlacement``) or on a Ray cluster (``RayPlacement``).
"""
