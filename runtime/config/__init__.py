"""Configuration (runtime roof): ``agentrt.toml``, the one file of every
command, and ``RuntimeConfig``, what a ``Runtime`` is built from.
"""
