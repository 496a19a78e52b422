"""A model server agentrt runs itself, as tests configure one: the
sim-server started as a ``command`` managed server."""

from __future__ import annotations

import sys
from typing import Any


def managed_sim_backend(**managed: Any) -> dict[str, Any]:
    """An ``openai`` backend table whose ``managed`` server is the
    sim-server serving ``sim-a`` with no latency, exiting with its parent;
    ``managed`` adds or overrides managed-server fields."""
    sim = [sys.executable, "-m", "agentrt.runtime.testing.sim._sim_server"]
    return {
        "kind": "openai",
        "managed": {
            "kind": "command",
            "command": [*sim, "--port", "{port}", "--model", "{served_model_name}"],
            "served_model_name": "sim-a",
            "extra_args": ["--ttft-ms", "0", "--token-ms", "0", "--exit-with-parent"],
            "startup_timeout_s": 30,
            "health_interval_s": 0.05,
            "stop_grace_s": 5,
            "log_output": "off",
            **managed,
        },
    }
