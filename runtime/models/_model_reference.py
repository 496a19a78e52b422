"""What a model reference in configuration means (``--model``, ``[models]
default``, an agent's ``model``, a routing tier's ``model``): the backend of
that name first, then the one backend serving a model of that name; a name
two backends serve is ambiguous.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentrt.runtime.kernel._errors import ConfigError

__all__ = ["canonical_reference", "pick_backend"]


def pick_backend(served: Mapping[str, Sequence[str]], reference: str, *, where: str) -> str | None:
    """The name of the backend ``reference`` means, given each backend's
    served model names by backend name: the backend named so, else the one
    serving a model of that name; ``None`` when none does.  Raises
    ``ConfigError`` (at ``where``) naming the backends when more than one
    serves a model of that name and none is named so."""
    if reference in served:
        return reference
    serving = [name for name, models in served.items() if reference in models]
    if len(serving) > 1:
        names = " and ".join(repr(name) for name in serving)
        raise ConfigError(
            f"model {reference!r} is ambiguous: backends {names} both serve it; "
            f"name the backend instead (e.g. {serving[0]!r})",
            where=where,
        )
    return serving[0] if serving else None


def canonical_reference(served: Mapping[str, Sequence[str]], backend: str) -> str:
    """How to refer to ``backend``: its first model's name when that name
    leads back to it alone, else the backend's own name (it serves no named
    model, or another backend serves the same name)."""
    models = served[backend]
    if models:
        serving = [name for name, names in served.items() if models[0] in names]
        if serving == [backend] and models[0] not in served:
            return models[0]
    return backend
