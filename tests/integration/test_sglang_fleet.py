"""agentrt running real SGLang servers itself and spreading runs over two.

One ``Runtime`` for the module, from configuration alone: backend ``sgm``
is a managed SGLang server (``managed = {...}``: agentrt starts it as a
supervised actor, on a port of its own), backend ``pair`` is one ``kind =
"sglang"`` backend over two replicas, the session's shared server
(``sglang_server``) and the managed one.  So the module starts one extra
server (about 4 GB, 42-70 s here) plus its restart, and shares the
``sglang`` xdist group (and server) with tests/integration/test_sglang.py.

The tests are synchronous and drive the ``Runtime`` through a blocking
portal: it lives in an event loop of its own across the module's tests.
Order matters: the replica test runs first, the kill-and-restart test last
(it ends with the ``Runtime``'s shutdown).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.from_thread
import httpx
import psutil
import pytest

from agentrt import Runtime
from agentrt.protocols import ModelRequest, RunResult, SamplingParams, ScalingSpec, UserMessage
from agentrt.runtime.models.managed._managed_config import ServerState
from agentrt.runtime.models.sglang._sglang_backend import SGLangBackend
from tests._support.ports import free_port

from .conftest import sglang_managed

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.slow,
    pytest.mark.process,
    # Starting the managed server, then restarting it: minutes on a busy machine.
    pytest.mark.timeout(1200),
]

_METRIC = re.compile(r"^(sglang:[a-z_]+)(?:\{[^}]*\})?\s+(\S+)$", re.MULTILINE)
#: Rollouts per run in the replica test (each run also sends one warm-up).
_ROLLOUTS = 3


class SGLangServer(Protocol):
    """What the ``sglang_server`` fixture (conftest.py) provides."""

    base_url: str
    model: str


@dataclass
class Fleet:
    """The module's ``Runtime`` and where its servers are."""

    portal: anyio.from_thread.BlockingPortal
    rt: Runtime
    shared_url: str
    managed_url: str
    closed: list[bool] = field(default_factory=list)
    _close: Any = None

    def close(self) -> None:
        """Shut the ``Runtime`` down now (once)."""
        if not self.closed:
            self.closed.append(True)
            self._close()


@pytest.fixture(scope="module")
def fleet(sglang_server: SGLangServer) -> Iterator[Fleet]:
    port = free_port()
    managed = sglang_managed(
        "sgm",
        port=port,
        # Watch the process, not /health (SGLang's /health runs a
        # generation): the servers see the tests' requests alone.
        liveness_interval_s=0.0,
        backoff_initial_s=0.5,
    )
    agent = {"temperature": 0.0, "limits": {"max_steps": 1, "max_tokens_per_step": 4}}
    config = {
        "warm_prefix": True,  # one prefill of the run's prompt, then its rollouts
        "early_stop": False,  # every rollout runs
        "models": {
            "default": "pair",
            "backends": {
                "sgm": {"kind": "sglang", "managed": managed, "health_interval_s": 0},
                "pair": {
                    "kind": "sglang",
                    "urls": [sglang_server.base_url, f"http://127.0.0.1:{port}"],
                    "health_interval_s": 0,
                },
            },
        },
        "agents": {
            "spread": {"name": "spread", **agent},
            "solo": {"name": "solo", "model": "sgm", **agent},
        },
    }
    with anyio.from_thread.start_blocking_portal(
        "asyncio", backend_options={"use_uvloop": True}
    ) as portal:
        rt = Runtime(config)
        with contextlib.ExitStack() as stack:
            stack.enter_context(portal.wrap_async_context_manager(rt))
            fleet = Fleet(
                portal=portal,
                rt=rt,
                shared_url=sglang_server.base_url,
                managed_url=f"http://127.0.0.1:{port}",
                _close=stack.close,
            )
            yield fleet


def _metrics(url: str) -> dict[str, float]:
    """A server's Prometheus samples by name (summed over labels)."""
    response = httpx.get(url + "/metrics", timeout=30)
    response.raise_for_status()
    found: dict[str, float] = {}
    for name, value in _METRIC.findall(response.text):
        found[name] = found.get(name, 0.0) + float(value)
    return found


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def _run(fleet: Fleet, task: str, agent: str, rollouts: int = 1) -> RunResult:
    result: RunResult = fleet.portal.call(
        lambda: fleet.rt.run(task, agent=agent, scaling=ScalingSpec(rollouts=rollouts))
    )
    assert result.status == "succeeded", result.error
    return result


