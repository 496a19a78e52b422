"""The runtime, private: its floor (kernel, models, budget, routing, memory,
observe, testing) and its roof (engine, placement, config, serve, cli,
evaluation).  ``runtime/README.md`` says which folder is which layer.
"""
