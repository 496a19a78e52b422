"""A model server agentrt runs itself, from configuration: the ``Runtime``
starts it as a supervised actor before opening its backend, runs use it, and
the server stops with the ``Runtime``."""

from __future__ import annotations

import psutil
import pytest

import agentrt
from agentrt.protocols import ScalingSpec
from tests._support.managed import managed_sim_backend

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def test_a_managed_backend_is_started_used_and_stopped_by_the_runtime() -> None:
    config = {"early_stop": False, "models": {"backends": {"sim": managed_sim_backend()}}}
    async with agentrt.Runtime(config) as rt:
        (server,) = rt.managed.values()
        pid = server.server.pid
        assert pid is not None
        assert psutil.pid_exists(pid)
        result = await rt.run("What is 2 + 3?", scaling=ScalingSpec(rollouts=2))
        assert result.status == "succeeded", result.error
        assert result.cost.model_calls >= 2
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
