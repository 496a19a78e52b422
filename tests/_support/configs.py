"""``agentrt.toml`` files for tests that load one or hand one to the
command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def scripted_models(
    replies: Sequence[str],
    *,
    backend: str = "fake",
    models: Sequence[str] | None = None,
    latency_s: float | None = None,
) -> str:
    """The ``[models]`` tables of an ``agentrt.toml`` whose default backend,
    named ``backend``, is the scripted model answering ``replies`` in turn
    (and serving ``models``, and taking ``latency_s`` per reply, when given)."""
    lines = ["[models]", f'default = "{backend}"', "", f"[models.backends.{backend}]"]
    lines.append('kind = "scripted"')
    if models is not None:
        lines.append(f"models = {json.dumps(list(models))}")
    lines.append(f"replies = {json.dumps(list(replies))}")
    if latency_s is not None:
        lines.append(f"latency_s = {latency_s}")
    return "\n".join(lines) + "\n"


def write_config(tmp_path: Path, text: str, name: str = "agentrt.toml") -> Path:
    """``text`` written to ``tmp_path/name``."""
    path = tmp_path / name
    path.write_text(text)
    return path
