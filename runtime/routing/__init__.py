"""Budget-aware model routing (runtime floor).

Owns the choice of model tier for each step of a rollout: the
``RoutingPolicy`` protocol and its policies (always-small, always-large,
fixed, cascade on signals, threshold on a difficulty score), the budget
rules all of them obey (``TierLadder``), their pydantic configuration, the
signals they read, an offline task simulator and the cost-success frontier
report.  Reads the budget ledger's headroom; never imports agents, tools or
aggregators.
"""
