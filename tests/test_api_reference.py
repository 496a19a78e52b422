"""The API reference in docs/api/ is what ``docs/api/generate.py`` makes of
the code now: a public name, signature or docstring changed without writing
the pages again fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_generate", ROOT / "docs/api/generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_generate"] = module
    spec.loader.exec_module(module)
    return module


def test_every_surface_has_an_up_to_date_page() -> None:
    generate = _generator()
    pages = generate.expected()
    assert {p.stem for p in pages} == {*generate.surfaces(), "README"}
    stale = [str(p) for p, text in pages.items() if not p.exists() or p.read_text() != text]
    assert stale == [], "run: python docs/api/generate.py"


def test_a_changed_docstring_makes_a_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentrt.agents

    generate = _generator()
    before = generate.page("agentrt.agents")
    monkeypatch.setattr(agentrt.agents.Agent, "__doc__", "Planted: a changed docstring.")
    after = generate.page("agentrt.agents")
    assert after != before
    assert "Planted: a changed docstring." in after
    assert generate.main(["--check"]) == 1  # the page on disk no longer matches the code
