"""A vLLM server's own tokenizer (``POST /tokenize``) calibrates the context
budget of agents it serves, once, when the Runtime opens."""

from __future__ import annotations

from typing import Protocol

import httpx
import pytest

from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.models._prompt_estimate import CALIBRATION_MARGIN, CALIBRATION_TEXT

pytestmark = pytest.mark.anyio


class VllmServer(Protocol):
    """What the ``vllm_server`` fixture (conftest) gives."""

    base_url: str
    model: str


async def test_a_vllm_servers_tokenizer_calibrates_chars_per_token(
    vllm_server: VllmServer,
) -> None:
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=30) as client:
        reply = await client.post(
            "/tokenize", json={"model": vllm_server.model, "prompt": CALIBRATION_TEXT}
        )
    assert reply.status_code == 200, reply.text
    counted = reply.json()["count"]
    backends = {
        "vllm": {
            "kind": "openai",
            "base_url": f"{vllm_server.base_url}/v1",
            "models": [vllm_server.model],
        }
    }
    async with Runtime({"models": {"backends": backends, "default": "vllm"}}) as rt:
        ratio = rt.chars_per_token[vllm_server.model]
    assert ratio == pytest.approx(len(CALIBRATION_TEXT) / counted * CALIBRATION_MARGIN, abs=1e-3)
