"""Public APIs are explicit: one ``__all__`` whose names all exist, each once."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = [
    "agentrt",
    "agentrt.agents",
    "agentrt.aggregators",
    "agentrt.protocols",
    "agentrt.runtime.actors",
    "agentrt.runtime.models",
    "agentrt.runtime.routing",
    "agentrt.runtime.testing",
    "agentrt.testing",
    "agentrt.tools",
    "agentrt.tools.mcp",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)  # its order is checked by ruff (RUF022)
    for member in exported:
        assert hasattr(module, member), f"{name}.{member}"
    assert len(set(exported)) == len(exported)
