"""The runtime: its floor (actor kernel, model backends, budgets, router) and
its roof (the facade, CLI and daemon that wire everything together).

The floor never imports agents, tools or aggregators; only the roof does.
"""
