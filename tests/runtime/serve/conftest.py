"""Shared helpers for the daemon tests (the ``daemon_kit`` fixture): an
in-process daemon on a scripted model whose rollouts take ``steps``
tool-calling steps before answering, and an SSE reader."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from agentrt.protocols import ModelRequest, ToolMessage
from agentrt.runtime.config._config_file import AgentrtConfig, config_from_mapping
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.testing import ScriptedReply as Reply
from tests._support.configs import scripted_models
from tests._support.daemon import start_serve
from tests._support.ports import free_port


def stepping_script(steps: int, answer: str = "42") -> Callable[[ModelRequest], ReplySpec]:
    """Call the calculator ``steps`` times, then answer."""

    def script(request: ModelRequest) -> ReplySpec:
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        if done < steps:
            return ScriptedToolCall("calculator", {"expression": f"{done}+1"})
        return Reply(content=answer)

    return script


def daemon_config(tmp_path: Path, **sections: Any) -> AgentrtConfig:
    server = {"port": 0, "shutdown_grace_s": 0.5, **sections.pop("server", {})}
    data: dict[str, Any] = {
        "server": server,
        "store": {"path": str(tmp_path / "runs.db")},
        "agents": {"solver": {"tools": ["calculator"], "stop_on": []}},
        "warm_prefix": False,
        **sections,
    }
    return config_from_mapping(data, source="test")


def scripted(steps: int = 2, latency_s: float = 0.0, answer: str = "42") -> ScriptedBackend:
    return ScriptedBackend(stepping_script(steps, answer), latency_s=latency_s)


@asynccontextmanager
async def running_daemon(
    config: AgentrtConfig, backend: ScriptedBackend | None = None
) -> AsyncIterator[DaemonEndpoint]:
    backend = backend or scripted()
    async with anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: run_daemon(config, backends=[backend], task_status=task_status)
        )
        try:
            yield endpoint
        finally:
            tg.cancel_scope.cancel()


async def create_run(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    """``POST /v1/runs`` with ``body``, which must answer 201; the run's id."""
    created = await client.post("/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    return run_id


async def sse_events(
    client: httpx.AsyncClient,
    path: str,
    *,
    last_event_id: int | None = None,
    limit: int = 10_000,
    tokens: bool = False,
) -> list[tuple[int, str, dict[str, Any]]]:
    """Read an SSE stream to its end (or ``limit`` events): (id, event, data).
    ``token`` events (they have no id: 0 here) are left out unless ``tokens``."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    out: list[tuple[int, str, dict[str, Any]]] = []
    fields: dict[str, str] = {}
    async with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line == "":
                if "data" in fields and ("id" in fields or tokens):
                    out.append(
                        (
                            int(fields.get("id", 0)),
                            fields["event"],
                            msgspec.json.decode(fields["data"]),
                        )
                    )
                    if len(out) >= limit:
                        break
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(":")
                fields[key] = value.removeprefix(" ")
    return out


SCRIPTED_TOML = f"""
{scripted_models(["42"], backend="s")}
[agents.solver]
instructions = "Answer briefly."

[store]
path = "runs.db"
"""
"""A configuration file on a scripted model (relative store path)."""


class DaemonKit:
    """The helpers above, as one fixture (tests cannot import conftest)."""

    config = staticmethod(daemon_config)
    scripted = staticmethod(scripted)
    running = staticmethod(running_daemon)
    sse = staticmethod(sse_events)
    create_run = staticmethod(create_run)
    stepping_script = staticmethod(stepping_script)
    free_port = staticmethod(free_port)
    start_serve = staticmethod(start_serve)
    scripted_toml = SCRIPTED_TOML


@pytest.fixture
def daemon_kit() -> type[DaemonKit]:
    return DaemonKit
