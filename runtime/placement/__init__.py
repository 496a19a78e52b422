"""Placement (runtime roof): where a run's rollouts run, in this process
(``LocalPlacement``), in worker processes of this host
(``ProcessPlacement``) or on a Ray cluster (``RayPlacement``).
"""
