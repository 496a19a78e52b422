"""A vLLM server's own tokenizer (``POST /tokenize``) calibrates the context
budget of agents it serves, once, when the Runtime opens."""

from __future__ import annotations

from typing import Protocol

import pytest

from agentrt.runtime.engine._runtime import Runtime

from .conftest import calibrated_chars_per_token

pytestmark = pytest.mark.anyio


class VllmServer(Protocol):
    """What the ``vllm_server`` fixture (conftest) gives."""

    base_url: str
    model: str


async def test_a_vllm_servers_tokenizer_calibrates_chars_per_token(
    vllm_server: VllmServer,
) -> None:
    expected = await calibrated_chars_per_token(vllm_server.base_url, vllm_server.model)
    backends = {
        "vllm": {
            "kind": "openai",
            "base_url": f"{vllm_server.base_url}/v1",
            "models": [vllm_server.model],
        }
    }
    async with Runtime({"models": {"backends": backends, "default": "vllm"}}) as rt:
        ratio = rt.chars_per_token[vllm_server.model]
    assert ratio == pytest.approx(expected, abs=1e-3)