def test_a_runs_rollouts_keep_to_one_replica_and_runs_spread(fleet: Fleet) -> None:
    """Two runs of ``_ROLLOUTS`` rollouts over two real servers: each run's
    requests (warm-up and rollouts) all reach one server, whose prefix
    cache then serves its prompt (cached prompt tokens in the run's
    usage); the second run goes to the other server."""
    urls = (fleet.shared_url, fleet.managed_url)
    landed: list[int] = []
    for _ in range(2):
        # A prompt no earlier test sent: only this run's own warm-up caches it.
        task = f"Reply with one word. Ticket {uuid.uuid4().hex}."
        before = [_metrics(url) for url in urls]
        result = _run(fleet, task, "spread", _ROLLOUTS)
        after = [_metrics(url) for url in urls]
        requests = [
            _delta(a, b, "sglang:num_requests_total") for a, b in zip(after, before, strict=True)
        ]
        cached = [
            _delta(a, b, "sglang:cached_tokens_total") for a, b in zip(after, before, strict=True)
        ]
        # Every request of the run (warm-up + rollouts) on one server, none on the other.
        assert sorted(requests) == [0, _ROLLOUTS + 1], requests
        landed.append(requests.index(_ROLLOUTS + 1))
        usage = result.cost.usage
        assert result.cost.model_calls == _ROLLOUTS + 1
        # The rollouts found the run's prompt in that server's cache ...
        per_call = usage.prompt_tokens / (_ROLLOUTS + 1)
        assert usage.cached_prompt_tokens >= _ROLLOUTS * per_call * 0.8, usage
        # ... as that server counted it.
        assert cached[landed[-1]] >= usage.cached_prompt_tokens
    assert sorted(landed) == [0, 1], "the second run went to the same server as the first"


def _group(pid: int) -> list[psutil.Process]:
    """The server process and everything it started (its process group)."""
    leader = psutil.Process(pid)
    return [leader, *leader.children(recursive=True)]


def _gone(processes: list[psutil.Process]) -> list[str]:
    """Those of ``processes`` still running (zombies count as gone)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{process.pid} {' '.join(process.cmdline())[:80]}")
        except psutil.NoSuchProcess:
            continue
    return alive


def _ask(fleet: Fleet, backend: str) -> str:
    """One model call through an open backend of the ``Runtime``."""
    sg = fleet.rt.backends[backend]
    assert isinstance(sg, SGLangBackend)
    request = ModelRequest(
        messages=[UserMessage(content="Say hi.")],
        sampling=SamplingParams(temperature=0.0, max_tokens=4),
    )
    reply = fleet.portal.call(sg.complete, request)
    return reply.message.content or ""


def test_a_managed_server_killed_is_restarted_and_stopped_with_the_runtime(
    fleet: Fleet,
) -> None:
    """The server agentrt started from ``managed = {...}``: a run uses it;
    ``kill -9`` of its process (the whole group goes: SGLang's scheduler
    and detokenizer too); its actor restarts it on the same port, a later
    run and call succeed; the ``Runtime``'s shutdown leaves no process."""
    handle = fleet.rt.managed["sgm"]
    first = fleet.portal.call(handle.status)
    assert first.state is ServerState.HEALTHY
    assert first.base_url == fleet.managed_url
    assert first.pid is not None
    _run(fleet, "Say hi.", "solo")
    old = _group(first.pid)
    assert len(old) >= 3, old  # the HTTP server, its scheduler, its detokenizer

    os.kill(first.pid, signal.SIGKILL)

    async def restarted() -> Any:
        with anyio.fail_after(600):
            while True:
                status = await handle.status()
                if status.restarts >= 1 and status.state is ServerState.HEALTHY:
                    return status
                await anyio.sleep(0.5)

    second = fleet.portal.call(restarted)
    assert second.restarts == 1
    assert second.last_exit_code == -signal.SIGKILL
    assert second.pid is not None
    assert second.pid != first.pid
    assert second.base_url == fleet.managed_url
    assert _gone(old) == []  # no orphan of the killed server
    _run(fleet, "Say hi again.", "solo")
    assert _ask(fleet, "sgm")
    new = _group(second.pid)

    fleet.close()
    assert _gone(new) == []
