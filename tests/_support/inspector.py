"""Running ``@modelcontextprotocol/inspector-cli`` from a test."""

from __future__ import annotations

from pathlib import Path

INSPECTOR = "@modelcontextprotocol/inspector-cli@1.0.3"


def inspector_workdir(tmp_path: Path) -> Path:
    """A working directory for the inspector CLI under ``tmp_path``.

    inspector-cli 1.0.3 finds its own package.json by testing
    "../package.json" relative to the *working directory*
    (modelcontextprotocol/inspector#1334): it runs from a directory whose
    parent has one."""
    (tmp_path / "package.json").write_text("{}")
    (tmp_path / "work").mkdir()
    return tmp_path / "work"
