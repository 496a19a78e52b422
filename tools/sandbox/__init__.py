"""The bubblewrap sandbox the shell, editor and Python tools run in, and
the per-rollout workspaces it mounts.
"""
