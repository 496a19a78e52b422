"""Managed model servers reached from the ``[models]`` configuration: parsed,
validated with errors that name the key, and run as actors that the
configured backend talks to (across a crash of the server)."""

from __future__ import annotations

import os
import signal
import tomllib
from typing import Any

import anyio
import pytest

from agentrt.protocols import ModelRequest, SamplingParams, UserMessage
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.runtime.models._model_registry import ModelRegistry
from agentrt.runtime.models.managed._managed_actor import spawn_managed_server
from agentrt.runtime.models.managed._managed_config import ManagedServerConfig, ServerState
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend
from agentrt.runtime.models.sglang._sglang_backend import SGLangBackend
from tests._support.managed import managed_sim_backend

pytestmark = pytest.mark.process

CONFIG = """
[models]
default = "smol"

[models.backends.smol]
kind = "openai"
api_key = "none"
[models.backends.smol.managed]
kind = "vllm"
model = "HuggingFaceTB/SmolLM2-135M-Instruct"
served_model_name = "smol-135m"
port = 8123
extra_args = ["--max-model-len", "2048"]
max_restarts = 2

[models.backends.native]
kind = "sglang"
[models.backends.native.managed]
kind = "sglang"
model = "Qwen/Qwen2.5-0.5B-Instruct"

[models.backends.remote]
kind = "openai"
base_url = "http://10.0.0.9:8000/v1"
models = ["big"]
"""


def test_backends_with_a_managed_server_are_listed_and_point_at_it() -> None:
    registry = ModelRegistry.from_mapping(tomllib.loads(CONFIG)["models"])
    servers = registry.managed_servers()
    assert list(servers) == ["smol", "native"]  # configuration order; remote has none
    smol = servers["smol"]
    assert smol == ManagedServerConfig(
        name="smol",
        kind="vllm",
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        served_model_name="smol-135m",
        port=8123,
        extra_args=("--max-model-len", "2048"),
        max_restarts=2,
    )
    assert smol.backoff().max_restarts == 2
    # The backend's URL and model name come from the server.
    assert registry.resolve("smol-135m") == ("smol", "smol-135m")
    backend = registry.create("smol")
    assert isinstance(backend, OpenAIBackend)
    assert backend.models == ["smol-135m"]
    assert backend.endpoint == "http://127.0.0.1:8123/v1/chat/completions"
    # No port given: one is picked now, so server and backend agree on it.
    native = servers["native"]
    assert native.port is not None
    sglang = registry.create("native")
    assert isinstance(sglang, SGLangBackend)
    assert [r.url for r in sglang.replicas] == [f"http://127.0.0.1:{native.port}"]
    assert registry.models_of("native") == ["Qwen/Qwen2.5-0.5B-Instruct"]


@pytest.mark.parametrize(
    ("backend", "where", "what"),
    [
        (
            {"kind": "embedded", "managed": {"kind": "vllm", "model": "m"}},
            "models.backends.b.managed",
            "'embedded' backend cannot have a managed server",
        ),
        (
            {"kind": "openai", "managed": {"kind": "vllm"}},
            "models.backends.b.managed",
            "needs `model`",
        ),
        (
            {"kind": "openai", "managed": {"kind": "vllm", "model": "m", "colour": 1}},
            "models.backends.b.managed.colour",
            "Extra",
        ),
        (
            {
                "kind": "openai",
                "base_url": "http://127.0.0.1:1/v1",
                "managed": {"kind": "vllm", "model": "m"},
            },
            "models.backends.b.base_url",
            "comes from the managed server",
        ),
        (
            {"kind": "sglang", "urls": ["http://x:1"], "managed": {"kind": "sglang", "model": "m"}},
            "models.backends.b.urls",
            "comes from the managed server",
        ),
        (
            {"kind": "openai", "managed": {"kind": "command", "command": ["serve"]}},
            "models.backends.b.models",
            "Field required",
        ),
        (
            {"kind": "openai", "managed": {"kind": "vllm", "model": "m", "name": "a b"}},
            "models.backends.b.managed.name",
            "invalid actor name",
        ),
    ],
)
def test_a_bad_managed_entry_names_its_key(backend: dict[str, Any], where: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what) as caught:
        ModelRegistry.from_mapping({"backends": {"b": backend}})
    assert caught.value.where == where


@pytest.mark.anyio
async def test_a_configured_managed_server_serves_its_backend_across_a_crash() -> None:
    sim = managed_sim_backend(liveness_interval_s=0, backoff_initial_s=0.05)
    registry = ModelRegistry.from_mapping({"backends": {"sim": sim}})
    request = ModelRequest(messages=[UserMessage("hello")], sampling=SamplingParams(max_tokens=4))
    async with ActorSystem(stop_timeout=6.0) as system:
        (config,) = registry.managed_servers().values()
        handle = await spawn_managed_server(system, config)
        assert handle.ref.address.name == "sim"
        async with registry.create("sim-a") as backend:
            first = await backend.complete(request)
            assert first.model == "sim-a"
            pid = handle.server.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            with anyio.fail_after(30):
                while (await handle.status()).restarts < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                await handle.server.wait_healthy()
            status = await handle.status()
            assert status.state is ServerState.HEALTHY
            assert status.pid not in (None, pid)
            again = await backend.complete(request)
            assert again.model == "sim-a"
        await handle.stop()
