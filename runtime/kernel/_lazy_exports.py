"""The one way a public surface loads a name on first use: the surface keeps
a table (name -> module) and its module ``__getattr__`` calls ``load``.

Imports nothing of agentrt: ``import agentrt`` loads it early.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any


def load(namespace: MutableMapping[str, Any], table: Mapping[str, str], name: str) -> Any:
    """``name`` from the module ``table`` names for it, kept in ``namespace``
    (the surface's ``globals()``) so that the next lookup does not come here.
    Raises ``AttributeError`` for a name the table does not list."""
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value


__all__ = ["load"]
